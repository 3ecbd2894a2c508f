"""CMA-ES with pycma's default constants (Hansen 2016; pycma ``CMAEvolutionStrategy``).

The update follows pycma 4.x exactly (``cma/evolution_strategy.py`` ``tell``), for its default
options without mirrored sampling; the pure functions it is made of (constants, sampling, the
update step by step, the lazy eigendecomposition) are the public CMA-ES core,
:mod:`evotensor.es.core.cma`, whose docstring lists the rules and their sources. This module is the
strategy around them.

Step size (``step_size="auto"``, pycma's default): cumulative step-size adaptation (CSA) below 300
dimensions and two-point adaptation (TPA, pycma's ``CMAAdaptSigmaTPA``) from ``n >= 300``
(``cma.evolution_strategy.TPA_dimension``). ``"csa"`` or ``"tpa"`` force either rule; the restart
wrappers (IPOP/BIPOP) take the same argument.

``preset="tutorial"`` gives the textbook constants of pycma's ``purecma`` (positive weights only,
the squared-length step-size rule; see :mod:`evotensor.es.core.cma`).

NaN/inf fitness is ranked last by :meth:`~evotensor.es.core.base.VectorStrategy.tell` before the
update sees it.

Example::

    es = CMAES(num_dims=10, sigma_init=0.5)
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)          # x: [pop, 10]
    state, metrics = es.tell(jax.random.key(2), state, x, jnp.sum(x**2, axis=1))
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError, check_choice, check_spread
from evotensor.es._moved import moved_names
from evotensor.es.core.base import (
    VectorStrategy,
    check_finite_template,
    float_dtype,
    population_size_or_default,
)
from evotensor.es.core.cma import (
    PRESETS,
    CMAESParams,
    cma_constants,
    cma_update,
    initial_state,
    params_from_constants,
    resolve_step_size,
    sample,
)

LARGE_DIMS = 2000  # above this, full C costs O(n^2) memory per run and O(n^3) per decomposition


class CMAES(VectorStrategy):
    """Covariance Matrix Adaptation Evolution Strategy (pycma defaults).

    Args:
        population_size: ``lambda``; ``None`` -> ``4 + floor(3 ln n)``.
        solution: template pytree (exclusive with ``num_dims``); its values are the default mean.
        num_dims: flat dimension ``n`` (exclusive with ``solution``); the default mean is 0.
        sigma_init: initial step size (> 0).
        preset: ``"pycma"`` (default) or ``"tutorial"`` (purecma's textbook constants).
        mean_init: optional initial mean, ``[n]`` or a pytree like ``solution``.
        step_size: ``"auto"`` (pycma's choice: CSA below 300 dimensions, TPA from 300 on; always
            CSA for ``preset="tutorial"``, as purecma), ``"csa"`` or ``"tpa"``.

    Warns:
        UserWarning when ``n > 2000``: full CMA-ES keeps ``n x n`` matrices (see
        :class:`~evotensor.es.SepCMAES`, :class:`~evotensor.es.LMMAES`).
    """

    name = "cma_es"
    square_matrices = 4  # C, B, the updated C, the eigendecomposition's workspace
    min_population_size = 2

    def __init__(
        self,
        population_size: int | None = None,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        sigma_init: float = 1.0,
        preset: str = "pycma",
        mean_init: Any = None,
        step_size: str = "auto",
    ):
        super().__init__(population_size_or_default(population_size, solution, num_dims), solution, num_dims)
        n, population_size = self.num_dims, self.population_size
        self.preset = check_choice(preset, "preset", PRESETS)
        self.step_size = resolve_step_size(step_size, n, preset)
        self.sigma_init = check_spread(sigma_init, "sigma_init")
        if n > LARGE_DIMS:
            warnings.warn(
                f"CMAES with num_dims={n} stores n x n matrices ({4 * n * n / 2**20:.0f} MiB each in "
                "float32) and eigendecomposes them in O(n^3); consider SepCMAES or LMMAES for large n",
                UserWarning,
                stacklevel=2,
            )
        self._mean_init = self._check_mean(mean_init)
        # exact float64 values (NumPy), for inspection and tests
        self.constants = cma_constants(n, population_size, population_size, preset, np, self.two_point)

    def _check_mean(self, mean_init: Any) -> np.ndarray:
        if mean_init is None:
            return np.asarray(self.initial_mean(), np.float64)
        leaves = jax.tree_util.tree_leaves(mean_init)
        if len(leaves) == 1 and np.ndim(leaves[0]) == 1 and np.shape(leaves[0])[0] == self.num_dims:
            flat = np.asarray(leaves[0], np.float64)
        else:
            try:
                flat = np.asarray(ravel_pytree(mean_init)[0], np.float64)
            except Exception as err:  # pragma: no cover - message below is what matters
                raise ArgumentError(f"mean_init could not be flattened: {err}") from err
        if flat.shape != (self.num_dims,):
            raise ArgumentError(f"mean_init must flatten to shape ({self.num_dims},), got {flat.shape}")
        check_finite_template(flat, "mean_init")
        return flat

    def default_params(self) -> CMAESParams:
        """pycma's (or purecma's) defaults as arrays of the default float dtype."""
        dtype = float_dtype()
        mean_init, sigma_init = jnp.asarray(self._mean_init, dtype), jnp.asarray(self.sigma_init, dtype)
        return params_from_constants(self.constants, dtype, mean_init, sigma_init)

    @property
    def squared_csa(self) -> bool:
        """Whether the step size follows purecma's squared-length rule (``preset="tutorial"``)."""
        return self.preset == "tutorial"

    @property
    def two_point(self) -> bool:
        """Whether the step size follows two-point adaptation (TPA) rather than CSA."""
        return self.step_size == "tpa"

    def _init(self, key, params):
        return initial_state(jnp.asarray(params.mean_init), params.sigma_init)

    def _ask(self, key, state, params):
        return sample(key, state, self.population_size, self.two_point), state

    def _tell(self, key, state, x, fitness, params):
        return cma_update(state, x, fitness, params, self.squared_csa, self.two_point)

    def __repr__(self) -> str:
        return (
            f"CMAES(population_size={self.population_size}, num_dims={self.num_dims}, "
            f"sigma_init={self.sigma_init}, preset={self.preset!r}, step_size={self.step_size!r})"
        )


# the pure building blocks moved to the public CMA-ES core, evotensor.es.core.cma (and its lazy
# eigendecomposition to evotensor.es.core.lazy_eigen)
__getattr__ = moved_names(
    __name__,
    {
        **{
            name: "evotensor.es.core.cma"
            for name in (
                "GUARDS",
                "STEP_SIZE_RULES",
                "TPA_DIMENSION",
                "CMAESState",
                "chi_n",
                "decompose",
                "lazy_eigen_update",
            )
        },
        "check_sigma_init": "evotensor.es.core.mean_sigma",
        "float_dtype": "evotensor.es.core.base",
        "population_size_or_default": "evotensor.es.core.base",
    },
)
