"""NEAT on a mesh (:meth:`NEAT.on_mesh`, :mod:`evotensor.neat.sharding`).

In this process (one CPU device): what ``on_mesh`` returns and refuses, the layouts' invariants. The
slow tier (a 4-device subprocess under XLA's default options, tests/es/mesh_scenarios.py): ``run(NEAT,
XOR, mesh=)`` equals the run without a mesh bit for bit, with the genomes split and each device
evaluating its own networks, and the compiled generation (forward pass and genome tables per device,
how often the population is gathered).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P
from tests.es.mesh_scenarios import four_devices, two_processes
from tests.neat.mesh_scenarios import POP, loop_depths, small_neat

from evotensor.core.checks import ArgumentError
from evotensor.neat.genome import GenomeSpec
from evotensor.neat.sharding import MeshLayout, OneDevice, PerDeviceDecoder
from evotensor.neat.species import init_species_state
from evotensor.neat.strategy import NEAT, NEATState


@pytest.fixture(scope="module")
def mesh1():
    return jax.make_mesh((1,), ("pop",))


def test_on_mesh_returns_a_placed_copy(mesh1):
    neat = small_neat()
    placed = neat.on_mesh(mesh1)
    assert isinstance(placed, NEAT) and placed is not neat
    assert isinstance(placed.layout, MeshLayout) and isinstance(neat.layout, OneDevice)  # original untouched
    assert placed.spec is neat.spec and placed.config is neat.config
    # the same decoder, its decode run per device
    assert isinstance(placed.decoder, PerDeviceDecoder) and placed.decoder.wrapped is neat.decoder
    assert placed.decoder.apply is neat.decoder.apply and repr(placed.decoder) == repr(neat.decoder)
    assert placed.on_mesh(mesh1).decoder.wrapped is neat.decoder  # placed again: wrapped once
    assert placed.population_size == neat.population_size and repr(placed) == repr(neat)
    with pytest.raises(ValueError, match="call neat.on_mesh"):
        neat.state_shardings(None)


def test_bad_mesh_axis_and_population_are_refused_by_name(mesh1):
    with pytest.raises(ArgumentError, match="mesh must be a jax.sharding.Mesh"):
        small_neat().on_mesh(object())
    with pytest.raises(ArgumentError, match="mesh_axis must name"):
        small_neat().on_mesh(mesh1, "batch")


SPECIES = small_neat().config.species


def _state(spec: GenomeSpec, pop: int, species: int) -> NEATState:
    population = spec.empty((pop,))
    return NEATState(
        population=population,
        species_of=jnp.zeros(pop, jnp.int32),
        species=init_species_state(
            spec, dataclasses.replace(small_neat().config.species, max_species=species)
        ),
        next_node_key=jnp.int32(0),
        next_innov=jnp.int32(0),
        best=population[0],
        best_fitness=jnp.float32(0),
        generation=jnp.int32(0),
        extinct=jnp.bool_(False),
    )


@given(pop=st.integers(1, 12), nodes=st.integers(3, 9), conns=st.integers(2, 9), species=st.integers(1, 4))
def test_state_layout_splits_exactly_the_genome_tables(pop, nodes, conns, species):
    mesh = jax.make_mesh((1,), ("pop",))
    spec = GenomeSpec(2, 1, max_nodes=nodes, max_conns=conns)
    state = jax.eval_shape(lambda: _state(spec, pop, species))  # shapes only: nothing runs
    layout = MeshLayout(mesh, "pop", pop).state_shardings(state)
    assert jax.tree_util.tree_structure(layout) == jax.tree_util.tree_structure(state)
    for path, sharding in jax.tree_util.tree_flatten_with_path(layout)[0]:
        split = path[0].name == "population"
        assert sharding.spec == (P("pop") if split else P()), jax.tree_util.keystr(path)


def test_one_device_layout_changes_nothing_and_own_rows_is_the_function(mesh1):
    tree = {"a": jnp.arange(6.0).reshape(3, 2)}
    one = OneDevice()
    assert one.population(tree) is tree and one.replicated(tree) is tree and one.state(tree) is tree
    fn = lambda pop, scale: pop["a"].sum(axis=1) * scale  # noqa: E731
    layout = MeshLayout(mesh1, "pop", 3)
    got = jax.jit(lambda t: layout.own_rows(fn, t, jnp.float32(2.0)))(tree)
    np.testing.assert_array_equal(got, one.own_rows(fn, tree, jnp.float32(2.0)))


def test_gathered_population_is_the_population_bit_for_bit(mesh1):
    population = GenomeSpec(2, 1, max_nodes=4, max_conns=3).empty((6,))
    # NaN payloads, -0.0 and infinities survive the packing (float tables travel bitcast)
    odd = jnp.array([jnp.nan, -0.0, jnp.inf, -jnp.inf], jnp.float32)
    population = population.replace(
        node_attrs=population.node_attrs.at[:, :4, 0].set(odd),
        node_key=jnp.arange(-12, 12, dtype=jnp.int32).reshape(6, 4),  # each row its own
        conn_enabled=jnp.arange(18).reshape(6, 3) % 4 == 1,
    )
    tree = (population, jnp.arange(6, dtype=jnp.int8), jnp.arange(6.0, dtype=jnp.float16))  # own gathers
    got = jax.jit(MeshLayout(mesh1, "pop", 6).gathered)(tree)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(tree)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
    assert OneDevice().gathered(tree) is tree


def test_per_device_decoder_decodes_as_the_wrapped_one(mesh1):
    neat = small_neat()
    placed = neat.on_mesh(mesh1)
    population = jax.eval_shape(lambda: neat.spec.initial(jax.random.key(1), 4))  # shapes: nothing runs
    got, want = (
        jax.eval_shape(placed.decoder.decode, population),
        jax.eval_shape(neat.decoder.decode, population),
    )
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    assert jax.tree_util.tree_leaves(got) == jax.tree_util.tree_leaves(want)
    assert placed.decoder.spec is neat.decoder.spec  # other attributes are the wrapped decoder's


_LOOPED_HLO = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
}

%cond (p: (s32[], f32[4])) -> pred[] {
  %x = pred[] all-reduce(%y), to_apply=%add
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %g = f32[4]{0} all-gather(%z), dimensions={0}
  %c = f32[4]{0} call(%g), to_apply=%inner
}

%inner (p: f32[4]) -> f32[4] {
  %r = f32[4]{0} all-reduce(%p), to_apply=%add
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %once = f32[4]{0} all-gather(%p), dimensions={0}
  %w = (s32[], f32[4]) while(%t), condition=%cond, body=%body
}
"""


def test_loop_depths_finds_the_collectives_inside_loops():
    assert sorted(loop_depths(_LOOPED_HLO)) == [
        (0, "all-gather"),
        (1, "all-gather"),
        (1, "all-reduce"),  # the loop's condition
        (1, "all-reduce"),  # a computation the body calls
    ]


# -- 4 host devices ---------------------------------------------------------------------------------


def test_a_generation_holds_a_handful_of_collectives():
    # a compiled generation (tests.neat.mesh_scenarios:collectives, in the default tier's 4-device
    # launch). Left to XLA's partitioner it held 68 (39 all-gathers, 26 all-reduces, 3
    # collective-permutes), 27 of them inside loops, paid per iteration: every vmapped while loop
    # over the split genomes (building the networks, crossover's and mutation's gene lookups, the
    # cycle and reachability searches) asked all devices "still running?" each iteration, a sweep's
    # gathers and scatters over the flattened genomes became all-gathers, and speciation gathered a
    # distance column per species. Now the per-genome loops run per device (MeshLayout.per_genome),
    # speciation's columns are computed on every device, and the population (twice) and the
    # numbering's proposals (twice) travel in one packed all-gather each: 10 here
    # "fast" spelled out: functools.cache keys four_devices() and four_devices("fast") apart, and
    # tests/es/test_mesh.py asks for the latter, so a worker running both files launches once
    counts = four_devices("fast")["tests.neat.mesh_scenarios:collectives"]
    assert sum(counts["total"].values()) <= 12, counts
    assert "all-to-all" not in counts["total"] and "collective-permute" not in counts["total"], counts
    # the one left inside a loop: the forward pass's, in XOR's evaluate (the problem vmaps the
    # networks over the genomes itself)
    assert sum(counts["in_loops"].values()) <= 1, counts


@pytest.fixture(scope="module")
def neat_xor():
    return four_devices("neat")["tests.neat.mesh_scenarios:scenario_neat_xor"]


@pytest.mark.slow  # NEAT's own 4-device launch under XLA's default options: ~40 s of compile
def test_neat_on_four_devices_equals_one_device_bit_for_bit(neat_xor):
    mesh, single = neat_xor["mesh"], neat_xor["single"]
    assert mesh["state"].keys() == single["state"].keys()
    for name in single["state"]:
        np.testing.assert_array_equal(mesh["state"][name], single["state"][name], err_msg=name)
    assert mesh["best_genotype"] == single["best_genotype"]
    assert mesh["best_fitness"] == single["best_fitness"]
    assert mesh["history"].keys() == single["history"].keys()
    for name in single["history"]:
        np.testing.assert_array_equal(mesh["history"][name], single["history"][name], err_msg=name)
    # 4 generations changed the population: equality is not that of two untouched initial states
    assert sum(mesh["history"]["nodes_added"]) + sum(mesh["history"]["conns_added"]) > 0


@pytest.mark.slow  # NEAT's own 4-device launch under XLA's default options: ~40 s of compile
def test_genomes_stay_split_and_each_device_evaluates_its_own(neat_xor):
    assert neat_xor["population_specs"] == ["P('pop',)"]
    assert neat_xor["rows_here"] == [POP // 4]
    assert neat_xor["rows_per_device"] == [POP // 4]  # the decoded networks reach XOR split
    assert neat_xor["species_of_spec"] == "P()"


@pytest.mark.slow
def test_compiled_generation_works_per_device():
    program = four_devices("slow")["tests.neat.mesh_scenarios:program"]
    assert program["forward_shard"] and not program["forward_whole"]  # the forward pass per device
    assert program["conn_table_shard"]
    # the population is gathered for crossover's parents and for speciation, each time in one
    # all-gather of its genome tables packed side by side (never one gather per table)
    assert program["population_gathers"] == 2, program["all_gather_shapes"]
    assert program["table_gathers"] == 0, program["all_gather_shapes"]


@pytest.mark.slow
def test_two_processes_with_two_devices_each_equal_one_device():
    runs = [process["tests.neat.mesh_scenarios:scenario_neat_xor"] for process in two_processes()]
    for run in runs:
        assert run["mesh"] == run["single"]  # bit for bit (JSON keeps float32 values exactly)
        assert run["rows_here"] == [POP // 4] and run["rows_per_device"] == [POP // 4]
