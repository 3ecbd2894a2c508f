"""Density Descent Search's archive (Lee, Boyd & Nikolaidis 2024; pyribs' ``DensityArchive``).

It stores no elites: a reservoir of the measures seen so far and a Gaussian kernel density estimate
over it. Emitters that rank by density (``ranker="density"``: lowest density first) push their
search towards the thinly explored parts of measure space; a grid or CVT ``result_archive`` keeps
the elites, and the emitters draw their restart points from it::

    search = DensityArchive(measure_dim=2, buffer_size=10_000, bandwidth=25.6)
    emitter = CMAESEmitter(x0, 1.5, ranker="density", selection_rule="mu", restart_rule="basic")
    dds = MAPElites(search, [EmitterGroup(emitter, 15)], result_archive=GridArchive(...))

Rules (pyribs 0.12's where not said otherwise):

* **Density.** ``density(m) = sum_j phi(|m - b_j| / h) / (n h)`` over the ``n`` buffered measures
  ``b_j``, ``phi`` the standard normal density, ``h`` the bandwidth (pyribs' ``"kde"``, normalised
  by ``h`` whatever the dimension). ``add`` reports every candidate's density against the buffer
  *before* the batch, and its logarithm computed as a log-sum-exp: in float32 the density of a
  candidate farther than ~13 bandwidths from every buffered measure is 0, and pyribs ranks all such
  candidates as ties; their log density still orders them by distance. An empty buffer gives
  density 0 (log density ``-inf``) to every candidate.
* **Buffer: reservoir sampling** (Vitter's Algorithm R): the ``t``-th valid candidate of the run
  (``t`` from 0) goes to row ``t`` while ``t < N``, then to row ``j``, ``j`` uniform in ``0 .. t``,
  if ``j < N`` (else nowhere), so the buffer is a uniform sample of every valid measure seen. In
  one batch a later candidate overwrites an earlier one that drew the same row, as one at a time
  would. ``j`` comes from the state's key folded with ``t``: the buffer depends on the stream of
  measures only, not on how the stream is cut into batches. :class:`~evotensor.qd.MAPElites` draws
  that key from the run's key (independent runs, independent reservoirs); ``init()`` without a key
  takes the archive's ``seed``. pyribs implements Li's
  Algorithm L (skips), but in a batch every replacement after the first takes the batch's first
  remaining measure and counts one measure too few, so its buffer over-represents the first
  measures of batches (64 of 100 rows after 100 batches of 1000, where a uniform sample holds ~0.1;
  ``benchmarks/results_qd.md``, section 19).
* **Validity.** A candidate enters the buffer only with a finite objective, measures and solution
  (``status`` 2; otherwise 0 and it is not counted in ``t``): rows MAP-Elites only evaluates (an
  emitter's ``insert_mask``) and failed evaluations stay out. Its density is reported whenever its
  measures are finite (NaN otherwise, which a ranker puts last). pyribs raises on non-finite
  measures and ignores the objective.

``add`` costs ``O(B N D)`` (explicit differences, blocks of candidates) for ``B`` candidates and a
buffer of ``N`` rows of ``D`` measures. On a device mesh (:meth:`DensityArchive.on_mesh`, what
``evotensor.run(..., mesh=)`` uses) the state is small and kept whole on every device; each
candidate's density is the same computation wherever its row lies, so a run on a mesh equals the
one-device run.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import NEW, NOT_ADDED, AddInfo, candidate_is_valid, check_objective_measures
from evotensor.qd.replicated_state import ReplicatedState

_BLOCK_ELEMENTS = 2**22  # candidates x buffer rows x measures per block of the density


@pytree_dataclass
class DensityState:
    """State of a :class:`DensityArchive` of ``N = buffer_size`` rows.

    Attributes:
        buffer: ``[N, D]`` float32, the reservoir (rows ``size ..`` are zeros).
        size: ``[]`` int32, filled rows (``min(N, seen)``).
        seen: ``[]`` int32, valid candidates offered so far (the reservoir's stream position; a run
            may offer up to ``2^31 - 1``).
        key: the reservoir's key (a typed PRNG key).
    """

    buffer: jax.Array
    size: jax.Array
    seen: jax.Array
    key: jax.Array


@pytree_dataclass
class DensityAddInfo(AddInfo):
    """What :meth:`DensityArchive.add` reports (all ``[B]``, against the buffer before the batch).

    Attributes:
        status: int32, 2 for a valid candidate (it joined the stream), 0 otherwise.
        value: float32, ``-log_density`` (higher: rarer); ``-inf`` for an invalid candidate.
        index: int32, the buffer row the candidate was written to, -1 if none.
        density: float32 kernel density estimate (NaN for non-finite measures).
        log_density: float32 its logarithm, computed without underflow (NaN likewise).
    """

    density: jax.Array
    log_density: jax.Array


def kde_log_density(measures: jax.Array, buffer: jax.Array, size: jax.Array, bandwidth: float) -> jax.Array:
    """``log(sum_j phi(|m - b_j| / h) / (n h))`` of each row of ``measures [B, D]`` over the first
    ``size`` rows of ``buffer [N, D]`` (``n = size``): ``[B]`` float32, ``-inf`` when ``size`` is 0,
    NaN for a row with a non-finite entry. Distances are explicit differences (no GEMM)."""
    measures = jnp.asarray(measures, jnp.float32)
    buffer = jnp.asarray(buffer, jnp.float32)
    if buffer.ndim != 2 or measures.ndim != 2 or measures.shape[1] != buffer.shape[1]:
        raise ArgumentError(
            f"measures and buffer must be [B, D] and [N, D], got {list(measures.shape)} and "
            f"{list(buffer.shape)}"
        )
    rows, dims = buffer.shape
    filled = jnp.arange(rows) < size
    inv_h = jnp.float32(1.0 / bandwidth)
    norm = jnp.log(jnp.maximum(size, 1).astype(jnp.float32)) + jnp.float32(
        math.log(bandwidth) + 0.5 * math.log(2 * math.pi)
    )

    # [D, N]: each query's differences reduce over the leading axis, the buffer rows stay on the minor
    # axis (XLA:CPU vectorizes that; a minor axis of D = 2 it did not: results_qd.md, section 19)
    columns = buffer.T

    def one(m):
        z = (m[:, None] - columns) * inv_h
        exponent = jnp.where(filled, -0.5 * jnp.sum(z * z, axis=0), -jnp.inf)
        log_sum = jax.nn.logsumexp(exponent)
        out = jnp.where(size > 0, log_sum - norm, -jnp.inf)
        return jnp.where(jnp.all(jnp.isfinite(m)), out, jnp.nan)

    block = max(1, _BLOCK_ELEMENTS // max(1, rows * dims))
    return lax.map(one, measures, batch_size=min(block, max(1, measures.shape[0])))


class DensityArchive(ReplicatedState):
    """A reservoir of measures and its kernel density estimate (module docstring for the rules).

    Args (keyword-only):
        measure_dim: measure-space dimensions ``D``.
        buffer_size: reservoir rows ``N`` (pyribs' default 10,000).
        bandwidth: the Gaussian kernel's bandwidth ``h`` > 0, in measure units (pyribs' sphere
            example: 25.6 for measures in [-256, 256]).
        seed: the reservoir's draws when :meth:`init` is given no key (an int in ``[0, 2^32)``).

    Attributes:
        stores_elites: False: MAP-Elites then needs a ``result_archive``, which its emitters read
            their elites from.
        keyed_init: True: :class:`~evotensor.qd.MAPElites` hands :meth:`init` a key of the run.
        measure_dim, buffer_size, bandwidth, seed.
    """

    stores_elites = False
    keyed_init = True  # MAPElites hands init a key drawn from the run's
    extra_fields: dict[str, Any] = {}

    def __init__(self, *, measure_dim: int, buffer_size: int = 10_000, bandwidth: float, seed: int = 0):
        self.measure_dim = check_int(measure_dim, "measure_dim")
        self.buffer_size = check_int(buffer_size, "buffer_size")
        self.bandwidth = check_real(bandwidth, "bandwidth", low=0.0, low_open=True)
        self.seed = check_int(seed, "seed", minimum=0, maximum=2**32 - 1)

    def __repr__(self) -> str:
        return (
            f"DensityArchive(measure_dim={self.measure_dim}, buffer_size={self.buffer_size}, "
            f"bandwidth={self.bandwidth:g}, seed={self.seed})"
        )

    def init(self, key: jax.Array | None = None) -> DensityState:
        """An empty buffer whose reservoir draws come from ``key`` (default: the archive's ``seed``)."""
        return DensityState(
            buffer=jnp.zeros((self.buffer_size, self.measure_dim), jnp.float32),
            size=jnp.zeros((), jnp.int32),
            seen=jnp.zeros((), jnp.int32),
            key=jax.random.key(self.seed) if key is None else key,
        )

    def log_density(self, state: DensityState, measures: jax.Array) -> jax.Array:
        """``[B, D] -> [B]`` float32: the log density of each point against the buffer."""
        return kde_log_density(measures, state.buffer, state.size, self.bandwidth)

    def density(self, state: DensityState, measures: jax.Array) -> jax.Array:
        """``[B, D] -> [B]`` float32: pyribs' ``compute_density`` (0 on an empty buffer)."""
        return jnp.exp(self.log_density(state, measures))

    def add(
        self,
        state: DensityState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        fields: dict[str, jax.Array] | None = None,
    ) -> tuple[DensityState, DensityAddInfo]:
        """Report each candidate's density, then offer the valid ones to the reservoir in batch order.

        Args:
            solutions: ``[B, ...]`` (or a genotype pytree): only checked for finiteness.
            objective: ``[B]`` float32: only checked for finiteness.
            measures: ``[B, D]`` float32.
            fields: ignored (the archive stores no elites).
        """
        objective, measures = check_objective_measures(objective, measures, self.measure_dim)
        log_density = self.log_density(state, measures)
        valid = candidate_is_valid(solutions, objective, measures)
        # Algorithm R over the valid candidates: t is each one's position in the run's stream
        t = state.seen + jnp.cumsum(valid, dtype=jnp.int32) - 1
        draw = jax.vmap(lambda s: rng.randint(jax.random.fold_in(state.key, s), (), 0, s + 1))(t)
        n = self.buffer_size
        row = jnp.where(t < n, t, draw)
        row = jnp.where(valid & (row < n), row, n)  # n: written nowhere
        # several candidates drawing one row: the latest in the stream is the one left there
        last = jax.ops.segment_max(jnp.where(row < n, t, -1), row, num_segments=n + 1)
        written = (row < n) & (t == last[row])
        target = jnp.where(written, row, n)
        buffer = state.buffer.at[target].set(measures, mode="drop", unique_indices=True)
        seen = state.seen + jnp.sum(valid, dtype=jnp.int32)
        info = DensityAddInfo(
            status=jnp.where(valid, NEW, NOT_ADDED).astype(jnp.int32),
            value=jnp.where(valid, -log_density, -jnp.inf),
            index=jnp.where(written, row, -1).astype(jnp.int32),
            density=jnp.exp(log_density),
            log_density=log_density,
        )
        return state.replace(buffer=buffer, size=jnp.minimum(seen, n), seen=seen), info

    def buffer(self, state: DensityState) -> np.ndarray:
        """The filled rows of the reservoir, ``[size, D]`` (NumPy)."""
        return np.asarray(state.buffer)[: int(state.size)]
