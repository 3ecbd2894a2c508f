"""BIPOP-CMA-ES (Hansen 2009, "Benchmarking a BI-population CMA-ES on the BBOB-2009 function
testbed", GECCO; pycma ``fmin(bipop=True)``) as one jit-able strategy: IPOP's growing
large-population runs interleaved with small-population runs of random step size, their evaluation
budgets balanced. The campaign machinery is :class:`evotensor.es.core.restarts.RestartCMAES`.
"""

from __future__ import annotations

from evotensor.es.core.restarts import RestartCMAES


class BIPOPCMAES(RestartCMAES):
    """BIPOP-CMA-ES: interleaves IPOP's growing large-population runs with small-population runs
    of random step size, balancing their evaluation budgets (jit-able; see
    :class:`~evotensor.es.IPOPCMAES`).

    Args: as :class:`~evotensor.es.core.restarts.RestartCMAES`.
    """

    name = "bipop_cma_es"
    bipop = True
