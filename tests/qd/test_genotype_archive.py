"""Archives of genotypes of any structure (``Archive(genotype=...)``), the GenotypeEmitter, and
MAP-Elites / the bandit scheduler over them.

The insertion rules are the flat archive's: every kind of archive storing a genotype pytree gives
the same status, value, index and elite fields as the same archive storing the genotype's float
leaf as its flat solution (and its integer leaf as an extra field), for batches with ties, repeats,
NaN/inf entries (hypothesis). Integer and bool leaves are stored exactly and never checked for
finiteness."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.qd import (
    NEW,
    NOT_ADDED,
    BanditMAPElites,
    CVTArchive,
    DNSArchive,
    GaussianEmitter,
    GenotypeEmitter,
    GridArchive,
    MAPElites,
    ProximityArchive,
)

DIMS, BATCH = 3, 12
TEMPLATE = {"x": jnp.zeros(DIMS), "key": jnp.zeros((2,), jnp.int32), "on": jnp.zeros((), bool)}
CENTROIDS = np.random.default_rng(1).uniform(-1, 1, (9, 2)).astype(np.float32)

KINDS = {
    "grid_cma_mae": lambda **s: GridArchive(
        dims=(3, 4), ranges=[(-1, 1), (-1, 1)], learning_rate=0.5, threshold_min=-1.0, **s
    ),
    "cvt": lambda **s: CVTArchive(centroids=CENTROIDS, ranges=[(-1, 1), (-1, 1)], **s),
    "proximity": lambda **s: ProximityArchive(
        measure_dim=2, capacity=8, k_neighbors=2, novelty_threshold=0.3, local_competition=True, **s
    ),
    "dns": lambda **s: DNSArchive(measure_dim=2, capacity=6, k_neighbors=2, **s),
}


def _pair(kind):
    """The same archive twice: storing genotypes, and storing the float leaf flat with the integer
    leaf as an extra field (the reference)."""
    flat = KINDS[kind](solution_dim=DIMS, extra_fields={"key": ((2,), jnp.int32)})
    return KINDS[kind](genotype=TEMPLATE), flat


def _two_adds(archive, flat_archive):
    @jax.jit
    def run(batches):
        state, ref = archive.init(), flat_archive.init()
        out = []
        for x, key, on, objective, measures in batches:
            state, info = archive.add(state, {"x": x, "key": key, "on": on}, objective, measures)
            ref, ref_info = flat_archive.add(ref, x, objective, measures, {"key": key})
            out.append((info, ref_info))
        return state, ref, out

    return run


RUNS = {kind: _two_adds(*_pair(kind)) for kind in KINDS}


@st.composite
def batches(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    objective = rng.integers(-3, 3, BATCH).astype(np.float32) / 2  # frequent exact ties
    measures = rng.uniform(-1.2, 1.2, (BATCH, 2)).astype(np.float32)
    repeats = draw(st.integers(0, BATCH // 2))
    measures[:repeats] = measures[BATCH - repeats :]
    x = rng.normal(size=(BATCH, DIMS)).astype(np.float32)
    for array in (objective, measures, x):
        if draw(st.booleans()):
            array.reshape(-1)[rng.integers(array.size)] = draw(st.sampled_from([np.nan, np.inf]))
    # every int32 value, the padding sentinel -1 and the extremes included: never "non-finite"
    key = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, (BATCH, 2), dtype=np.int32)
    key[0] = -1
    on = rng.integers(0, 2, BATCH).astype(bool)
    return x, key, on, objective, measures


@given(kind=st.sampled_from(sorted(KINDS)), first=batches(), second=batches())
def test_a_genotype_archive_inserts_as_the_flat_archive_does(kind, first, second):
    state, ref, infos = RUNS[kind]((first, second))
    for info, ref_info in infos:
        for a, b in zip(jax.tree_util.tree_leaves(info), jax.tree_util.tree_leaves(ref_info), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for name in ("objective", "measures", "threshold", "occupied"):
        np.testing.assert_array_equal(getattr(state, name), getattr(ref, name), err_msg=name)
    np.testing.assert_array_equal(state.solutions["x"], ref.solutions)
    np.testing.assert_array_equal(state.solutions["key"], ref.fields["key"])
    assert state.solutions["key"].dtype == jnp.int32 and state.solutions["on"].dtype == jnp.bool_
    # the bool leaf travelled with its candidate: the stored row is the candidate with that x
    both = np.concatenate([first[0], second[0]])
    flags = np.concatenate([first[2], second[2]])
    for row in np.flatnonzero(np.asarray(state.occupied)):
        match = np.flatnonzero(np.all(both == np.asarray(state.solutions["x"][row]), axis=1))
        assert bool(state.solutions["on"][row]) in set(flags[match].tolist())


def test_integer_leaves_are_exact_and_only_float_leaves_can_make_a_candidate_invalid():
    archive = GridArchive(genotype=TEMPLATE, dims=(4,), ranges=[(0, 1)])
    big = np.iinfo(np.int32).max
    genotypes = {
        "x": jnp.asarray([[0.0, 1.0, 2.0], [jnp.nan, 0.0, 0.0], [1.0, 1.0, 1.0]]),
        "key": jnp.asarray([[big, -big - 1], [1, 2], [-1, -1]], jnp.int32),
        "on": jnp.asarray([True, False, True]),
    }
    state, info = archive.add(archive.init(), genotypes, jnp.ones(3), jnp.asarray([[0.1], [0.5], [0.9]]))
    np.testing.assert_array_equal(info.status, [NEW, NOT_ADDED, NEW])
    np.testing.assert_array_equal(state.solutions["key"][0], [big, -big - 1])
    np.testing.assert_array_equal(state.solutions["key"][3], [-1, -1])
    elites = archive.elite_solutions(state, jnp.asarray([3, 0]))
    np.testing.assert_array_equal(elites["x"], [[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]])
    found, rows = archive.retrieve(state, jnp.asarray([[0.05], [0.6]]))
    np.testing.assert_array_equal(found, [True, False])
    np.testing.assert_array_equal(rows["solutions"]["key"][0], [big, -big - 1])


def test_a_numpy_float64_template_stores_what_jax_stores():
    archive = GridArchive(genotype={"w": np.zeros(3), "k": np.zeros(2, np.int64)}, dims=(2,), ranges=[(0, 1)])
    wide = jax.config.jax_enable_x64
    assert archive.genotype["w"].dtype == (jnp.float64 if wide else jnp.float32)
    assert archive.genotype["k"].dtype == (jnp.int64 if wide else jnp.int32)
    state = archive.init()
    assert state.solutions["w"].dtype == archive.genotype["w"].dtype


def test_bad_genotypes_are_refused_naming_the_leaf():
    with pytest.raises(ArgumentError, match="exactly one of solution_dim"):
        GridArchive(dims=(4,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match="exactly one of solution_dim"):
        GridArchive(solution_dim=3, genotype=TEMPLATE, dims=(4,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match=r"genotype\['name'\] must be an array"):
        GridArchive(genotype={"name": "abc"}, dims=(4,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match="at least one array leaf"):
        GridArchive(genotype={}, dims=(4,), ranges=[(0, 1)])
    archive = GridArchive(genotype=TEMPLATE, dims=(4,), ranges=[(0, 1)])
    state = archive.init()
    good = {"x": jnp.zeros((2, DIMS)), "key": jnp.zeros((2, 2), jnp.int32), "on": jnp.zeros(2, bool)}
    args = (jnp.zeros(2), jnp.zeros((2, 1)))
    with pytest.raises(ArgumentError, match="genotype structure|archive's structure"):
        archive.add(state, {"x": good["x"]}, *args)
    with pytest.raises(ArgumentError, match=r"solutions\['key'\] must have shape"):
        archive.add(state, {**good, "key": jnp.zeros((2, 3), jnp.int32)}, *args)
    with pytest.raises(ArgumentError, match=r"solutions\['key'\] must be of dtype int32"):
        archive.add(state, {**good, "key": jnp.zeros((2, 2), jnp.float32)}, *args)
    with pytest.raises(ArgumentError, match="objective must have shape"):
        archive.add(state, good, jnp.zeros(3), jnp.zeros((2, 1)))
    # flat emitters say what to use instead; the genotype emitter refuses a flat archive
    with pytest.raises(ArgumentError, match="stores genotypes"):
        MAPElites(archive, [GaussianEmitter(sigma=0.1, x0=np.zeros(DIMS))]).init(jax.random.key(0))
    flat = GridArchive(solution_dim=DIMS, dims=(4,), ranges=[(0, 1)])
    emitter = GenotypeEmitter(lambda k, p: p, lambda k, n: good, batch_size=2)
    with pytest.raises(ArgumentError, match="give the archive a genotype template"):
        MAPElites(flat, [emitter]).init(jax.random.key(0))
    with pytest.raises(ArgumentError, match="solution is a template of flat solutions"):
        MAPElites(archive, [emitter], solution=np.zeros(DIMS))
    with pytest.raises(ArgumentError, match="variation must be callable"):
        GenotypeEmitter("mutate", lambda k, n: good)


class Quadratic:
    """A function problem on ``{"w": [4], "k": int32 []}`` genotypes: fitness ``sum(w^2) + k``
    (minimized), descriptor ``w[:2]``."""

    maximize = False

    def evaluate(self, key, genotypes):
        w = genotypes["w"]
        fitness = jnp.sum(w**2, axis=1) + genotypes["k"].astype(jnp.float32)
        return Evaluation(fitness=fitness, descriptor=w[:, :2])


def _emitter(scale: float, batch: int = 32) -> GenotypeEmitter:
    def variation(key, parents):
        a, b = jax.random.split(key)
        w = parents["w"] + scale * jax.random.normal(a, parents["w"].shape)
        k = jnp.clip(parents["k"] + jax.random.randint(b, parents["k"].shape, -1, 2), 0, 3)
        return {"w": w, "k": k}

    def initial(key, n):
        return {
            "w": jax.random.uniform(key, (n, 4), minval=-0.2, maxval=0.2),
            "k": jnp.full((n,), 3, jnp.int32),
        }

    return GenotypeEmitter(variation, initial, batch_size=batch)


@pytest.mark.parametrize("scheduler", ["map_elites", "bandit"])
def test_map_elites_over_a_pytree_genotype_fills_the_archive_with_consistent_elites(scheduler):
    archive = GridArchive(
        genotype={"w": jnp.zeros(4), "k": jnp.zeros((), jnp.int32)}, dims=(10, 10), ranges=[(-1, 1), (-1, 1)]
    )
    if scheduler == "bandit":
        me = BanditMAPElites(archive, [_emitter(0.05), _emitter(0.3)], num_active=1)
    else:
        me = MAPElites(archive, [_emitter(0.05), _emitter(0.3)])
    result = evotensor.run(me, Quadratic(), 40, jax.random.key(3), progress=False)
    state = result.state.archive
    occupied = np.flatnonzero(np.asarray(state.occupied))
    assert len(occupied) > 40  # spread well beyond the start box (10 x 10 cells of 0.2)
    # every stored genotype is its candidate's: re-scored, it gives the stored objective and measures
    elites = archive.elite_solutions(state, jnp.asarray(occupied))
    again = Quadratic().evaluate(None, elites)
    np.testing.assert_array_equal(-again.fitness, np.asarray(state.objective)[occupied])
    np.testing.assert_array_equal(again.descriptor, np.asarray(state.measures)[occupied])
    assert elites["k"].dtype == jnp.int32 and set(np.asarray(elites["k"]).tolist()) <= {0, 1, 2, 3}
    # the integer gene was optimized too (0 is best): most elites have it
    assert np.mean(np.asarray(elites["k"]) == 0) > 0.5
    assert result.best_genotype["k"] == 0


def test_data_lists_every_elite_on_the_host_for_flat_genotype_and_sharded_archives():
    from evotensor.qd.sharded_archive import ShardedArchive

    genotypes = {
        "x": jnp.asarray([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]),
        "key": jnp.asarray([[1, 2], [3, 4], [5, 6]], jnp.int32),
        "on": jnp.asarray([True, False, True]),
    }
    objective, measures = jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([[0.9], [0.1], [0.12]])
    archive = GridArchive(
        genotype=TEMPLATE, dims=(4,), ranges=[(0, 1)], extra_fields={"tag": ((), jnp.int32)}
    )
    state, _ = archive.add(archive.init(), genotypes, objective, measures, {"tag": jnp.asarray([7, 8, 9])})
    data = archive.data(state)
    # cell 0 got the better of rows 1 and 2 (objective 3), cell 3 row 0; rows in cell order
    np.testing.assert_array_equal(data["index"], [0, 3])
    np.testing.assert_array_equal(data["objective"], [3.0, 1.0])
    np.testing.assert_array_equal(data["solutions"]["key"], [[5, 6], [1, 2]])
    np.testing.assert_array_equal(data["solutions"]["on"], [True, True])
    np.testing.assert_array_equal(data["tag"], [9, 7])
    assert isinstance(data["objective"], np.ndarray) and data["solutions"]["key"].dtype == np.int32
    sharded = ShardedArchive(archive, jax.make_mesh((1,), ("pop",)))
    again = sharded.data(sharded.pad(state))
    for a, b in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(data), strict=True):
        np.testing.assert_array_equal(a, b)
    flat = GridArchive(solution_dim=3, dims=(4,), ranges=[(0, 1)])
    flat_state, _ = flat.add(flat.init(), genotypes["x"], objective, measures)
    np.testing.assert_array_equal(flat.data(flat_state)["solutions"], [[6.0, 7.0, 8.0], [0.0, 1.0, 2.0]])
    with pytest.raises(ArgumentError, match="state must be this archive's ArchiveState of 4 rows"):
        archive.data(GridArchive(genotype=TEMPLATE, dims=(5,), ranges=[(0, 1)]).init())
