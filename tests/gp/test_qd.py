"""MAP-Elites over GP trees (evotensor.gp.qd): an archive of whole trees varied by GP's own operators
(GPEmitter through GP.vary), scored with each tree's length and depth as its descriptor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, Forest, GPEmitter, Pagie1, ShapeDescriptors
from evotensor.qd import GridArchive, IsoLineEmitter, MAPElites

MAX_LEN = 24


@pytest.fixture(scope="module")
def run():
    pagie = Pagie1(metric="r2")
    gp = GP(64, pagie.function_set, n_vars=2, max_len=MAX_LEN, elite_rate=0.0)
    emitter = GPEmitter(gp)
    problem = ShapeDescriptors(pagie, MAX_LEN)
    archive = GridArchive(genotype=emitter.genotype, dims=problem.grid, ranges=problem.descriptor_ranges)
    result = evotensor.run(MAPElites(archive, [emitter]), problem, 25, jax.random.key(1), progress=False)
    return gp, problem, archive, result


def test_every_elite_is_a_valid_tree_in_the_cell_of_its_shape_and_score(run):
    gp, problem, archive, result = run
    state = result.state.archive
    cells = np.flatnonzero(np.asarray(state.occupied))
    assert len(cells) >= 20
    trees = archive.elite_solutions(state, jnp.asarray(cells))
    trees.check(gp.function_set, n_vars=2)
    again = problem.evaluate(None, trees)
    # the evaluator's sums over rows round by batch (another program for 140 trees than for 64)
    np.testing.assert_allclose(again.fitness, np.asarray(state.objective)[cells], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(again.descriptor, np.asarray(state.measures)[cells])
    np.testing.assert_array_equal(archive.index_of(again.descriptor), cells)
    # the descriptors are the trees' own: length, and the deepest node's ancestors
    lengths, depths = np.asarray(again.descriptor).T
    np.testing.assert_array_equal(lengths, np.asarray(trees.length))
    assert np.all(depths <= lengths - 1) and lengths.min() == 1 and lengths.max() > 10


def test_longer_trees_reach_better_fits_and_the_run_improves(run):
    *_, archive, result = run
    state = result.state.archive
    occupied = np.asarray(state.occupied)
    length = np.asarray(state.measures)[occupied, 0]
    r2 = np.asarray(state.objective)[occupied]
    assert r2[length <= 3].max() < r2[length >= 9].max()  # Pagie-1 needs more than a leaf or two
    assert result.history["obj_max"][-1] > result.history["obj_max"][0]
    assert result.best_fitness == pytest.approx(float(r2.max()))


def test_vary_makes_valid_children_of_the_given_parents_only():
    gp = GP(8, Pagie1().function_set, n_vars=2, max_len=16, elite_rate=0.0, mutation_rate=0.0)
    leaf = Forest.from_tuples([("var", 0)] * 8 + [("var", 1)] * 8, 16, gp.function_set)
    children = gp.vary(jax.random.key(0), leaf)
    children.check(gp.function_set, n_vars=2)
    assert children.opcode.shape == (8, 16)
    # crossover alone (no mutation): every child is made of its parents' leaves, x0 and x1
    values = np.asarray(children.value)[np.asarray(children.opcode) > 0]
    assert set(values.tolist()) <= {0.0, 1.0}
    with pytest.raises(ArgumentError, match=r"parents must be a Forest \[2 \* \(population_size"):
        gp.vary(jax.random.key(0), leaf[:8])


def test_wrong_archives_and_arguments_are_refused():
    gp = GP(8, Pagie1().function_set, n_vars=2, max_len=16, elite_rate=0.0)
    emitter = GPEmitter(gp)
    other = GridArchive(genotype=Forest.empty((), 12), dims=(2,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match="trees of the GP's max_len"):
        MAPElites(other, [emitter]).init(jax.random.key(0))
    flat = GridArchive(solution_dim=16, dims=(2,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match="flat solutions"):
        MAPElites(flat, [emitter]).init(jax.random.key(0))
    good = GridArchive(genotype=emitter.genotype, dims=(2,), ranges=[(0, 1)])
    with pytest.raises(ArgumentError, match="IsoLineEmitter varies flat solutions"):
        MAPElites(good, [IsoLineEmitter(np.zeros(4))]).init(jax.random.key(0))
    with pytest.raises(ArgumentError, match="strategy must be a GP"):
        GPEmitter("gp")
    with pytest.raises(ArgumentError, match="problem must have an evaluate"):
        ShapeDescriptors(None, 16)
    with pytest.raises(ArgumentError, match="max_len"):
        ShapeDescriptors(Pagie1(), 1)
