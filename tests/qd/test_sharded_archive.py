"""The QD archive sharded along its cells (evotensor.qd.sharded_archive) and MAPElites.on_mesh.

In this process (one CPU device): the sharded archive over a 1-device mesh equals the plain archive
(hypothesis), the split nearest-centroid search equals the whole one, and the checks. The real
multi-device check runs tests/qd/mesh_scenarios.py in one subprocess with 4 CPU devices (ME-ES and
the emitter group, marked fusion_emitters, in a second): MAP-Elites
through ``evotensor.run(..., mesh=)`` against the same key on one device, bit for bit, with padded
cell counts, the compiled insertion's collectives, and checkpoints resumed on other device counts
(the sharded format written from each device's own cells). Slow: a sharded checkpoint resumed on
4 -> 2 -> 1 -> 4 devices, and 2 processes x 2 devices (each process writing only its own cells).
"""

import functools
import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from tests.distributed.harness import run_single
from tests.qd.mesh_scenarios import HLO_CELLS, HLO_DIMS, SUMMED_METRICS

from evotensor.core.checks import ArgumentError
from evotensor.qd import CVTArchive, GaussianEmitter, GridArchive, MAPElites
from evotensor.qd.centroids import nearest_centroid, nearest_in_block
from evotensor.qd.map_elites import ShardedMAPElites
from evotensor.qd.sharded_archive import ShardedArchive, trim_padding

DIMS, BATCH = 3, 16
CENTROIDS = np.random.default_rng(0).uniform(-1, 1, (13, 2)).astype(np.float32)


def _archives():
    grid = GridArchive(
        solution_dim=DIMS,
        dims=(4, 5),
        ranges=[(-1, 1), (-1, 1)],
        learning_rate=0.25,
        threshold_min=-1.0,
        extra_fields={"tag": ((2,), jnp.int32)},
    )
    cvt = CVTArchive(
        solution_dim=DIMS, centroids=CENTROIDS, ranges=[(-1, 1), (-1, 1)], chunk_size=4, qd_score_offset=-3.0
    )
    # genotypes of any structure: a float leaf and an exact int32 leaf, split over the devices alike
    genotype = GridArchive(
        genotype={"x": jnp.zeros(DIMS), "tag": jnp.zeros(2, jnp.int32)},
        dims=(3, 3),
        ranges=[(-1, 1), (-1, 1)],
    )
    return {"grid_cma_mae": grid, "cvt": cvt, "grid_genotype": genotype}


ARCHIVES = _archives()
MESH1 = jax.make_mesh((1,), ("pop",))
SHARDED = {name: ShardedArchive(archive, MESH1) for name, archive in ARCHIVES.items()}


def _two_batches_then_queries(archive):
    """One program per archive: two insertions, then every query (compiled once, not per example)."""

    @jax.jit
    def run(first, second, key):
        state, infos = archive.init(), []
        for solutions, objective, measures, tag in (first, second):
            fields = {"tag": tag} if archive.extra_fields else None
            if archive.genotype is not None:
                solutions = {"x": solutions, "tag": tag}
            state, info = archive.add(state, solutions, objective, measures, fields)
            infos.append(info)
        cells = archive.sample_elites(key, state, 7)
        queries = {
            "cells": cells,
            "elites": archive.elite_solutions(state, cells),
            "has_elites": archive.has_elites(state),
            "retrieve": archive.retrieve(state, second[2]),
            # more cells asked for than there are: every cell, occupied ones first
            "best": archive.best_cells(state, 6),
            "best_by_measure": archive.best_cells(state, 30, lambda _, m: m[:, 1]),
        }
        return state, infos, queries, archive.stats(state)

    return run


PLAIN = {name: _two_batches_then_queries(archive) for name, archive in ARCHIVES.items()}
SHARDED_RUN = {name: _two_batches_then_queries(archive) for name, archive in SHARDED.items()}


def _same(a, b):
    for (path, x), y in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


@st.composite
def batches(draw):
    """A batch with exact objective ties, repeated measures (several candidates per cell), measures
    outside the ranges and NaN/inf entries."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    objective = rng.integers(-4, 4, BATCH).astype(np.float32) / 2  # ties are frequent
    measures = rng.uniform(-1.3, 1.3, (BATCH, 2)).astype(np.float32)
    repeats = draw(st.integers(0, BATCH // 2))
    measures[:repeats] = measures[BATCH - repeats :]
    solutions = rng.normal(size=(BATCH, DIMS)).astype(np.float32)
    for array in (objective, measures, solutions):
        if draw(st.booleans()):
            array.reshape(-1)[rng.integers(array.size)] = draw(st.sampled_from([np.nan, np.inf]))
    tag = rng.integers(-9, 9, (BATCH, 2)).astype(np.int32)
    return solutions, objective, measures, tag


@given(name=st.sampled_from(sorted(ARCHIVES)), first=batches(), second=batches())
def test_sharded_insertion_on_one_device_equals_the_plain_archive(name, first, second):
    key = jax.random.key(7)
    plain_state, plain_infos, plain_queries, plain_stats = PLAIN[name](first, second, key)
    state, infos, queries, stats = SHARDED_RUN[name](first, second, key)
    _same(plain_infos, infos)
    _same(plain_state, state)
    _same(plain_queries, queries)
    for metric, value in plain_stats.items():
        np.testing.assert_allclose(stats[metric], value, rtol=1e-6, err_msg=metric)


def test_empty_archive_queries_match():
    archive, sharded = ARCHIVES["cvt"], SHARDED["cvt"]

    @jax.jit
    def queries(key):
        state = sharded.init()
        return sharded.sample_elites(key, state, 3), sharded.has_elites(state), sharded.stats(state)

    key = jax.random.key(0)
    np.testing.assert_array_equal(archive.sample_elites(key, archive.init(), 3), [12, 12, 12])
    cells, has_elites, stats = queries(key)
    np.testing.assert_array_equal(cells, [12, 12, 12])
    assert not bool(has_elites)
    assert int(stats["num_elites"]) == 0 and np.isnan(stats["obj_max"]) and float(stats["coverage"]) == 0


@functools.partial(jax.jit, static_argnames="blocks")
def _split_search(x, centroids, blocks):
    """What a sharded CVT archive does: the centroids split into ``blocks`` equal blocks (the last
    padded; the padding never chosen), each searched alone (chunks of 3), then the smallest
    (distance, index) over the blocks."""
    per_block = -(-centroids.shape[0] // blocks)
    padded = jnp.zeros((per_block * blocks, 2), jnp.float32).at[: centroids.shape[0]].set(centroids)
    distances, indices = [], []
    for b in range(blocks):
        d, i = nearest_in_block(
            x,
            padded[b * per_block : (b + 1) * per_block],
            mean=jnp.float32([0.3, -0.2]),  # any centring point: it only selects candidates
            count=jnp.clip(centroids.shape[0] - b * per_block, 0, per_block),
            first_index=b * per_block,
            chunk_size=3,
        )
        distances.append(d)
        indices.append(i)
    distance, index = jnp.stack(distances), jnp.stack(indices)
    nearest = distance.min(axis=0)
    return jnp.where(distance == nearest, index, jnp.iinfo(jnp.int32).max).min(axis=0)


@given(seed=st.integers(0, 2**31), blocks=st.sampled_from([2, 3, 4]), duplicates=st.booleans())
def test_nearest_centroid_split_in_blocks_is_the_whole_search(seed, blocks, duplicates):
    """The split search gives the whole search's answer, ties to the lowest index."""
    rng = np.random.default_rng(seed)
    centroids = rng.uniform(-1, 1, (11, 2)).astype(np.float32)
    if duplicates:  # exact ties across blocks
        centroids[7:] = centroids[:4]
    x = np.concatenate([rng.uniform(-1.2, 1.2, (20, 2)), centroids[:3]]).astype(np.float32)
    np.testing.assert_array_equal(_split_search(x, centroids, blocks), _NEAREST(x, centroids))


_NEAREST = jax.jit(nearest_centroid)


def test_padded_states_stay_with_their_sharded_archive():
    archive = ARCHIVES["grid_cma_mae"]
    padded = archive._empty(archive.num_cells + 3)  # what a mesh of a size not dividing 20 holds
    with pytest.raises(ArgumentError, match="holds 23 cells but the archive has 20.*trim_padding"):
        archive.add(padded, np.zeros((1, DIMS)), np.zeros(1), np.zeros((1, 2)))
    assert trim_padding(padded, archive.num_cells).solutions.shape == (20, DIMS)
    with pytest.raises(ArgumentError, match="holds 23 cells.*ShardedArchive.pad"):
        SHARDED["grid_cma_mae"].add(padded, np.zeros((1, DIMS)), np.zeros(1), np.zeros((1, 2)))
    # the unsharded MAPElites reads a mesh run's padded state as its plain archive's
    me = MAPElites(archive, [GaussianEmitter(0.1, np.zeros(DIMS))])
    state = me.init(jax.random.key(0)).replace(archive=padded)
    reported, reported_state = me.reported_archive(state)
    assert reported is archive and reported_state.occupied.shape == (20,)
    placed = SHARDED["grid_cma_mae"].pad(archive.init())
    assert placed.solutions.sharding.spec == jax.sharding.PartitionSpec("pop")


def test_on_mesh_and_checks():
    archive = ARCHIVES["grid_cma_mae"]
    me = MAPElites(
        archive, [GaussianEmitter(0.1, np.zeros(DIMS), batch_size=4)], result_archive=ARCHIVES["cvt"]
    )
    sharded = me.on_mesh(MESH1)
    assert isinstance(sharded, ShardedMAPElites) and sharded.unsharded is me
    assert isinstance(sharded.archive, ShardedArchive) and sharded.archive.archive is archive
    assert sharded.result_archive.archive is ARCHIVES["cvt"]
    assert sharded.on_mesh(MESH1).unsharded is me  # re-laid out from the plain strategy
    state = sharded.init(jax.random.key(0))
    layout = sharded.state_shardings(state)
    assert layout.archive.solutions.spec == jax.sharding.PartitionSpec("pop")
    assert layout.result.threshold.spec == jax.sharding.PartitionSpec("pop")
    assert layout.generation.spec == jax.sharding.PartitionSpec()
    assert sharded.reported_archive(state)[0] is ARCHIVES["cvt"]
    assert SHARDED["cvt"].shard_bytes() == ARCHIVES["cvt"].state_bytes()
    assert "13 per device" in repr(SHARDED["cvt"])
    with pytest.raises(ArgumentError, match="archive must be an evotensor.qd Archive"):
        ShardedArchive(object(), MESH1)
    with pytest.raises(ArgumentError, match="mesh must be a jax.sharding.Mesh"):
        ShardedArchive(archive, "pop")
    with pytest.raises(ArgumentError, match="mesh_axis must name one of the mesh's axes"):
        ShardedArchive(archive, MESH1, axis="cells")
    assert ShardedArchive(SHARDED["cvt"], MESH1).archive is ARCHIVES["cvt"]


# ---- 4 CPU devices, one subprocess ----------------------------------------------------------------

SCENARIOS = [
    "tests.qd.mesh_scenarios:scenario_map_elites",
    "tests.qd.mesh_scenarios:scenario_insertion_hlo",
    "tests.qd.mesh_scenarios:scenario_checkpoint_across_device_counts",
    "tests.qd.mesh_scenarios:scenario_genotypes",
    "tests.qd.mesh_scenarios:scenario_multi_task",
]
# the runs of these equal the one-device runs bit for bit under XLA:CPU's default emitters only
# (the mark fusion_emitters, tests/conftest.py), so they run in a subprocess of their own
FUSION_SCENARIOS = [
    "tests.qd.mesh_scenarios:scenario_mees",
    "tests.qd.mesh_scenarios:scenario_emitter_group",
    "tests.qd.mesh_scenarios:scenario_mome",
    "tests.qd.mesh_scenarios:scenario_pga_me",
    "tests.qd.mesh_scenarios:scenario_dcrl_me",
    "tests.qd.mesh_scenarios:scenario_omg_mega",
    "tests.qd.mesh_scenarios:scenario_dds",
    "tests.qd.mesh_scenarios:scenario_dms",
]


@pytest.fixture(scope="module")
def four_devices():
    return run_single(SCENARIOS, devices=4)


@pytest.fixture(scope="module")
def four_devices_fusion():
    return run_single(FUSION_SCENARIOS, devices=4)


def test_map_elites_on_4_devices_equals_one_device(four_devices):
    result = four_devices[SCENARIOS[0]]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4
    # archives (search: CVT with CMA-MAE thresholds and an extra field; result: grid), emitter states
    for part in ("archive", "search", "cma"):
        assert mesh[part] == single[part], part
    assert mesh["best_fitness"] == single["best_fitness"]
    for metric in ("num_elites", "coverage", "obj_max", "added", "new_cells", "nonfinite", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    for metric in SUMMED_METRICS:
        np.testing.assert_allclose(
            mesh["history"][metric], single["history"][metric], rtol=1e-5, err_msg=metric
        )
    # not a trivial run: the archive filled, NaN fitness was dropped, a CMA-ES restarted
    assert single["history"]["num_elites"][-1] > 50 and sum(single["history"]["nonfinite"]) > 0
    assert not any(math.isnan(v) for v in np.asarray(single["archive"][".objective"]))
    # cells split 4 ways, with padding: 50 CVT cells -> 52 rows, 225 grid cells -> 228
    assert result["layout"] == {
        "search": {"rows": 52, "rows_per_device": [13] * 4, "spec": "P('pop',)"},
        "result": {"rows": 228, "rows_per_device": [57] * 4, "spec": "P('pop',)"},
    }
    assert len(single["archive"][".objective"]) == 225 and len(single["search"][".objective"]) == 50


def test_map_elites_over_genotypes_on_4_devices_equals_one_device(four_devices):
    result = four_devices["tests.qd.mesh_scenarios:scenario_genotypes"]
    mesh, single = result["mesh"], result["single"]
    assert mesh["archive"] == single["archive"]
    assert mesh["history"]["num_elites"] == single["history"]["num_elites"]
    assert mesh["best_fitness"] == single["best_fitness"]
    assert result["layout"]["search"] == {"rows": 84, "rows_per_device": [21] * 4, "spec": "P('pop',)"}
    # the genotypes' leaves kept their dtypes, and the run moved them: k went down from 5
    k = np.asarray(single["archive"][".solutions['k']"])
    occupied = np.asarray(single["archive"][".occupied"])
    assert occupied.sum() > 20 and k[occupied].min() < 5


def test_multi_task_map_elites_on_4_devices_equals_one_device(four_devices):
    result = four_devices["tests.qd.mesh_scenarios:scenario_multi_task"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4
    assert mesh["state"] == single["state"] and mesh["history"] == single["history"]
    assert mesh["best_fitness"] == single["best_fitness"]
    # not trivial: tasks filled, NaN rows dropped, the bandit pulled its arms
    assert single["history"]["num_elites"][-1] > 20 and sum(single["history"]["nonfinite"]) > 0
    assert sum(single["state"][".pulls"]) > 5


@pytest.mark.fusion_emitters
def test_omg_mega_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_omg_mega"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["search"]["rows"] == 84
    assert mesh["archive"] == single["archive"]
    for metric in ("num_elites", "added", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    assert single["history"]["num_elites"][-1] > 10


@pytest.mark.fusion_emitters
def test_discount_model_search_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_dms"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["result"]["rows"] == 84
    # the model whole on every device, the result grid split
    assert result["layout"]["search"] == {"rows": 2, "rows_per_device": [2] * 4, "spec": "P()"}
    assert mesh["archive"] == single["archive"] and mesh["cma"] == single["cma"]
    for metric in ("num_elites", "added", "new_cells", "best_fitness", "discount_epochs"):
        assert mesh["history"][metric] == single["history"][metric], metric
    # the model's float32 training is the same computation on the same data, compiled inside
    # another program (XLA fuses it otherwise): equal to float32 rounding, not bit for bit
    assert mesh["search"].keys() == single["search"].keys()
    for name, value in mesh["search"].items():
        np.testing.assert_allclose(value, single["search"][name], rtol=1e-5, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(
        mesh["history"]["discount_loss"], single["history"]["discount_loss"], rtol=1e-5
    )
    assert single["search"][".step"] == 10 and single["history"]["num_elites"][-1] > 5


@pytest.mark.fusion_emitters
def test_density_descent_search_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_dds"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["result"]["rows"] == 84
    # the reservoir whole on every device, the result grid split
    assert result["layout"]["search"] == {"rows": 30, "rows_per_device": [30] * 4, "spec": "P()"}
    assert mesh["archive"] == single["archive"] and mesh["search"] == single["search"]
    assert mesh["cma"] == single["cma"]
    for metric in ("num_elites", "added", "new_cells", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    assert single["search"][".seen"] == 120 and single["history"]["num_elites"][-1] > 5


@pytest.mark.fusion_emitters
def test_mome_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_mome"]
    mesh, single = result["mesh"], result["single"]
    assert mesh["archive"] == single["archive"] and mesh["cma"] == single["cma"]
    for metric in ("num_elites", "coverage", "added", "new_cells", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    # sums over cells, and hypervolumes computed per device: equal to float32 rounding
    for metric in ("moqd_score", "norm_moqd_score", "max_hypervolume", "global_hypervolume"):
        np.testing.assert_allclose(
            mesh["history"][metric], single["history"][metric], rtol=1e-5, err_msg=metric
        )
    assert result["layout"]["search"] == {"rows": 52, "rows_per_device": [13] * 4, "spec": "P('pop',)"}
    occupied = np.asarray(single["archive"][".occupied"])
    assert occupied.shape == (50, 5) and occupied.sum() > 40 and (occupied.sum(axis=1) > 1).any()


@pytest.mark.fusion_emitters
def test_mees_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion[FUSION_SCENARIOS[0]]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["search"]["rows"] == 84
    assert mesh["archive"] == single["archive"] and mesh["mees"] == single["mees"]
    for metric in ("num_elites", "added", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    # 14 steps: explore, exploit and explore phases, new parents drawn from a filling archive
    state = single["mees"][0]
    assert state[".step"] == 14 and state[".novelty_count"] == 14
    assert 1 < single["history"]["num_elites"][-1] <= 14


@pytest.mark.fusion_emitters
def test_an_emitter_group_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion[FUSION_SCENARIOS[1]]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and mesh["archive"] == single["archive"] and mesh["cma"] == single["cma"]
    # three stacked CMA-ES states (restart_rule=3: restarts inside the vmap draw elites through the
    # sharded archive), and part of the grid filled
    assert len(single["cma"][0]["['mean']"]) == 3 and single["history"]["num_elites"][-1] > 5


@pytest.mark.fusion_emitters
def test_pga_me_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_pga_me"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["search"]["rows"] == 84
    assert mesh["archive"] == single["archive"]
    assert mesh["pg"] == single["pg"]  # critic, greedy actor, targets, Adam states, replay buffer
    for metric in ("num_elites", "added", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    # 8 generations of 8 rollouts of 6 steps: the 200-row buffer wrapped around
    td3 = single["pg"][0]
    assert td3[".buffer.size"] == 200 and td3[".buffer.position"] == 8 * 8 * 6 % 200
    assert single["history"]["num_elites"][-1] > 3


@pytest.mark.fusion_emitters
def test_dcrl_me_on_4_devices_equals_one_device(four_devices_fusion):
    result = four_devices_fusion["tests.qd.mesh_scenarios:scenario_dcrl_me"]
    mesh, single = result["mesh"], result["single"]
    assert result["devices"] == 4 and result["layout"]["search"]["rows"] == 84
    assert mesh["archive"] == single["archive"]
    assert mesh["pg"] == single["pg"]  # conditioned critic and actor, targets, Adam, replay buffer
    for metric in ("num_elites", "added", "best_fitness"):
        assert mesh["history"][metric] == single["history"][metric], metric
    td3 = single["pg"][0]
    assert td3[".buffer.size"] == 300  # 8 generations x 8 rollouts x 6 steps wrapped around
    # transitions aimed elsewhere than where they went: the DCRL rows of generations 2..8
    desc, prime = np.asarray(td3[".buffer.data.desc"]), np.asarray(td3[".buffer.data.desc_prime"])
    assert np.any(np.abs(desc - prime).sum(axis=1) > 1e-3)


def test_compiled_insertion_never_gathers_the_archive(four_devices):
    result = four_devices[SCENARIOS[1]]
    shard = -(-HLO_CELLS // 4)
    assert result["shard_cells"] == shard
    for program in ("add", "parents"):
        assert result["shard_in_hlo"][program], f"{program} should work on [{shard},{HLO_DIMS}] blocks"
        assert not result["whole_archive_in_hlo"][program], f"{program} holds the whole archive"
        assert result["collectives"][program], f"{program} has no collective at all"
        # only batch-sized values cross devices: at most [batch, dims] (the fetched parents)
        assert result["largest"][program] <= result["batch_x_dims"], result["collectives"][program]


def test_a_checkpoint_resumes_on_another_device_count(four_devices):
    out = four_devices[SCENARIOS[2]]
    assert out["rows"] == [52, 50, 49, 50]  # padded for 4 and 2 devices, none without a mesh
    assert out["two"] == out["whole"] and out["one"] == out["whole"]
    # sharded format: the writer is handed each archive leaf as Padded (49 of 52 rows) still split
    # 13 rows per device, the 49 cells are stored from the 4 devices' blocks (the padding never),
    # and restored onto 2 devices
    assert out["written"] == [[{"padded": True, "rows": 52, "device_rows": [13] * 4}] * 5], out["written"]
    rows = [[0, 13], [13, 26], [26, 39], [39, 49]]
    assert out["stored"] == {"shape": [49, 4], "files": {"process-00000.bin": rows}}
    assert out["sharded_two"] == out["whole"]
    assert any(out["whole"][".occupied"])  # the run filled cells


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_on_4_2_1_and_4_devices_bit_identically():
    """Across device counts and a switch to the single file and back: the uninterrupted archive,
    emitter states and exact metrics, bit for bit."""
    spec = "tests.qd.mesh_scenarios:scenario_sharded_checkpoint_chain"
    out = run_single([spec], devices=4, timeout=900)[spec]
    assert out["chain"]["archive"] == out["whole"]["archive"] and out["emitters"][0] == out["emitters"][1]
    for metric, values in out["whole"]["history"].items():  # sums over cells: float32 order only
        if metric not in SUMMED_METRICS:
            assert out["chain"]["history"][metric] == values, metric
    assert any(out["whole"]["archive"][".occupied"])
    # what the sharded writer was handed at each sharded checkpoint (generations 3, 6 and 12 on 4,
    # 2 and 4 devices; 9 is a single file): the live archive as Padded, still split, never whole
    handed = [
        {"padded": True, "rows": 52, "device_rows": [13] * 4},
        {"padded": True, "rows": 50, "device_rows": [25] * 2},
        {"padded": True, "rows": 52, "device_rows": [13] * 4},
    ]
    assert out["written"] == [[leaf] * 5 for leaf in handed]
    blocks = {4: [[0, 13], [13, 26], [26, 39], [39, 49]], 2: [[0, 25], [25, 49]]}
    files = [{"process-00000.bin": blocks[n]} for n in (4, 2)]
    stored = [{"shape": [49, 4], "files": f} for f in files]
    assert out["stored"] == [*stored, None, stored[0]]


TWO_PROCESS_CHECKPOINT = "tests.qd.mesh_scenarios:scenario_two_processes_sharded_checkpoint"


@pytest.fixture(scope="module")
def two_processes():
    """2 processes x 2 CPU devices joined by jax.distributed (gloo), one job for both scenarios."""
    from tests.distributed.harness import run_multiprocess

    return run_multiprocess([SCENARIOS[0], TWO_PROCESS_CHECKPOINT], processes=2, devices_per_process=2)


@pytest.mark.slow
def test_two_processes_equal_one_device(two_processes):
    """Every process's archives and emitter states equal the one-device run, and the two processes
    agree."""
    runs = two_processes
    assert len(runs) == 2
    for run in runs:
        result = run[SCENARIOS[0]]
        assert result["devices"] == 4
        for part in ("archive", "search", "cma"):
            assert result["mesh"][part] == result["single"][part], part
        assert result["layout"]["search"]["rows_per_device"] == [13, 13]  # this process's 2 devices
    assert runs[0][SCENARIOS[0]]["mesh"] == runs[1][SCENARIOS[0]]["mesh"]


@pytest.mark.slow
def test_two_processes_write_only_their_own_cells_and_resume(two_processes):
    """Checkpoints of a 4-device archive over 2 processes, single file then sharded: in the sharded
    format each process is handed only its 2 devices' blocks (13 rows each, never the 49 cells)
    and its shard file holds exactly their cells; every resume keeps the uninterrupted run's
    archive (the single file restored from arrays of both processes included)."""
    results = [run[TWO_PROCESS_CHECKPOINT] for run in two_processes]
    assert [r["process"] for r in results] == [0, 1]
    own = {"process-00000.bin": [[0, 13], [13, 26]], "process-00001.bin": [[26, 39], [39, 49]]}
    for r in results:
        assert r["resumed"] == r["whole"] and any(r["whole"][".occupied"])
        assert r["stored"] == {"shape": [49, 4], "files": own}
        # two sharded checkpoints (generations 9 and 12), five archive leaves each
        assert r["written"] == [[{"padded": True, "rows": 52, "device_rows": [13, 13]}] * 5] * 2
    assert results[0]["resumed"] == results[1]["resumed"]
