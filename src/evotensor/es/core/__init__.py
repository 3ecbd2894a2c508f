"""The machinery the evolution strategies of :mod:`evotensor.es` are built from.

* :mod:`.base` — :class:`~.base.VectorStrategy` (solution space, input checks, the NaN/inf and
  all-invalid-generation rules of ``tell``), :class:`~.base.InvalidAsInfStrategy` (archives and
  elitist searches), best-so-far helpers, population-size defaults.
* Family bases with the constructors their members share: :mod:`.gradient_es` (optax optimizer,
  fitness shaping, sigma schedule: OpenES, ARS, ESMC, Guided ES, ASEBO, PGPE), :mod:`.online_es`
  (PES, NRES), :mod:`.nes` (xNES, SNES), :mod:`.mean_sigma` (MA-ES, LM-MA-ES, Rm-ES, Sep-CMA-ES),
  :mod:`.ga_base` (the Gaussian GAs), :mod:`.diagonal_gaussian` (CEM, Discovered ES).
* :mod:`.cma` — the public CMA-ES core (constants, params/state, sampling, the update step by step),
  with its lazy eigendecomposition in :mod:`.lazy_eigen`; :mod:`.restarts` — IPOP/BIPOP campaigns;
  :mod:`.termination` — pycma's stopping criteria.
* :mod:`.optimizers` (ClipUp, optimizer and sigma-schedule checks), :mod:`.sampling` (noise drawn in
  blocks for large populations), :mod:`.sharding` (the population split over devices).

Algorithms import from here; nothing here imports an algorithm.
"""
