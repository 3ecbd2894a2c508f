"""An emitter for genotypes of any structure: elites drawn uniformly from an archive of genotypes
(``Archive(genotype=...)``) and changed by a variation function the user passes in.

This is how MAP-Elites runs over what the other families evolve (a GP tree, a parameter pytree of
a policy, any fixed-shape encoding): the archive stores the genotypes leaf by leaf, the variation
is the family's own operator. Emitters whose variation keeps a state between generations (NEAT's
global innovation counters) implement the emitter protocol themselves
(:class:`evotensor.neat.NEATEmitter`).

Example (a parameter pytree, Gaussian variation of every float leaf)::

    template = {"w": jnp.zeros((4, 2)), "b": jnp.zeros(2)}

    def mutate(key, parents):                      # parents: the template's structure, [batch]
        leaves, tree = jax.tree_util.tree_flatten(parents)
        keys = jax.random.split(key, len(leaves))
        noisy = [x + 0.1 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)]
        return jax.tree_util.tree_unflatten(tree, noisy)

    emitter = GenotypeEmitter(mutate, initial=lambda key, n: ..., batch_size=64)
    me = MAPElites(GridArchive(genotype=template, dims=(32, 32), ranges=...), [emitter])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.qd.archive import AddInfo, Archive, ArchiveState


def _check_archive(archive: Any, who: str) -> None:
    if getattr(archive, "genotype", None) is None:
        raise ArgumentError(
            f"{who} varies genotypes: give the archive a genotype template (e.g. "
            "GridArchive(genotype=..., dims=..., ranges=...)); for flat solutions use GaussianEmitter, "
            "IsoLineEmitter or CMAESEmitter"
        )


def _check_batch(archive: Any, genotypes: Any, batch_size: int, what: str) -> Any:
    """``genotypes`` as the archive's structure with a leading ``[batch_size]`` axis (an
    :class:`ArgumentError` naming ``what`` otherwise); dtypes cast to the template's kinds."""
    want = jax.tree_util.tree_structure(archive.genotype)
    if jax.tree_util.tree_structure(genotypes) != want:
        raise ArgumentError(
            f"{what} must have the archive's genotype structure {want}, got "
            f"{jax.tree_util.tree_structure(genotypes)}"
        )
    out = []
    paths = jax.tree_util.tree_flatten_with_path(genotypes)[0]
    for (path, value), spec in zip(paths, jax.tree_util.tree_leaves(archive.genotype), strict=True):
        if value.shape != (batch_size, *spec.shape):
            raise ArgumentError(
                f"{what}{jax.tree_util.keystr(path)} must have shape {[batch_size, *spec.shape]}, "
                f"got {list(value.shape)}"
            )
        out.append(value.astype(spec.dtype))
    return jax.tree_util.tree_unflatten(want, out)


class GenotypeEmitter:
    """``batch_size`` offspring per ask: parents drawn uniformly (with replacement) among the
    archive's elites, then ``variation(key, parents) -> offspring`` (both the archive's genotype
    structure with a leading ``[batch_size]`` axis; pure and jit-able). While the archive is empty
    the batch is ``initial(key, batch_size)`` instead.

    Args:
        variation: the operator, e.g. a family's mutation (a crossover may pair the parents
            itself, e.g. with a permutation of the batch).
        initial: ``(key, n) -> genotypes [n]``: the first batch.
        batch_size: offspring per generation.

    Stateless (its state is ``()``); ``tell`` learns nothing.
    """

    def __init__(
        self,
        variation: Callable[[jax.Array, Any], Any],
        initial: Callable[[jax.Array, int], Any],
        batch_size: int = 64,
    ):
        if not callable(variation):
            raise ArgumentError(f"variation must be callable (key, parents) -> offspring, got {variation!r}")
        if not callable(initial):
            raise ArgumentError(f"initial must be callable (key, n) -> genotypes, got {initial!r}")
        self.variation = variation
        self.initial = initial
        self.batch_size = check_int(batch_size, "batch_size")

    def init(self, key: jax.Array, archive: Archive) -> tuple[()]:
        """No state (the archive's structure is checked here)."""
        del key
        _check_archive(archive, "GenotypeEmitter")
        return ()

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Archive, archive_state: ArchiveState
    ) -> tuple[Any, tuple[()]]:
        """``-> (genotypes [batch_size], state)``."""
        parent_key, variation_key, initial_key = jax.random.split(key, 3)
        n = self.batch_size

        def offspring():
            cells = archive.sample_elites(parent_key, archive_state, n)
            parents = archive.elite_solutions(archive_state, cells)
            return _check_batch(archive, self.variation(variation_key, parents), n, "variation's offspring")

        def first():
            return _check_batch(archive, self.initial(initial_key, n), n, "initial's genotypes")

        return lax.cond(archive.has_elites(archive_state), offspring, first), state

    def tell(
        self,
        key: jax.Array,
        state: tuple[()],
        archive: Archive,
        archive_state: ArchiveState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> tuple[()]:
        """Nothing to learn."""
        return state

    def __repr__(self) -> str:
        return f"GenotypeEmitter(batch_size={self.batch_size}, variation={self.variation!r})"
