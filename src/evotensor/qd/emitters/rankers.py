"""Rankers: how a CMA emitter orders its batch before the CMA-ES update (pyribs' ``rankers.py``).

A :class:`Ranker` gives every solution a primary key (higher is better) and says whether solutions
are first grouped by their archive status (the two-stage rankers: new cells, then improvements,
then the rest) and whether it needs a random measure-space direction. Emitters take a ranker by
name (``"imp"``, ``"2imp"``, ``"obj"``, ``"2obj"``, ``"rd"``, ``"2rd"``, ``"nov"`` and
``"nslc"`` for a :class:`~evotensor.qd.ProximityArchive`'s novelty and local competition, and
``"density"`` for a :class:`~evotensor.qd.DensityArchive`'s, as pyribs) or as an object,
so a user ranks by any key of their own::

    novelty = Ranker("novelty", lambda objective, measures, info, direction: my_novelty(measures))
    emitter = CMAESEmitter(x0, 0.5, ranker=novelty)

Keys are compared descending; NaN keys rank last; ties go to the lower batch position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError
from evotensor.core.pareto import crowding_distance, nondominated_rank

# score(objective [B], measures [B, m], info (AddInfo), direction [m]) -> [B] primary key
Score = Callable[[jax.Array, jax.Array, object, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class Ranker:
    """One ranking rule.

    Attributes:
        name: what ``repr`` and errors call it.
        score: ``score(objective [B], measures [B, m], info, direction [m]) -> [B]``, the primary
            key, higher first; ``info`` is the archive's :class:`~evotensor.qd.archive.AddInfo`
            for the batch (``value``, ``status``, ``index``).
        two_stage: sort by ``info.status`` first (new cell, improved, not added), then by the key.
        uses_direction: the emitter draws a random measure-space direction (``N(0, I)`` scaled by
            the archive's measure ranges) at init and at every restart, passed as ``direction``.
    """

    name: str
    score: Score
    two_stage: bool = False
    uses_direction: bool = False

    def order(self, objective, measures, info, direction) -> tuple[jax.Array, jax.Array]:
        """``-> (order [B] int32, values)``, best first; ``values`` is ``[B]`` (one stage) or
        ``[B, 2]`` (status, key) (two stages), in batch order."""
        primary = jnp.asarray(self.score(objective, measures, info, direction), jnp.float32)
        key = jnp.where(jnp.isnan(primary), -jnp.inf, primary)
        position = jnp.arange(key.shape[0], dtype=jnp.int32)
        if self.two_stage:
            status = jnp.asarray(info.status, jnp.int32)
            order = lax.sort((-status, -key, position), num_keys=3)[-1]
            return order, jnp.stack([status.astype(jnp.float32), primary], axis=-1)
        return lax.sort((-key, position), num_keys=2)[-1], primary


def _improvement(objective, measures, info, direction):
    return info.value


def _objective(objective, measures, info, direction):
    return objective


def _projection(objective, measures, info, direction):
    # HIGHEST: exact float32 on GPUs (default there: TF32), so ranks match the CPU's
    return jnp.matmul(jnp.asarray(measures, jnp.float32), direction, precision=lax.Precision.HIGHEST)


def _reported(info, field: str, ranker: str, what: str, archive: str):
    """``info.<field>``, or an :class:`ArgumentError` saying that ``ranker`` needs an archive whose
    add reports ``what`` (such as ``archive``)."""
    value = getattr(info, field, None)
    if value is None:
        raise ArgumentError(
            f"ranker '{ranker}' needs an archive whose add reports each candidate's {what} "
            f"(evotensor.qd.{archive}), got {type(info).__name__}"
        )
    return value


def _novelty(objective, measures, info, direction):
    return _reported(info, "novelty", "nov", "novelty", "ProximityArchive")


def _rarity(objective, measures, info, direction):
    # the log density orders candidates whose float32 density underflows to 0 (far from the buffer)
    return -_reported(info, "log_density", "density", "density", "DensityArchive")


@dataclasses.dataclass(frozen=True)
class NSLCRanker(Ranker):
    """Novelty search with local competition's ranking (Lehman & Stanley 2011b; pyribs 0.12's
    ``NSLCRanker``): NSGA-II's non-dominated sort of (novelty, local competition), both maximized,
    then within a front the crowding distance in those two, largest first (equal distances: the lower
    batch position). Needs an archive whose add reports both (a ``ProximityArchive`` with
    ``local_competition=True``). A candidate with a non-finite novelty (an invalid one) ranks last.
    ``values``: ``[B, 2]`` (novelty, local competition), in batch order."""

    name: str = "nslc"
    score: Score = None  # type: ignore[assignment]

    def order(self, objective, measures, info, direction) -> tuple[jax.Array, jax.Array]:
        novelty = getattr(info, "novelty", None)
        local = getattr(info, "local_competition", None)
        if novelty is None or local is None:
            raise ArgumentError(
                "ranker 'nslc' needs an archive whose add reports novelty and local_competition "
                f"(evotensor.qd.ProximityArchive(local_competition=True)), got {type(info).__name__}"
            )
        novelty = jnp.asarray(novelty, jnp.float32)
        local = jnp.asarray(local, jnp.float32)
        batch = novelty.shape[0]
        position = jnp.arange(batch, dtype=jnp.int32)
        # both minimized: -novelty (a non-finite one is infeasible) and the dense rank of -local
        loss = jnp.where(jnp.isfinite(novelty), -novelty, jnp.inf)
        by_local = jnp.sort(-local)
        size = jnp.searchsorted(by_local, -local, side="left").astype(jnp.int32) + 1
        rank = nondominated_rank(loss, size, max(batch, 1))
        crowd = crowding_distance(loss, -local, rank)
        order = lax.sort((rank, -crowd, position), num_keys=3)[-1]
        return order, jnp.stack([novelty, local], axis=-1)


BUILTIN_RANKERS: dict[str, Ranker] = {
    "imp": Ranker("imp", _improvement),
    "2imp": Ranker("2imp", _improvement, two_stage=True),
    "obj": Ranker("obj", _objective),
    "2obj": Ranker("2obj", _objective, two_stage=True),
    "rd": Ranker("rd", _projection, uses_direction=True),
    "2rd": Ranker("2rd", _projection, two_stage=True, uses_direction=True),
    # pyribs' NoveltyRanker (novelty search with a ProximityArchive)
    "nov": Ranker("nov", _novelty),
    "nslc": NSLCRanker(),
    # pyribs' DensityRanker (Density Descent Search): lowest density first
    "density": Ranker("density", _rarity),
}


def get_ranker(ranker: str | Ranker) -> Ranker:
    """A :class:`Ranker` from a built-in name or an object."""
    if isinstance(ranker, Ranker):
        return ranker
    if isinstance(ranker, str) and ranker in BUILTIN_RANKERS:
        return BUILTIN_RANKERS[ranker]
    raise ArgumentError(f"ranker must be one of {tuple(BUILTIN_RANKERS)} or a Ranker, got {ranker!r}")
