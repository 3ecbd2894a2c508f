"""IPOP-CMA-ES (Auger & Hansen 2005, "A restart CMA evolution strategy with increasing population
size", CEC; pycma ``fmin(restarts=..., incpopsize=2)``): CMA-ES restarted with a doubled population
after each termination, as one jit-able strategy. The campaign machinery (dynamic population size,
termination criteria, restarts inside ``tell``) is :class:`evotensor.es.core.restarts.RestartCMAES`.
"""

from __future__ import annotations

from evotensor.es.core.restarts import RestartCMAES


class IPOPCMAES(RestartCMAES):
    """IPOP-CMA-ES: restart with a doubled population after each termination (jit-able).

    Args: as :class:`~evotensor.es.core.restarts.RestartCMAES` (``max_population_size``,
    ``base_population_size``, ``sigma_init``, ``mean_init``, ``init_bounds``, ``step_size``).

    ``ask`` returns ``max_population_size`` candidates; only the first ``state.population_size``
    are real (:meth:`active_mask`), the fitness of the others is ignored.

    Example::

        es = IPOPCMAES(num_dims=10, max_population_size=256, sigma_init=2.0)
        state = es.init(key)
        x, state = es.ask(k1, state)            # x: [256, 10]
        state, m = es.tell(k2, state, x, f(x))  # m["restarted"], m["population_size"]
    """

    name = "ipop_cma_es"
    bipop = False
