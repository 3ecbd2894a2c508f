"""Small policy networks as pure functions over parameter pytrees, for neuroevolution.

The parameter pytree is what an evolution strategy evolves: pass ``init_mlp(key, sizes)`` as the
strategy's ``solution`` template and the strategy hands back populations of the same structure
(with a leading ``pop`` axis). :class:`ParamsDecoder` is the decoder policy problems need: its
``decode`` is the identity and its ``apply`` runs the network on one input.

Layouts:

* MLP: a tuple of layers ``({"w": [in, out], "b": [out]}, ...)``.
* CNN: ``{"conv": ({"w": [k, k, c_in, c_out], "b": [c_out]}, ...), "dense": <MLP layers>}``;
  each conv layer is a SAME convolution, ReLU and a 2x2 max-pool, then the feature map is
  flattened into the MLP head.

Example::

    params = init_mlp(jax.random.key(0), (4, 32, 2))      # CartPole: 4 observations, 2 actions
    logits = mlp_apply(params, obs)                         # obs [..., 4] -> [..., 2]
    decoder = ParamsDecoder(mlp_apply)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import ArgumentError

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "sigmoid": jax.nn.sigmoid,
    "identity": lambda x: x,
}


def _activation(name: str | Callable[[jax.Array], jax.Array], arg: str) -> Callable[[jax.Array], jax.Array]:
    if callable(name):
        return name
    if name not in ACTIVATIONS:
        raise ArgumentError(f"{arg} must be a callable or one of {', '.join(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def _check_sizes(sizes: Sequence[int], arg: str, minimum: int) -> tuple[int, ...]:
    sizes = tuple(sizes)
    if len(sizes) < minimum:
        raise ArgumentError(f"{arg} needs at least {minimum} entries, got {sizes!r}")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ArgumentError(f"{arg} must contain positive ints, got {sizes!r}")
    return sizes


def _dense(key: jax.Array, fan_in: int, fan_out: int) -> dict[str, jax.Array]:
    # LeCun-normal weights keep pre-activations O(1) at the initial mean; biases start at 0.
    w = rng.normal(key, (fan_in, fan_out), jnp.float32) / jnp.sqrt(float(fan_in))
    return {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}


def init_mlp(key: jax.Array, sizes: Sequence[int]) -> tuple[dict[str, jax.Array], ...]:
    """Parameters of an MLP with layer widths ``sizes = (in, hidden..., out)``.

    Returns:
        a tuple of ``len(sizes) - 1`` layers ``{"w": [in, out], "b": [out]}`` (float32).
    """
    sizes = _check_sizes(sizes, "sizes", 2)
    keys = jax.random.split(key, len(sizes) - 1)
    return tuple(_dense(k, a, b) for k, a, b in zip(keys, sizes[:-1], sizes[1:]))


def mlp_apply(
    params: Sequence[dict[str, jax.Array]],
    x: jax.Array,
    activation: str | Callable = "tanh",
    output_activation: str | Callable = "identity",
) -> jax.Array:
    """Run the MLP on ``x [..., in] -> [..., out]`` (any leading batch axes).

    ``activation`` follows every hidden layer, ``output_activation`` the last one.
    """
    hidden = _activation(activation, "activation")
    last = _activation(output_activation, "output_activation")
    h = jnp.asarray(x, jnp.float32)
    for i, layer in enumerate(params):
        h = h @ layer["w"] + layer["b"]
        h = last(h) if i == len(params) - 1 else hidden(h)
    return h


def init_cnn(
    key: jax.Array,
    input_shape: Sequence[int],
    channels: Sequence[int] = (8, 16),
    dense_sizes: Sequence[int] = (32, 10),
    kernel_size: int = 3,
) -> dict[str, Any]:
    """Parameters of a small CNN for images ``[H, W, C]``.

    Args:
        input_shape: ``(H, W, C)`` of one input image.
        channels: output channels of each conv layer (each followed by ReLU and a 2x2 max-pool).
        dense_sizes: widths of the MLP head after flattening (the last one is the output size).
        kernel_size: square kernel size of every conv layer.

    Returns:
        ``{"conv": ({"w": [k, k, c_in, c_out], "b": [c_out]}, ...), "dense": <MLP layers>}``.
    """
    input_shape = _check_sizes(input_shape, "input_shape", 3)
    if len(input_shape) != 3:
        raise ArgumentError(f"input_shape must be (H, W, C), got {input_shape!r}")
    channels = _check_sizes(channels, "channels", 1)
    dense_sizes = _check_sizes(dense_sizes, "dense_sizes", 1)
    _check_sizes((kernel_size,), "kernel_size", 1)
    height, width, c_in = input_shape
    k_conv, k_dense = jax.random.split(key)
    conv = []
    for k, c_out in zip(jax.random.split(k_conv, len(channels)), channels):
        fan_in = kernel_size * kernel_size * c_in
        shape = (kernel_size, kernel_size, c_in, c_out)
        w = rng.normal(k, shape, jnp.float32) / jnp.sqrt(float(fan_in))
        conv.append({"w": w, "b": jnp.zeros((c_out,), jnp.float32)})
        height, width, c_in = height // 2, width // 2, c_out  # the 2x2 max-pool (floor)
        if height < 1 or width < 1:
            raise ArgumentError(
                f"input_shape {input_shape!r} is too small for {len(channels)} pooling layers"
            )
    flat = height * width * c_in
    return {"conv": tuple(conv), "dense": init_mlp(k_dense, (flat, *dense_sizes))}


def cnn_apply(
    params: dict[str, Any],
    x: jax.Array,
    activation: str | Callable = "relu",
    output_activation: str | Callable = "identity",
) -> jax.Array:
    """Run the CNN on images ``x [..., H, W, C] -> [..., out]`` (any leading batch axes)."""
    x = jnp.asarray(x, jnp.float32)
    if x.ndim < 3:
        raise ArgumentError(f"cnn_apply expects images [..., H, W, C], got shape {x.shape}")
    lead = x.shape[:-3]
    h = x.reshape((-1, *x.shape[-3:]))  # NHWC
    for layer in params["conv"]:
        h = jax.lax.conv_general_dilated(
            h, layer["w"], window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = jax.nn.relu(h + layer["b"])
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = h.reshape((h.shape[0], -1))
    out = mlp_apply(params["dense"], h, activation, output_activation)
    return out.reshape((*lead, out.shape[-1]))


@dataclasses.dataclass(frozen=True)
class ParamsDecoder:
    """Decoder for strategies that already produce parameter pytrees (the ES neuroevolution case).

    Args:
        apply_fn: ``apply_fn(params, x, **kwargs) -> y`` (e.g. :func:`mlp_apply`).
        **kwargs: fixed keyword arguments of ``apply_fn`` (``activation="relu"``…).

    ``decode(genotypes)`` returns the genotypes unchanged; ``apply(phenotype, x)`` runs the network.
    """

    apply_fn: Callable[..., jax.Array]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __init__(self, apply_fn: Callable[..., jax.Array], **kwargs: Any):
        if not callable(apply_fn):
            raise ArgumentError(f"apply_fn must be callable, got {type(apply_fn).__name__}")
        object.__setattr__(self, "apply_fn", apply_fn)
        object.__setattr__(self, "kwargs", tuple(sorted(kwargs.items())))

    def decode(self, genotypes: Any) -> Any:
        """Identity: the genotype *is* the parameter pytree (with a leading ``pop`` axis)."""
        return genotypes

    def apply(self, phenotype: Any, x: jax.Array) -> jax.Array:
        """Network output for one phenotype (no ``pop`` axis) on ``x``."""
        return self.apply_fn(phenotype, x, **dict(self.kwargs))
