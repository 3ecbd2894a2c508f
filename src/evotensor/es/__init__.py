"""Evolution strategies: one algorithm per module, pure init/ask/tell, jit- and vmap-able.

The algorithms are the modules of this package (``cma_es.py``, ``open_es.py``, ...; iAMaLGaM's full
and univariate models share ``iamalgam.py``). What they are built from lives in
:mod:`evotensor.es.core`: the strategy base classes and the shared constructors of each family, the
optimizers, the CMA-ES core, termination criteria, the restart machinery and population sharding.

Names are imported lazily (``evotensor.es.CMAES`` imports only ``cma_es.py`` and what it needs), so
importing the package stays cheap and a strategy's module is loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module (file) in this package
_STRATEGIES: dict[str, str] = {
    # finite-difference gradient ES
    "OpenES": "open_es",
    "PGPE": "pgpe",
    "ARS": "ars",
    "PersistentES": "persistent_es",
    "NoiseReuseES": "noise_reuse_es",
    "ESMC": "esmc",
    # natural / pre-conditioned
    "XNES": "xnes",
    "SNES": "snes",
    "CRFMNES": "cr_fm_nes",
    "GuidedES": "guided_es",
    "ASEBO": "asebo",
    # estimation of distribution
    "CMAES": "cma_es",
    "SepCMAES": "sep_cma_es",
    "IPOPCMAES": "ipop_cma_es",
    "BIPOPCMAES": "bipop_cma_es",
    "RmES": "rm_es",
    "MAES": "ma_es",
    "LMMAES": "lm_ma_es",
    "IAMaLGaMFull": "iamalgam",
    "IAMaLGaMUnivariate": "iamalgam",
    "SimpleES": "simple_es",
    "DiscoveredES": "discovered_es",
    "CEM": "cem",
    # genetic algorithms
    "SimpleGA": "simple_ga",
    "SAMRGA": "samr_ga",
    "GESMRGA": "gesmr_ga",
    "MR15GA": "mr15_ga",
    # other
    "PSO": "pso",
    "DE": "de",
    "GLD": "gld",
    "SimulatedAnnealing": "simulated_annealing",
    "HillClimbing": "hill_climbing",
    "RandomSearch": "random_search",
    "PBT": "pbt",
}

__all__ = sorted(_STRATEGIES) + ["VectorStrategy"]


def __getattr__(name: str) -> Any:
    if name == "VectorStrategy":
        from evotensor.es.core.base import VectorStrategy

        return VectorStrategy
    module = _STRATEGIES.get(name)
    if module is None:
        raise AttributeError(f"module 'evotensor.es' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
