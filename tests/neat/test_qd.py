"""MAP-Elites over NEAT genomes (evotensor.neat.qd): an archive of whole genomes varied by NEAT's
mutation (NEATEmitter), scored with the network's size as its descriptor (TopologyDescriptors)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.neat import NEATEmitter, TopologyDescriptors, neat_mode
from evotensor.neat.genome import check_genome
from evotensor.problems.function_fit import XOR
from evotensor.qd import GaussianEmitter, GridArchive, MAPElites


def _setup(batch=64, max_nodes=12, max_conns=24):
    spec, config = neat_mode("neat-python", 3, 1, max_nodes=max_nodes, max_conns=max_conns)
    emitter = NEATEmitter(spec, config, batch_size=batch)
    problem = TopologyDescriptors(XOR(3), spec)
    archive = GridArchive(genotype=emitter.genotype, dims=problem.grid, ranges=problem.descriptor_ranges)
    return spec, emitter, problem, archive


def _checked_elites(spec, archive, state) -> int:
    """Assert every elite of ``state`` is a valid genome of ``spec``; the number of elites."""
    genomes = archive.data(state)["solutions"]
    n = len(np.asarray(genomes.node_key))
    for i in range(n):
        assert check_genome(spec, jax.tree_util.tree_map(lambda a, i=i: a[i], genomes)) == [], i
    return n


@pytest.fixture(scope="module")
def run():
    spec, emitter, problem, archive = _setup()
    me = MAPElites(archive, [emitter], decoder=emitter.decoder)
    result = evotensor.run(me, problem, 30, jax.random.key(2), chunk_size=10, progress=False)
    return spec, emitter, problem, archive, result


def test_every_elite_is_a_valid_genome_in_the_cell_of_its_own_size_and_fitness(run):
    spec, emitter, problem, archive, result = run
    state = result.state.archive
    cells = np.flatnonzero(np.asarray(state.occupied))
    assert len(cells) >= 15  # sizes from the 3 -> 1 start network to grown ones
    assert _checked_elites(spec, archive, state) == len(cells)
    genomes = archive.elite_solutions(state, jnp.asarray(cells))
    # re-decoded and re-scored, each stored genome gives the objective and the cell it is stored in
    again = problem.evaluate(None, emitter.decoder.decode(genomes), emitter.decoder.apply)
    np.testing.assert_array_equal(again.fitness, np.asarray(state.objective)[cells])
    np.testing.assert_array_equal(again.descriptor, np.asarray(state.measures)[cells])
    np.testing.assert_array_equal(archive.index_of(again.descriptor), cells)
    hidden, edges = np.asarray(again.descriptor).T
    assert hidden.max() >= 2 and edges.max() > 3 and edges.min() < 3  # grown and pruned ones


def test_the_counters_advance_and_the_innovation_numbers_stay_exact(run):
    spec, emitter, _, archive, result = run
    counters = result.state.emitters[0]
    start = emitter.init(None, archive)
    start_key, start_innov = int(start.next_node_key), int(start.next_innov)
    assert int(counters.next_node_key) > start_key and int(counters.next_innov) > start_innov
    state = result.state.archive
    innov = np.asarray(state.solutions.conn_innov)[np.asarray(state.occupied)]
    assert innov.dtype == np.int32 and innov.max() < int(counters.next_innov)


def test_map_elites_over_genomes_finds_better_networks_than_its_first_batch(run):
    *_, result = run
    history = result.history
    assert history["obj_max"][-1] > history["obj_max"][0]
    assert history["num_elites"][-1] > history["num_elites"][0]


def test_several_neat_emitters_share_an_archive_and_every_elite_stays_valid():
    """Two NEAT emitters on one archive mutate each other's elites: each hands out node keys and
    innovation numbers past every elite's, so no genome ever holds one twice (the small emitter's own
    counter lags far behind the large one's numbers)."""
    spec, emitter, problem, archive = _setup(batch=64)
    other = NEATEmitter(spec, emitter.config, batch_size=4)
    me = MAPElites(archive, [emitter, other], decoder=emitter.decoder)
    result = evotensor.run(me, problem, 20, jax.random.key(5), progress=False)
    assert _checked_elites(spec, archive, result.state.archive) > 10
    assert all(int(s.next_innov) > 3 for s in result.state.emitters)


def test_an_emitter_group_of_neat_emitters_runs_its_copies_vmapped():
    from evotensor.qd import EmitterGroup

    spec, emitter, problem, archive = _setup(batch=16)
    me = MAPElites(archive, [EmitterGroup(emitter, 3)], decoder=emitter.decoder)
    assert me.population_size == 48
    result = evotensor.run(me, problem, 8, jax.random.key(6), progress=False)
    assert _checked_elites(spec, archive, result.state.archive) > 5
    assert result.state.emitters[0].next_innov.shape == (3,)


def test_run_many_vmaps_map_elites_over_genomes_and_each_run_is_the_single_run():
    spec, emitter, problem, archive = _setup(batch=16)
    me = MAPElites(archive, [emitter], decoder=emitter.decoder)
    keys = jax.random.split(jax.random.key(0), 3)
    many = evotensor.run_many(me, problem, 6, keys)
    one = evotensor.run(me, problem, 6, keys[1], progress=False)
    for a, b in zip(jax.tree_util.tree_leaves(many.state), jax.tree_util.tree_leaves(one.state), strict=True):
        np.testing.assert_array_equal(np.asarray(a)[1], np.asarray(b))
    assert len(set(np.asarray(many.state.archive.occupied.sum(axis=1)).tolist())) > 1  # 3 distinct runs


def test_wrong_archives_and_arguments_are_refused():
    spec, emitter, problem, archive = _setup()
    other, _ = neat_mode("neat-python", 3, 1, max_nodes=16, max_conns=24)
    wrong = GridArchive(genotype=other.empty(()), dims=(2, 2), ranges=[(0, 1), (0, 1)])
    with pytest.raises(ArgumentError, match="archive of this spec's genomes"):
        MAPElites(wrong, [emitter]).init(jax.random.key(0))
    flat = GridArchive(solution_dim=4, dims=(2, 2), ranges=[(0, 1), (0, 1)])
    with pytest.raises(ArgumentError, match="flat solutions"):
        MAPElites(flat, [emitter]).init(jax.random.key(0))
    with pytest.raises(ArgumentError, match="GaussianEmitter varies flat solutions"):
        MAPElites(archive, [GaussianEmitter(0.1, np.zeros(4))]).init(jax.random.key(0))
    with pytest.raises(ArgumentError, match="spec must be a GenomeSpec"):
        NEATEmitter("spec")
    with pytest.raises(ArgumentError, match="batch_size"):
        NEATEmitter(spec, batch_size=0)
    with pytest.raises(ArgumentError, match="problem must have an evaluate"):
        TopologyDescriptors(None, spec)
    with pytest.raises(ArgumentError, match="TopologyDescriptors reads NEAT networks"):
        problem.evaluate(None, {"weights": jnp.zeros((2, 3))}, emitter.decoder.apply)
    with pytest.raises(ArgumentError, match="decoder must have a decode"):
        MAPElites(archive, [emitter], decoder=object())
