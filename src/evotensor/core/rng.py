"""Random draws with the same numbers as ``jax.random``, generated faster on the CPU.

On the CPU, JAX lowers its Threefry-2x32 hash as a rolled ``while`` loop (to keep compile times
short), which XLA:CPU runs as five passes over the whole array with nothing fused or vectorized
across them: ``jax.random.normal`` of a ``[256, 100]`` population costs ~0.43 ms of which ~0.3 ms
is the hash, and a ``[512, 100000]`` OpenAI-ES half-population ~1.1 s.
The same hash written out round by round fuses into one vectorized loop (2-3.5x faster).

Every function here has the signature and the *exact* results of its ``jax.random`` namesake:
for a Threefry key (the default), the key is re-wrapped in a PRNG implementation that differs
from JAX's only in how the counter-mode bits are computed (20 unrolled rounds instead of a loop;
the same counters, the same ``bits1 ^ bits2`` / ``bits1 << 32 | bits2`` combination as JAX's
partitionable Threefry), and the draw is done by ``jax.random`` itself. So ``uniform``, ``normal``,
``randint`` and friends keep JAX's exact transformations, and results do not depend on whether
the fast path is taken (tested bit for bit against ``jax.random``). Any other key (RBG,
a custom implementation), JAX's legacy non-partitionable Threefry mode, or a JAX without
``jax.extend.random.define_prng_impl`` falls back to ``jax.random`` unchanged.

Only draws and :func:`split` go through here (keys are folded with ``jax.random`` as usual), and
the re-wrapped key never escapes these functions, so state and checkpoints hold ordinary keys
(:func:`split` returns keys of the kind it was given).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 (Salmon et al. 2011, Random123)
_PARITY = np.uint32(0x1BD11BDA)
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _rotate_left(x: jax.Array, d: int) -> jax.Array:
    return lax.shift_left(x, np.uint32(d)) | lax.shift_right_logical(x, np.uint32(32 - d))


def threefry2x32(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds, unrolled: key words ``k1, k2`` (``[]`` uint32) hash the counter
    words ``x1, x2`` (uint32, any equal shapes) into two uint32 arrays of that shape."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1 = x1 + ks[0]
    x2 = x2 + ks[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(block + 1) % 3]
        x2 = x2 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _unrolled_random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    """``random_bits`` of JAX's partitionable Threefry: element ``i`` (row-major) hashes the
    64-bit counter ``i`` as ``(hi, lo)`` words; ``key`` is the ``[2]`` uint32 key data."""
    size = math.prod(shape)
    if size >= 2**32:  # the high counter word is not always 0: leave it to JAX
        return _THREEFRY.random_bits(key, bit_width, shape)
    lo = lax.iota(np.uint32, size).reshape(shape)
    bits1, bits2 = threefry2x32(key[0], key[1], jnp.zeros_like(lo), lo)
    dtype = _UINT[bit_width]
    if bit_width == 64:
        return lax.shift_left(bits1.astype(dtype), dtype(32)) | bits2.astype(dtype)
    if bit_width == 32:
        return bits1 ^ bits2
    return lax.convert_element_type(bits1 ^ bits2, dtype)


def _unrolled_split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``split`` of JAX's partitionable Threefry: key ``i`` (row-major) is the hash of the 64-bit
    counter ``i`` as ``(hi, lo)`` words, its two words the key data ``[*shape, 2]``."""
    size = math.prod(shape)
    if size >= 2**32:  # the high counter word is not always 0: leave it to JAX
        return _THREEFRY.split(key, shape)
    lo = lax.iota(np.uint32, size).reshape(shape)
    bits1, bits2 = threefry2x32(key[0], key[1], jnp.zeros_like(lo), lo)
    return jnp.stack([bits1, bits2], axis=-1)


def _define_impl() -> tuple[Any, Any]:
    try:
        from jax.extend.random import define_prng_impl, threefry_prng_impl
    except ImportError:  # pragma: no cover - a JAX without the extension API: plain jax.random
        return None, None
    impl = define_prng_impl(
        key_shape=(2,),
        seed=threefry_prng_impl.seed,
        split=_unrolled_split,
        random_bits=_unrolled_random_bits,
        fold_in=threefry_prng_impl.fold_in,
        name="threefry2x32_unrolled",
        tag="fryu",
    )
    return threefry_prng_impl, impl


_THREEFRY, _UNROLLED = _define_impl()


def fast_key(key: jax.Array) -> jax.Array:
    """``key`` re-wrapped so that ``jax.random`` draws from it give the same numbers faster, when
    that is possible (see the module docstring); otherwise ``key`` itself."""
    if _UNROLLED is None or not jax.config.jax_threefry_partitionable or not hasattr(key, "dtype"):
        return key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":
            return key
    else:  # a raw uint32 key: only the default implementation's, if that is Threefry
        raw_threefry = key.dtype == jnp.uint32 and key.shape[-1:] == (2,)
        if not raw_threefry or jax.config.jax_default_prng_impl != "threefry2x32":
            return key  # jax.random interprets (or rejects) it
    return jax.random.wrap_key_data(jax.random.key_data(key), impl=_UNROLLED)


def bits(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.bits`` (same signature, same numbers)."""
    return jax.random.bits(fast_key(key), *args, **kwargs)


def uniform(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.uniform`` (same signature, same numbers)."""
    return jax.random.uniform(fast_key(key), *args, **kwargs)


def normal(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.normal`` (same signature, same numbers)."""
    return jax.random.normal(fast_key(key), *args, **kwargs)


def randint(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.randint`` (same signature, same numbers)."""
    return jax.random.randint(fast_key(key), *args, **kwargs)


def permutation(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.permutation`` (same signature, same numbers)."""
    return jax.random.permutation(fast_key(key), *args, **kwargs)


def choice(key: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """``jax.random.choice`` (same signature, same numbers)."""
    return jax.random.choice(fast_key(key), *args, **kwargs)


def split(key: jax.Array, num: int | tuple[int, ...] = 2) -> jax.Array:
    """``jax.random.split`` (same signature, same keys, of ``key``'s own kind: a typed Threefry key
    gives typed Threefry keys, a raw ``uint32`` key raw ones), hashed by the unrolled Threefry (on
    the CPU one fused kernel instead of JAX's rolled loop)."""
    fast = fast_key(key)
    if fast is key:
        return jax.random.split(key, num)
    # materialized (a few words): the hash is elementwise, and XLA would otherwise recompute the
    # keys inside the kernel of every draw made from them
    data = lax.optimization_barrier(jax.random.key_data(jax.random.split(fast, num)))
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(key))
    return data
