"""Initial genomes (:meth:`GenomeSpec.initial`): neat-python's keys, links and innovation numbers,
its ``num_hidden`` with ``full_direct`` / ``full_nodirect`` / ``partial_*`` and TensorNEAT's
``init_hidden_layers``, checked against hand-written link lists and, for random specs, against
:func:`check_genome` and the counters."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.neat import GenomeSpec, check_genome, genome_to_dict, mutate, transform
from evotensor.neat.genome import EMPTY
from evotensor.neat.innovation import initial_counters
from evotensor.neat.mutation import MutationConfig


def links(genome_dict):
    """``{(in, out): innovation}`` of a genome dict."""
    return {pair: c["innovation"] for pair, c in genome_dict["connections"].items()}


@pytest.mark.parametrize("direct", [False, True])
def test_one_hidden_layer_has_neat_pythons_links_in_its_order(direct):
    """neat-python 2.1's ``compute_full_connections``: inputs to hidden, hidden to outputs, then
    (``full_direct``) inputs to outputs; innovation numbers in that order; hidden keys after the
    outputs."""
    spec = GenomeSpec(2, 1, max_nodes=8, max_conns=12, hidden_layers=(3,), initial_direct=direct)
    g = genome_to_dict(spec, spec.initial(jax.random.key(0), 1)[0])
    assert sorted(g["nodes"]) == [0, 1, 2, 3]
    want = [(-1, 1), (-1, 2), (-1, 3), (-2, 1), (-2, 2), (-2, 3), (1, 0), (2, 0), (3, 0)]
    if direct:
        want += [(-1, 0), (-2, 0)]
    assert links(g) == {pair: i for i, pair in enumerate(want)}
    assert spec.num_initial_conns == len(want) and spec.first_hidden_key == 4
    assert [int(c) for c in initial_counters(spec)] == [4, len(want)]


def test_hidden_layers_join_consecutive_layers_as_tensorneat_does():
    spec = GenomeSpec(2, 1, max_nodes=10, max_conns=20, hidden_layers=(2, 2))
    g = genome_to_dict(spec, spec.initial(jax.random.key(0), 1)[0])
    want = [(-1, 1), (-1, 2), (-2, 1), (-2, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 0), (4, 0)]
    assert links(g) == {pair: i for i, pair in enumerate(want)}
    net = transform(spec, spec.initial(jax.random.key(0), 1)[0])
    level = dict(
        zip(np.asarray(spec.initial(jax.random.key(0), 1)[0].node_key).tolist(), np.asarray(net.level))
    )
    assert (level[1], level[2], level[3], level[4], level[0]) == (1, 1, 2, 2, 3)


def test_without_hidden_layers_the_links_are_unchanged():
    spec = GenomeSpec(3, 2)
    g = genome_to_dict(spec, spec.initial(jax.random.key(0), 1)[0])
    assert links(g) == {(-1 - i, j): i * 2 + j for i in range(3) for j in range(2)}


@st.composite
def specs(draw):
    n_in, n_out = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    layers = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    initial = draw(st.sampled_from(["full", "partial", "none"]))
    fraction = draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]))
    probe = GenomeSpec(n_in, n_out, 64, 64, hidden_layers=layers, initial_connection="none")
    return GenomeSpec(
        n_in,
        n_out,
        max_nodes=n_in + n_out + sum(layers) + draw(st.integers(0, 3)),
        max_conns=max(1, probe.num_initial_conns + draw(st.integers(0, 4))),
        initial_connection=initial,
        connection_fraction=fraction,
        hidden_layers=layers,
        initial_direct=draw(st.booleans()),
        feed_forward=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None)
@given(specs(), st.integers(0, 2**31 - 1))
def test_initial_genomes_are_valid_and_below_the_counters(spec, seed):
    population = spec.initial(jax.random.key(seed), 6)
    next_key, next_innov = (int(c) for c in initial_counters(spec))
    candidates = dict(zip(zip(*spec.initial_links()), range(spec.num_initial_conns)))
    drawn = set()
    for i in range(6):
        genome = population[i]
        assert check_genome(spec, genome) == []
        g = genome_to_dict(spec, genome)
        assert sorted(g["nodes"]) == list(range(spec.num_outputs + spec.num_hidden))
        assert max(g["nodes"]) < next_key
        # every link is a candidate with the candidate's innovation number, all enabled
        assert all(candidates[pair] == innov for pair, innov in links(g).items())
        assert all(c["enabled"] for c in g["connections"].values())
        assert len(g["connections"]) == spec.num_initial_rows  # "partial": exactly round(L * f)
        assert all(innov < next_innov for innov in links(g).values())
        drawn.add(tuple(sorted(links(g))))
    if spec.initial_connection == "partial" and 0 < spec.num_initial_rows < spec.num_initial_conns - 1:
        assert len(drawn) > 1  # each genome draws its own subset


def test_mutation_after_hidden_layers_hands_out_fresh_keys():
    spec = GenomeSpec(2, 1, max_nodes=12, max_conns=30, hidden_layers=(3,), initial_direct=True)
    population = spec.initial(jax.random.key(0), 32)
    node_key, innov = initial_counters(spec)
    config = MutationConfig(node_add_prob=1.0, conn_add_prob=1.0)
    step = jax.jit(mutate, static_argnums=(1, 2))
    for k in jax.random.split(jax.random.key(1), 3):
        population, node_key, innov, _ = step(k, spec, config, population, node_key, innov)
    keys = np.asarray(population.node_key)
    new = keys[(keys != EMPTY) & (keys >= spec.first_hidden_key)]
    assert new.size > 0 and np.all(new < int(node_key))
    assert all(check_genome(spec, population[i]) == [] for i in range(32))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(hidden_layers=3), "hidden_layers must be a tuple"),
        (dict(hidden_layers=(2, 0)), r"hidden_layers\[1\]"),
        (dict(hidden_layers=(2,), initial_direct="yes"), "initial_direct"),
        (dict(hidden_layers=(50,)), "max_nodes"),
        (dict(hidden_layers=(10,), max_conns=20), "max_conns must be >= 50"),
        (dict(initial_connection="partial", connection_fraction=0.5, max_conns=2), "max_conns must be >= 3"),
    ],
)
def test_bad_initial_structure_is_refused_naming_it(kwargs, match):
    from evotensor.core.checks import ArgumentError

    with pytest.raises(ArgumentError, match=match):
        GenomeSpec(**{"num_inputs": 3, "num_outputs": 2, **kwargs})


def test_genomes_of_another_spec_are_refused_naming_the_argument():
    from evotensor.core.checks import ArgumentError
    from evotensor.neat import loss_and_grad, neat_policy

    spec, other = GenomeSpec(2, 1, 10, 20), GenomeSpec(2, 1, 12, 20)
    population = other.initial(jax.random.key(0), 3)
    with pytest.raises(ArgumentError, match=r"genome has \(12,\) node rows .* wants \(10,\) / \(20,\)"):
        transform(spec, population[0])
    with pytest.raises(ArgumentError, match=r"genomes has \(12,\) node rows"):
        loss_and_grad(neat_policy(spec), population, np.zeros((4, 2)), lambda y: y.sum())
    with pytest.raises(ArgumentError, match="genome must be a Genome"):
        transform(spec, {"node_key": np.zeros(10)})
    assert spec.check_rows(spec.initial(jax.random.key(0), 3)) is not None


def test_the_direct_flag_without_hidden_layers_is_one_spec():
    """Without hidden layers ``initial_direct`` links nothing more: the spec reads it back False,
    so an INI round trip (full_direct there) gives an equal spec."""
    from evotensor.neat import neat_mode, parse_ini, to_ini

    assert GenomeSpec(2, 1, initial_direct=True) == GenomeSpec(2, 1)
    spec, config = neat_mode("neat-python")
    hidden = GenomeSpec(2, 1, hidden_layers=(2,), initial_direct=True, node_gene=spec.node_gene)
    for s in (spec, hidden):
        back = parse_ini(to_ini(s, config, population_size=20), max_nodes=s.max_nodes, max_conns=s.max_conns)
        assert back[0] == s
