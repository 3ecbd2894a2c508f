"""WeightDecoder (evotensor.neat.weights): one NEAT topology's float attributes as a flat vector, so
an evolution strategy tunes the weights of a network NEAT found."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.es import CMAES
from evotensor.neat import WeightDecoder, neat_mode
from evotensor.neat.genome import check_genome
from evotensor.neat.network import forward, transform
from evotensor.problems.function_fit import XOR


@pytest.fixture(scope="module")
def xor_topology():
    """2 inputs -> 2 hidden -> 1 output, no direct links, random weights (XOR needs the hidden layer)."""
    spec, config = neat_mode("neat-python", 2, 1, max_nodes=8, max_conns=16, hidden_layers=(2,))
    genome = spec.initial(jax.random.key(0), 1)[0]
    return spec, config, genome


def test_the_genomes_own_values_round_trip_and_decode_is_transform(xor_topology):
    spec, config, genome = xor_topology
    decoder = WeightDecoder(spec, genome, config)
    # 6 connections (weight), 3 non-input nodes (bias, response)
    assert decoder.num_dims == 6 + 3 * 2
    for a, b in zip(
        jax.tree_util.tree_leaves(decoder.genome_of(decoder.initial())), jax.tree_util.tree_leaves(genome)
    ):
        np.testing.assert_array_equal(a, b)
    x = jax.random.normal(jax.random.key(1), (3, decoder.num_dims))
    nets = decoder.decode(x)
    for i in range(3):
        g = decoder.genome_of(x[i])
        assert check_genome(spec, g) == []
        expected = transform(spec, g)
        for case in XOR().x:
            np.testing.assert_array_equal(
                forward(spec, nets[i], case, outputs=config.outputs),
                forward(spec, expected, case, outputs=config.outputs),
            )
    # only the weights: the node attributes stay the genome's
    weights = WeightDecoder(spec, genome, config, attributes="weight")
    assert weights.num_dims == 6
    tuned = weights.genome_of(jnp.full(6, 0.5))
    np.testing.assert_array_equal(tuned.node_attrs, genome.node_attrs)
    assert np.sum(np.asarray(tuned.conn_attrs) == 0.5) == 6


def test_values_are_clipped_to_the_attribute_bounds(xor_topology):
    spec, config, genome = xor_topology
    decoder = WeightDecoder(spec, genome, config, attributes=("weight",))
    high = spec.conn_gene.floats[0].max_value
    tuned = decoder.genome_of(jnp.full(6, 1e9))
    assert float(jnp.max(tuned.conn_attrs)) == pytest.approx(high)
    assert check_genome(spec, tuned) == []


def test_cma_es_tunes_a_fixed_topology_to_solve_xor(xor_topology):
    spec, config, genome = xor_topology
    decoder = WeightDecoder(spec, genome, config)
    strategy = CMAES(16, num_dims=decoder.num_dims, mean_init=np.asarray(decoder.initial()), sigma_init=3.0)
    result = evotensor.run(strategy, XOR(), 150, jax.random.key(3), decoder=decoder, progress=False)
    assert result.best_fitness > 3.9  # 4 - SSE: XOR solved with the topology NEAT would have to find
    before = XOR().evaluate(None, decoder.decode(decoder.initial()[None]), decoder.apply).fitness[0]
    assert float(before) < 3.5


def test_bad_genomes_vectors_and_attributes_are_refused(xor_topology):
    spec, config, genome = xor_topology
    with pytest.raises(ArgumentError, match="genome must be one genome"):
        WeightDecoder(spec, spec.initial(jax.random.key(0), 2), config)
    broken = genome.replace(conn_out=genome.conn_out.at[0].set(99))
    with pytest.raises(ArgumentError, match="genome is not a valid genome"):
        WeightDecoder(spec, broken, config)
    with pytest.raises(ArgumentError, match="attributes must be float attributes"):
        WeightDecoder(spec, genome, config, attributes=("colour",))
    decoder = WeightDecoder(spec, genome, config)
    with pytest.raises(ArgumentError, match=r"x must have shape \(12,\)"):
        decoder.genome_of(jnp.zeros(5))
    with pytest.raises(ArgumentError, match=r"genotypes must have shape \(pop, 12\)"):
        decoder.decode(jnp.zeros(12))
