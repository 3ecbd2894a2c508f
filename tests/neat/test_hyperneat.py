"""HyperNEAT and ES-HyperNEAT as NEAT strategies: CPPN genomes, the substrate decoders wired to the
NEAT forward pass, a short run that improves, and the registered task."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.neat.genome import check_genome
from evotensor.neat.hyperneat import CPPN_ACTIVATIONS, cppn_spec, es_hyperneat, hyperneat
from evotensor.neat.network import forward_batch, transform
from evotensor.neat.substrate import HyperNEATConfig, Substrate, hyperneat_weights
from evotensor.problems.function_fit import XOR
from evotensor.tasks import get_task

SUBSTRATE = Substrate(
    inputs=[(-1.0, -1.0), (1.0, -1.0)],
    outputs=[(0.0, 1.0)],
    hidden=[[(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)]],
    bias_coordinate=(0.0, -1.0),
    cppn_bias_input=True,
)


def test_cppn_spec_matches_the_substrate():
    spec, config = cppn_spec(SUBSTRATE)
    assert spec.num_inputs == SUBSTRATE.cppn_num_inputs == 5
    assert spec.num_outputs == SUBSTRATE.cppn_num_outputs == 1
    assert spec.node_gene.activation.options == CPPN_ACTIVATIONS
    assert spec.feed_forward and not config.outputs.activate
    with pytest.raises(ArgumentError, match="substrate"):
        cppn_spec("2-3-1")


def test_decoder_queries_each_cppn_genome_through_the_neat_forward_pass():
    strategy = hyperneat(SUBSTRATE, population_size=20)
    state = jax.jit(strategy.init)(jax.random.key(0))
    nets = strategy.decoder.decode(state.population)
    spec, config = strategy.spec, strategy.config
    for i in (0, 7):
        cppn = transform(spec, state.population[i])

        def apply(net, coords):
            return forward_batch(spec, net, coords, functions=config.functions, outputs=config.outputs)

        want = hyperneat_weights(SUBSTRATE, apply, cppn, HyperNEATConfig())
        got = jax.tree_util.tree_map(lambda x, i=i: x[i], nets)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # different genomes paint different substrates
    assert not np.array_equal(np.asarray(nets.weights[0][0]), np.asarray(nets.weights[0][7]))


# ES-HyperNEAT's run compiles the quadtree search twice as long: the slow tier runs it
@pytest.mark.parametrize("make", [hyperneat, pytest.param(es_hyperneat, marks=pytest.mark.slow)])
def test_short_run_keeps_genomes_valid_and_improves(make):
    substrate = (
        SUBSTRATE
        if make is hyperneat
        else Substrate(
            inputs=[(-1.0, -1.0), (1.0, -1.0)],
            outputs=[(0.0, 1.0)],
            bias_coordinate=(0.0, -1.0),
            cppn_bias_input=True,
        )
    )
    strategy = make(substrate, population_size=30, max_nodes=16, max_conns=32)
    result = evotensor.run(strategy, XOR(), 15, jax.random.key(2), chunk_size=15, progress=False)
    h = result.history["best_fitness"]
    assert h[-1] >= h[0] and np.isfinite(h).all()
    assert h[-1] > 2.0  # a constant output scores 2 on XOR's 4 cases at best near 0.5
    for i in range(30):
        assert check_genome(strategy.spec, result.state.population[i]) == []


def test_hyperneat_xor_task_builds():
    task = get_task("hyperneat-xor").build({"pop": 24, "generations": 3, "seed": 0})
    assert task.strategy.population_size == 24 and task.generations == 3
    assert jnp.shape(task.problem.x) == (4, 2)
