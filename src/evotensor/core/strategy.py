"""The strategy protocol: pure ``init / ask / tell`` over pytree state.

A strategy object holds *static* configuration only (population size, the solution template, …)
and is immutable. Dynamic hyperparameters that users may ``vmap`` over live in a ``params``
pytree (:meth:`Strategy.default_params`). State is a :func:`pytree_dataclass`.

Every method is pure and jit-able::

    state = strategy.init(key, params)
    genotypes, state = strategy.ask(key, state, params)       # genotypes: leading [pop] axis
    state, metrics = strategy.tell(key, state, genotypes, evaluation, params)

``evaluation.fitness`` given to ``tell`` is *minimized* (see
:func:`evotensor.core.to_minimization`); the run loop converts for you.

Optional: ``compiler_options(platform) -> Mapping | None``, XLA options for the run's programs
(:mod:`evotensor.core.compiler_options`; NEAT asks for one on a CPU).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from evotensor.core.evaluation import Evaluation


@runtime_checkable
class Strategy(Protocol):
    """Anything with these methods is a strategy (structural typing)."""

    population_size: int

    def default_params(self) -> Any: ...

    def init(self, key: jax.Array, params: Any = None) -> Any: ...

    def ask(self, key: jax.Array, state: Any, params: Any = None) -> tuple[Any, Any]: ...

    def tell(
        self, key: jax.Array, state: Any, genotypes: Any, evaluation: Evaluation, params: Any = None
    ) -> tuple[Any, dict[str, jax.Array]]: ...


class SolutionSpace:
    """Flattens a solution template (any pytree of arrays) to a vector and back.

    Args:
        solution: a template pytree (array, dict, :class:`evotensor.tree.Tree`, flax/equinox
            parameters…). Only shapes and dtypes are used; values are the default initial point.

    Attributes:
        num_dims: length of the flat vector.
        template: the flat template vector ``[num_dims]`` (float32).
    """

    def __init__(self, solution: Any):
        leaves = jax.tree_util.tree_leaves(solution)
        if not leaves:
            raise ValueError("solution template has no array leaves")
        for path, leaf in jax.tree_util.tree_flatten_with_path(solution)[0]:
            if not hasattr(leaf, "shape") and not isinstance(leaf, (int, float)):
                raise TypeError(
                    f"solution template leaf at {jax.tree_util.keystr(path) or '<root>'} "
                    f"is {type(leaf).__name__}, expected an array"
                )
        solution = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), solution)
        flat, self._unravel = ravel_pytree(solution)
        self.template = flat
        self.num_dims = int(flat.shape[0])
        if self.num_dims == 0:
            raise ValueError("solution template has zero elements")
        self._is_flat = isinstance(solution, jax.Array) and solution.ndim == 1

    def unravel(self, x: jax.Array) -> Any:
        """``[num_dims] -> template pytree``."""
        return x if self._is_flat else self._unravel(x)

    def unravel_population(self, x: jax.Array) -> Any:
        """``[pop, num_dims] -> template pytree with a leading pop axis``."""
        return x if self._is_flat else jax.vmap(self._unravel)(x)

    def ravel_population(self, population: Any) -> jax.Array:
        """Inverse of :meth:`unravel_population`: ``-> [pop, num_dims]``."""
        if self._is_flat:
            return jnp.asarray(population)
        return jax.vmap(lambda p: ravel_pytree(p)[0])(population)


def as_solution_space(solution: Any = None, num_dims: int | None = None) -> SolutionSpace:
    """Build a :class:`SolutionSpace` from a template or a dimension count (exactly one)."""
    if (solution is None) == (num_dims is None):
        raise ValueError("give exactly one of `solution` (a template pytree) or `num_dims`")
    if num_dims is not None:
        if not isinstance(num_dims, (int,)) or isinstance(num_dims, bool) or num_dims < 1:
            raise ValueError(f"num_dims must be a positive int, got {num_dims!r}")
        return SolutionSpace(jnp.zeros(num_dims, jnp.float32))
    return SolutionSpace(solution)


def check_population_size(population_size: Any, minimum: int = 1, name: str = "population_size") -> int:
    """Validate a static population size and return it as ``int``."""
    if isinstance(population_size, bool) or not isinstance(population_size, int):
        raise TypeError(f"{name} must be an int, got {type(population_size).__name__}")
    if population_size < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {population_size}")
    return population_size
