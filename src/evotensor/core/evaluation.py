"""The result of scoring a population, and the orientation convention.

Strategies always *minimize*. A problem declares with ``maximize`` whether its natural objective
is maximized (returns, accuracy, QD fitness). :func:`to_minimization` turns a natural-orientation
:class:`Evaluation` into what strategies receive; everything a user sees (logs, plots, results)
stays in natural orientation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.pytree import pytree_dataclass


@pytree_dataclass
class Evaluation:
    """Scores of one population.

    Attributes:
        fitness: ``[pop]`` (or ``[pop, n_obj]``) objective values.
        descriptor: optional ``[pop, d]`` behaviour descriptors (quality-diversity).
        info: optional per-individual extras, any pytree with a leading ``pop`` axis
            (usually an :class:`evotensor.tree.Tree`).
        genotypes: optional, for Lamarckian local search: the evaluated individuals as the problem
            improved them (e.g. a GP tree with tuned constants), in the genotype form and shapes the
            strategy asked for; ``fitness`` is theirs. :func:`evotensor.run` then tells the
            strategy these (so the improvement is inherited) and tracks the best among them.
    """

    fitness: jax.Array
    descriptor: jax.Array | None = None
    info: Any = None
    genotypes: Any = None


def worst_for_nonfinite(fitness: jax.Array) -> jax.Array:
    """Replace NaN/inf entries of a *minimized* fitness by a value worse than every finite one.

    Args:
        fitness: ``[pop]`` or ``[pop, n_obj]`` (each objective column handled separately).

    Returns:
        Same shape; every non-finite entry becomes ``max_finite + gap`` with
        ``gap = max(max_finite - min_finite, 1e-6 |max_finite|, tiny)`` (clipped to the dtype's
        largest finite value): it ranks last and never turns state into NaN, and because the gap
        scales with the spread of the finite values it does not swamp value-based shaping
        (z-scores) near an optimum. If no entry of a column is finite, that column becomes zeros.
    """
    fitness = jnp.asarray(fitness)
    finite = jnp.isfinite(fitness)
    big = jnp.finfo(fitness.dtype).max
    max_finite = jnp.max(jnp.where(finite, fitness, -big), axis=0)
    min_finite = jnp.min(jnp.where(finite, fitness, big), axis=0)
    any_finite = jnp.any(finite, axis=0)
    tiny = jnp.finfo(fitness.dtype).tiny
    gap = jnp.maximum(max_finite - min_finite, jnp.maximum(1e-6 * jnp.abs(max_finite), tiny))
    worst = jnp.minimum(max_finite + gap, big)
    worst = jnp.where(any_finite, worst, 0.0)
    return jnp.where(finite, fitness, worst)


def to_minimization(evaluation: Evaluation, maximize: bool, keep_nonfinite: bool = False) -> Evaluation:
    """Evaluation as strategies see it: negated if ``maximize``; non-finite values made worst unless
    ``keep_nonfinite`` (for strategies that drop them themselves, e.g. a MAP-Elites archive).

    Non-finite entries become :func:`worst_for_nonfinite`'s stand-ins, except in a column (a
    generation, per objective) without a single finite entry: that column becomes all ``+inf``,
    never NaN and never the zeros :func:`worst_for_nonfinite` would give, so ``tell`` still sees that
    the generation carried no information and applies its own rule (a vector strategy keeps its
    state, an archive takes nothing in), exactly as in a loop that hands it the raw fitness.
    """
    fitness = -evaluation.fitness if maximize else evaluation.fitness
    if not keep_nonfinite:
        fitness = stand_ins_for_nonfinite(fitness)
    return evaluation.replace(fitness=fitness)  # type: ignore[attr-defined]


def stand_ins_for_nonfinite(fitness: jax.Array) -> jax.Array:
    """A *minimized* fitness ``[pop]`` (or ``[pop, n_obj]``) as the run loop hands it to a strategy:
    :func:`worst_for_nonfinite`'s stand-ins, except that a column without one finite entry becomes
    all ``+inf`` (the generation carried no information), never zeros. Strategies that take
    non-finite values themselves (``accepts_nonfinite``) apply it in their ``tell``."""
    fitness = jnp.asarray(fitness)
    none_finite = ~jnp.any(jnp.isfinite(fitness), axis=0)
    return jnp.where(none_finite, jnp.asarray(jnp.inf, fitness.dtype), worst_for_nonfinite(fitness))


def to_natural(fitness: jax.Array, maximize: bool) -> jax.Array:
    """Inverse of the sign flip of :func:`to_minimization` (for reporting)."""
    return -fitness if maximize else fitness
