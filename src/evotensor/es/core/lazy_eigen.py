"""The eigendecomposition of CMA-ES's covariance matrix, done lazily and kept lazy under ``vmap``.

``C = B diag(D^2) B^T`` is decomposed only when ``lazy_gap`` generations passed since the last
decomposition (pycma's lazy update, ``CMAEvolutionStrategy.updateBD``): the O(n^3) ``eigh`` then does
not dominate each generation. :func:`decompose` is the guarded decomposition itself and
:func:`lazy_eigen_update` the "decompose if due" step of :func:`evotensor.es.core.cma.cma_update`
(and of the CMA-ES emitter of :mod:`evotensor.qd`).

The custom batching rules below exist for ``vmap``: a ``lax.cond`` on a batched predicate is
lowered to a ``select`` that computes both branches, so a vmapped CMA-ES would decompose every run
at every generation. They batch it as "decompose the whole stack if any run is due, then let each
run keep its old or its new factors", which stays bit-identical to separate runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.lax import Precision


def decompose(C: jax.Array, B_old: jax.Array, D_old: jax.Array, max_condition: jax.Array):
    """Symmetrize and eigendecompose ``C``; lift eigenvalues to ``max_condition`` (pycma's
    ``limit_condition``: add the same ``eps`` to ``C``'s diagonal). A non-finite result keeps the
    previous ``B, D`` and rebuilds ``C`` from them.

    Args:
        C: ``[n, n]`` covariance matrix (or ``[k, n, n]``, a stack of ``k`` runs: every other
            argument then has the same leading ``k``; ``max_condition`` is ``[k]``).
        B_old, D_old: ``[n, n]``, ``[n]`` factors of the last decomposition.
        max_condition: ``[]`` largest allowed condition number.

    Returns:
        ``(C [n, n], B [n, n], D [n])`` (each with the leading ``k`` for a stack).
    """
    C = (C + jnp.swapaxes(C, -1, -2)) / 2
    # C is now exactly symmetric, so jnp.linalg.eigh's own symmetrization would be a no-op pass
    ev, B = jnp.linalg.eigh(C, symmetrize_input=False)
    tiny = jnp.finfo(C.dtype).tiny
    ev_max = jnp.maximum(ev[..., -1], tiny)
    ev_min = ev[..., 0]
    # eps so that (ev_max + eps) / (ev_min + eps) == max_condition when the limit is exceeded
    excess = ev_max - max_condition * ev_min
    eps = jnp.where(excess > 0, excess / (max_condition - 1), 0.0)[..., None]  # [(k,) 1]
    ev = jnp.maximum(ev + eps, tiny)
    C = C + eps[..., None] * jnp.eye(C.shape[-1], dtype=C.dtype)
    ok = (jnp.all(jnp.isfinite(ev), axis=-1) & jnp.all(jnp.isfinite(B), axis=(-2, -1)))[..., None]
    B = jnp.where(ok[..., None], B, B_old)
    D = jnp.where(ok, jnp.sqrt(ev), D_old)

    # the O(n^3) rebuild only runs when needed (for a stack: when some run of it needs it)
    def _rebuilt():
        rebuilt = jnp.matmul(
            B_old * D_old[..., None, :] ** 2, jnp.swapaxes(B_old, -1, -2), precision=Precision.HIGHEST
        )
        return jnp.where(ok[..., None], C, rebuilt)

    C = jax.lax.cond(jnp.all(ok), lambda: C, _rebuilt)
    return C, B, D


# --- the lazy update, kept lazy under ``vmap`` ----------------------------------------------------
# ``lax.cond`` on a batched predicate is lowered by ``vmap`` to a ``select`` that computes both
# branches, so a vmapped CMA-ES would decompose every run at every generation. These two
# ``custom_vmap`` functions batch it as "decompose the whole stack if ANY run is due, then let each
# run keep its old or its new factors" instead; ``_lazy_stack``'s own rule merges a further
# ``vmap`` axis into the stack, so nested vmaps (seeds x hyperparameters) keep the branch too.
# Every run of the stack computes exactly what a separate run computes (on CPU, batched ``eigh`` is a
# loop of the same LAPACK call), so results stay bit-identical to separate runs (tested).
def _lazy_keep_or_decompose(do, C, B, D, last_eigen, generation, max_condition):
    """Stack of ``k`` runs (every argument has a leading ``[k]``): new factors for the runs where
    ``do [k]`` holds; no ``eigh`` at all when none does."""

    def decomposed():
        C2, B2, D2 = decompose(C, B, D, max_condition)
        return (
            jnp.where(do[:, None, None], C2, C),
            jnp.where(do[:, None, None], B2, B),
            jnp.where(do[:, None], D2, D),
            jnp.where(do, generation, last_eigen),
        )

    return jax.lax.cond(jnp.any(do), decomposed, lambda: (C, B, D, last_eigen))


def _broadcast_unbatched(axis_size, in_batched, args):
    """Every argument with the vmapped axis in front (unbatched ones broadcast to ``axis_size``)."""
    return [a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args, in_batched)]


@jax.custom_batching.custom_vmap
def _lazy_stack(do, C, B, D, last_eigen, generation, max_condition):
    return _lazy_keep_or_decompose(do, C, B, D, last_eigen, generation, max_condition)


@_lazy_stack.def_vmap
def _lazy_stack_vmap(axis_size, in_batched, *args):
    # [m, k, ...] -> [m * k, ...]: one stack, and a call that an outer vmap batches by this rule again
    full = _broadcast_unbatched(axis_size, in_batched, args)
    k = full[0].shape[1]
    merged = [jnp.reshape(a, (axis_size * k, *a.shape[2:])) for a in full]
    out = _lazy_stack(*merged)
    return tuple(jnp.reshape(o, (axis_size, k, *o.shape[1:])) for o in out), (True,) * 4


def _lazy_eigen_update_plain(do, C, B, D, last_eigen, generation, max_condition):
    """The unbatched lazy update: a ``lax.cond`` (also the differentiation rule, see below)."""

    def _decomposed():
        return (*decompose(C, B, D, max_condition), generation)

    return jax.lax.cond(do, _decomposed, lambda: (C, B, D, last_eigen))


@jax.custom_batching.custom_vmap
def _lazy_eigen_update_batchable(do, C, B, D, last_eigen, generation, max_condition):
    return _lazy_eigen_update_plain(do, C, B, D, last_eigen, generation, max_condition)


@_lazy_eigen_update_batchable.def_vmap
def _lazy_eigen_update_vmap(axis_size, in_batched, *args):
    return tuple(_lazy_stack(*_broadcast_unbatched(axis_size, in_batched, args))), (True,) * 4


@jax.custom_jvp
def lazy_eigen_update(do, C, B, D, last_eigen, generation, max_condition):
    """``(C, B, D, last_eigen)`` after a decomposition if ``do``, else unchanged (``C`` as given).

    Args:
        do: ``[]`` bool, whether the lazy-update gap has passed.
        C: ``[n, n]`` updated covariance; B, D: ``[n, n]``, ``[n]`` factors of the last decomposition.
        last_eigen, generation: ``[]`` int32; ``last_eigen`` becomes ``generation`` if ``do``.
        max_condition: ``[]`` condition-number limit (see :func:`decompose`).

    Under ``vmap`` it stays lazy: the ``eigh`` runs only in generations where some run is due.
    Differentiation (``jax.grad`` through ``tell``, e.g. meta-learning) uses the plain ``lax.cond``'s
    derivative: ``custom_vmap`` alone has no reverse-mode rule.
    """
    return _lazy_eigen_update_batchable(do, C, B, D, last_eigen, generation, max_condition)


@lazy_eigen_update.defjvp
def _lazy_eigen_update_jvp(primals, tangents):
    return jax.jvp(_lazy_eigen_update_plain, primals, tangents)
