"""Classic continuous test functions as function problems (all minimized, optimum 0).

Each problem scores a population ``[pop, dims] -> Evaluation(fitness [pop])``. Genotypes that are
pytrees are flattened first, so any solution template of ``num_dims`` elements works.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation


def sphere(x: jax.Array) -> jax.Array:
    """``sum(x**2)`` over the last axis. ``[..., d] -> [...]``."""
    return jnp.sum(x**2, axis=-1)


def rastrigin(x: jax.Array) -> jax.Array:
    """``10 d + sum(x**2 - 10 cos(2 pi x))``. ``[..., d] -> [...]``."""
    return 10.0 * x.shape[-1] + jnp.sum(x**2 - 10.0 * jnp.cos(2.0 * jnp.pi * x), axis=-1)


def rosenbrock(x: jax.Array) -> jax.Array:
    """``sum(100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2)``, optimum at ones. ``[..., d] -> [...]``."""
    return jnp.sum(100.0 * (x[..., 1:] - x[..., :-1] ** 2) ** 2 + (1.0 - x[..., :-1]) ** 2, axis=-1)


def ackley(x: jax.Array) -> jax.Array:
    """Ackley's function (a=20, b=0.2, c=2 pi). ``[..., d] -> [...]``."""
    d = x.shape[-1]
    term1 = -20.0 * jnp.exp(-0.2 * jnp.sqrt(jnp.sum(x**2, axis=-1) / d))
    term2 = -jnp.exp(jnp.sum(jnp.cos(2.0 * jnp.pi * x), axis=-1) / d)
    return term1 + term2 + 20.0 + math.e


_FUNCTIONS = {
    "sphere": (sphere, (-5.0, 5.0), 0.0),
    "rastrigin": (rastrigin, (-5.12, 5.12), 0.0),
    "rosenbrock": (rosenbrock, (-2.048, 2.048), 1.0),
    "ackley": (ackley, (-32.768, 32.768), 0.0),
}


@dataclasses.dataclass(frozen=True)
class ClassicFunction:
    """A classic test function as a function problem.

    Args:
        name: one of ``sphere``, ``rastrigin``, ``rosenbrock``, ``ackley``.
        num_dims: dimension (>= 1; >= 2 for rosenbrock).

    Attributes:
        bounds: the conventional initialization box ``(low, high)`` per coordinate.
        optimum: coordinate value of the global optimum (all coordinates equal).
    """

    name: str
    num_dims: int
    maximize: bool = dataclasses.field(default=False, init=False)
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or self.name not in _FUNCTIONS:
            raise ArgumentError(f"unknown function name {self.name!r}; choose from {', '.join(_FUNCTIONS)}")
        check_int(self.num_dims, "num_dims")
        if self.name == "rosenbrock" and self.num_dims < 2:
            raise ArgumentError(f"num_dims must be >= 2 for rosenbrock, got {self.num_dims!r}")

    @property
    def bounds(self) -> tuple[float, float]:
        return _FUNCTIONS[self.name][1]

    @property
    def optimum(self) -> float:
        return _FUNCTIONS[self.name][2]

    def __call__(self, x: jax.Array) -> jax.Array:
        """Objective of flat points ``[..., num_dims] -> [...]``."""
        return _FUNCTIONS[self.name][0](x)

    def evaluate(self, key: jax.Array, genotypes) -> Evaluation:
        """``genotypes``: ``[pop, num_dims]`` or a pytree with a leading pop axis."""
        x = (
            genotypes
            if isinstance(genotypes, jax.Array)
            else jax.vmap(lambda g: ravel_pytree(g)[0])(genotypes)
        )
        if x.ndim != 2 or x.shape[1] != self.num_dims:
            raise ArgumentError(f"{self.name}: genotypes must be [pop, {self.num_dims}], got {x.shape}")
        return Evaluation(fitness=self(x.astype(jnp.float32)))


def Sphere(num_dims: int) -> ClassicFunction:  # noqa: N802 - reads like a class
    """The sphere function problem on ``num_dims`` dimensions."""
    return ClassicFunction("sphere", num_dims)


def Rastrigin(num_dims: int) -> ClassicFunction:  # noqa: N802
    """The Rastrigin function problem on ``num_dims`` dimensions."""
    return ClassicFunction("rastrigin", num_dims)


def Rosenbrock(num_dims: int) -> ClassicFunction:  # noqa: N802
    """The Rosenbrock function problem on ``num_dims`` dimensions."""
    return ClassicFunction("rosenbrock", num_dims)


def Ackley(num_dims: int) -> ClassicFunction:  # noqa: N802
    """The Ackley function problem on ``num_dims`` dimensions."""
    return ClassicFunction("ackley", num_dims)
