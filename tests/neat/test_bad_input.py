"""Bad input to the public surface of :mod:`evotensor.neat`, as one table.

Each row calls one constructor or entry point with one bad argument and must get an
:class:`~evotensor.core.checks.ArgumentError` whose message names that argument (or, for files and
genome dicts, the file / the offending entry): NaN, +-inf, ``1e39`` (finite in Python, ``inf`` in
float32), wrong types, out-of-range sizes. Configs, specs and substrates are checked at
construction, so the table compiles nothing; the network rows share one small network. A
hypothesis fuzz draws config fields from ``{nan, inf, -1, 0, huge, wrong type}``.
"""

from __future__ import annotations

import dataclasses
import math
import re

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    NEAT,
    ChoiceAttribute,
    ConnectionGene,
    CrossoverConfig,
    DistanceConfig,
    FloatAttribute,
    GenomeSpec,
    GradientFit,
    GradientTuner,
    MutationConfig,
    NEATConfig,
    NetworkFitness,
    NodeGene,
    OutputMode,
    ReproductionConfig,
    SpeciesConfig,
    es_hyperneat,
    forward,
    forward_batch,
    genome_from_dict,
    genome_to_dict,
    hyperneat,
    neat_mode,
    parse_ini,
    read_ini,
    transform,
)
from evotensor.neat.substrate import ESHyperNEATConfig, HyperNEATConfig, Substrate

INF, NAN = math.inf, math.nan
ALWAYS = [NAN, INF, -INF, 1e39, "1.0", None, True]
SPEC = GenomeSpec(2, 1)
SUBSTRATE = Substrate(inputs=[(-1.0, -1.0), (1.0, -1.0)], outputs=[(0.0, 1.0)])


def float_attribute(**kw):
    return FloatAttribute(**{"name": "w", **kw})


def substrate(**kw):
    return Substrate(**{"inputs": [(-1.0, -1.0), (1.0, -1.0)], "outputs": [(0.0, 1.0)], **kw})


CASES: list[tuple[str, object, str, dict]] = []


def case(label, build, argument, **kw):
    CASES.append((label, build, argument, kw))


def config_fields(cls):
    return {f.name: f.default for f in dataclasses.fields(cls) if f.init}


# every float field of the part configs: the always-bad values, plus what its range refuses
FLOAT_RULES = {
    MutationConfig: {
        n: [-0.1, 1.5] for n in ("conn_add_prob", "conn_delete_prob", "node_add_prob", "node_delete_prob")
    },
    CrossoverConfig: {"disable_inherit_prob": [-0.1, 1.5]},
    DistanceConfig: {
        "compatibility_disjoint_coefficient": [-1.0],
        "compatibility_weight_coefficient": [-1.0],
        "compatibility_enable_penalty": [-1.0],
    },
    SpeciesConfig: {
        "compatibility_threshold": [0.0, -1.0],
        "threshold_adjust_rate": [-1.0],
        "threshold_min": [0.0, -1.0],
        "threshold_max": [0.0, -1.0],
    },
    ReproductionConfig: {
        n: [-0.1, 1.5]
        for n in (
            "survival_threshold",
            "spawn_number_change_rate",
            "interspecies_crossover_prob",
            "mutate_only_prob",
        )
    },
    HyperNEATConfig: {"weight_threshold": [-0.1, 1.0], "max_weight": [0.0, -1.0]},
    ESHyperNEATConfig: {
        "variance_threshold": [-1.0],
        "band_threshold": [-1.0],
        "division_threshold": [-1.0],
        "weight_threshold": [-0.1, 1.0],
        "max_weight": [0.0, -1.0],
        "width": [0.0, -1.0],
    },
}
INT_RULES = {
    DistanceConfig: {"normalize_small_genomes_threshold": [-1]},
    SpeciesConfig: {
        "max_species": [0],
        "max_stagnation": [0],
        "species_elitism": [-1],
        "target_num_species": [0],
    },
    ReproductionConfig: {"elitism": [-1], "min_species_size": [0]},
    HyperNEATConfig: {"activate_time": [0]},
    ESHyperNEATConfig: {
        "max_depth": [0, 11],
        "initial_depth": [-1, 5],
        "iteration_level": [-1],
        "max_hidden": [0],
        "activate_time": [0],
    },
}
for cls, rules in FLOAT_RULES.items():
    for field, extra in rules.items():
        for value in ALWAYS + extra:
            if value is None and config_fields(cls)[field] is None:
                continue  # None is the default ("auto")
            case(cls.__name__, cls, field, **{field: value})
for cls, rules in INT_RULES.items():
    for field, extra in rules.items():
        for value in [2.0, "2", True, NAN, *extra]:
            if value is True and field == "target_num_species":
                continue
            case(cls.__name__, cls, field, **{field: value})
# names and flags
for cls, field, value in [
    (MutationConfig, "split", "halve"),
    (MutationConfig, "split_identity", None),
    (MutationConfig, "new_node_attrs", 3),
    (MutationConfig, "new_conn_attrs", "one"),
    (MutationConfig, "structural_mutation_surer", "perhaps"),
    (MutationConfig, "single_structural_mutation", "yes"),
    (MutationConfig, "prune_dangling", 1),
    (CrossoverConfig, "mode", "random"),
    (DistanceConfig, "mode", "euclid"),
    (DistanceConfig, "compatibility_include_node_genes", "no"),
    (SpeciesConfig, "species_fitness_func", "sum"),
    (ReproductionConfig, "fitness_sharing", "none"),
    (ReproductionConfig, "spawn_method", None),
    (ReproductionConfig, "reset_on_extinction", 0),
    (OutputMode, "activate", "yes"),
    (OutputMode, "transform", 3),
    (NEATConfig, "mutation", {"conn_add_prob": 0.1}),
    (NEATConfig, "species", None),
    (NEATConfig, "outputs", True),
    (NEATConfig, "functions", "numpy"),
    (NEATConfig, "policy", "lstm"),
    (NEATConfig, "mode", "python"),
    (HyperNEATConfig, "activation", "swish"),
    (ESHyperNEATConfig, "output_activation", 3),
    (ESHyperNEATConfig, "exact_feedforward", "yes"),
    (ESHyperNEATConfig, "center", (0.0, NAN)),
    (ESHyperNEATConfig, "center", (0.0, 1e39)),
    (ESHyperNEATConfig, "center", (0.0,)),
]:
    case(cls.__name__, cls, field, **{field: value})
# genes
for field in ("init_mean", "init_std", "mutate_power", "min_value", "max_value"):
    for value in [NAN, INF, -INF, 1e39, "0", None, True]:
        case("FloatAttribute", float_attribute, f"w_{field}", **{field: value})
for field in ("init_std", "mutate_power"):
    case("FloatAttribute", float_attribute, field, **{field: -1.0})
case("FloatAttribute", float_attribute, "w_min_value", min_value=5.0, max_value=1.0)
for field in ("mutate_rate", "replace_rate"):
    for value in [NAN, -0.1, 1.5, "0.5", True]:
        case("FloatAttribute", float_attribute, f"w_{field}", **{field: value})
case("FloatAttribute", float_attribute, "w_init_type", init_type="cauchy")
case("FloatAttribute", float_attribute, "name", name="")
case("FloatAttribute", float_attribute, "name", name=3)
for value in [(), ("a", "a"), ("a", ""), (3,)]:
    case("ChoiceAttribute", lambda **kw: ChoiceAttribute("act", **kw), "act_options", options=value)
case("ChoiceAttribute", lambda **kw: ChoiceAttribute("act", ("a", "b"), **kw), "act_default", default="c")
case(
    "ChoiceAttribute",
    lambda **kw: ChoiceAttribute("act", ("a", "b"), **kw),
    "act_mutate_rate",
    mutate_rate=NAN,
)
case("NodeGene", NodeGene, "unique", extra=(float_attribute(name="bias"),))
case("ConnectionGene", ConnectionGene, "enabled_mutate_rate", enabled_mutate_rate=2.0)
# the genome shape
for field in ("num_inputs", "num_outputs", "max_conns"):
    for value in [0, -1, 2.0, True, "2", None]:
        case(
            "GenomeSpec",
            lambda **kw: GenomeSpec(**{"num_inputs": 2, "num_outputs": 1, **kw}),
            field,
            **{field: value},
        )
for value in [2, 0, 2.5, True]:  # at least num_inputs + num_outputs
    case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "max_nodes", max_nodes=value)
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "max_conns", max_conns=1)  # 'full' needs 2
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "feed_forward", feed_forward="yes")
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "node_gene", node_gene=ConnectionGene())
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "conn_gene", conn_gene=NodeGene())
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "initial_connection", initial_connection="fs_neat")
case("GenomeSpec", lambda **kw: GenomeSpec(2, 1, **kw), "connection_fraction", connection_fraction=NAN)
# modes and the strategy
for value in ["neat", None, 3]:
    case("neat_mode", neat_mode, "mode", mode=value)
    case("NEAT.from_mode", NEAT.from_mode, "mode", mode=value)
for field in ("num_inputs", "num_outputs", "max_nodes", "max_conns"):
    case("neat_mode", neat_mode, field, **{field: 0})
    case("NEAT.from_mode", NEAT.from_mode, field, **{field: 2.0})
for value in [1, 0, 2.5, True, "150", None]:
    case("NEAT", lambda **kw: NEAT(SPEC, **kw), "population_size", population_size=value)
case("NEAT", lambda **kw: NEAT(**kw), "spec", spec=(2, 1))
case("NEAT", lambda **kw: NEAT(SPEC, **kw), "config", config={"mutation": None})
case("NEAT", lambda **kw: NEAT(SPEC, **kw), "population_size", population_size=10)  # < 32 species * 2
case("NEAT", lambda **kw: NEAT(SPEC, **kw), "decoder", decoder="genome")
# HyperNEAT
for field in ("inputs", "outputs"):
    for value in [[], [(0.0, NAN)], [(0.0, 1e39)], "ab", [(0.0, 1.0, 2.0)] if field == "outputs" else [[]]]:
        case("Substrate", substrate, field, **{field: value})
case("Substrate", substrate, "hidden", hidden=np.zeros((2, 2)))
case("Substrate", substrate, r"hidden\[0\]", hidden=[[(0.0, INF)]])
case("Substrate", substrate, "kind", kind="convolutional")
case("Substrate", substrate, "bias_coordinate", bias_coordinate=(0.0, NAN))
case("Substrate", substrate, "distinct", outputs=[(1.0, -1.0)])
case("Substrate", substrate, "bias_output", bias_output=1)
for build, name in ((hyperneat, "hyperneat"), (es_hyperneat, "es_hyperneat")):
    case(
        name,
        lambda build=build, **kw: build(**{"substrate": SUBSTRATE, **kw}),
        "substrate",
        substrate=[(0, 1)],
    )
    case(name, lambda build=build, **kw: build(**{"substrate": SUBSTRATE, **kw}), "mode", mode="neat")
    case(
        name,
        lambda build=build, **kw: build(**{"substrate": SUBSTRATE, **kw}),
        "population_size",
        population_size=0,
    )
case("hyperneat", lambda **kw: hyperneat(SUBSTRATE, **kw), "policy", policy="sometimes")
# NetworkFitness
case("NetworkFitness", NetworkFitness, "fitness", fitness="mse")
case("NetworkFitness", lambda **kw: NetworkFitness(lambda n, k: 0.0, **kw), "maximize", maximize="yes")
# genome dicts
for data, argument in [
    ([1, 2], "data"),
    ({"nodes": [], "connections": {}}, "nodes"),
    ({"nodes": {}, "connections": {}, "fitness": 1.0}, "unknown keys"),
    ({"nodes": {"0": {}}}, "nodes key"),
    ({"nodes": {0: {"bias": NAN}}}, "bias"),
    ({"nodes": {0: {"bias": 1e39}}}, "bias"),
    ({"nodes": {0: {"bias": "0.5"}}}, "bias"),
    ({"nodes": {0: {"activation": "swish"}}}, "activation"),
    ({"nodes": {0: []}}, r"nodes\[0\]"),
    ({"nodes": {-1: {}}}, r"nodes\[-1\]"),
    ({"nodes": {0: {}}, "connections": {(-1, 0): {}}}, "innovation"),
    ({"nodes": {0: {}}, "connections": {(-1, 0): {"innovation": "1"}}}, "innovation"),
    ({"nodes": {0: {}}, "connections": {(-1, 0): {"innovation": 0, "weight": INF}}}, "weight"),
    ({"nodes": {0: {}}, "connections": {(-1, 0): {"innovation": 0, "enabled": "no"}}}, "enabled"),
    ({"nodes": {0: {}}, "connections": {(-1, 5): {"innovation": 0}}}, "missing node"),
    (
        {"nodes": {0: {}}, "connections": {(-1, 0): {"innovation": 0}, (-2, 0): {"innovation": 0}}},
        "duplicate",
    ),
    ({"nodes": {0: {}}, "connections": {(0, -1): {"innovation": 0}}}, "ends in an input"),
    ({"nodes": {0: {}}, "connections": {-1: {"innovation": 0}}}, "connections key"),
    ({"nodes": {0: {}}, "connections": {(-1, 0.5): {"innovation": 0}}}, "out"),
]:
    case("genome_from_dict", lambda **kw: genome_from_dict(SPEC, **kw), argument, data=data)
case("genome_from_dict", genome_from_dict, "spec", spec=None, data={})

for value in ALWAYS + [0, -1, 2.5]:
    case("GradientTuner", GradientTuner, "steps", steps=value)
for value in ALWAYS + [0.0, -0.1]:
    case("GradientTuner", GradientTuner, "learning_rate", learning_rate=value)
case("GradientTuner", GradientTuner, "optimizer", optimizer="adam")
for value in [(), ("",), (1,), 3]:
    case("GradientTuner", GradientTuner, "attributes", attributes=value)
case("GradientTuner", GradientTuner, "keep_best", keep_best="yes")
XOR_X, XOR_Y = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32), np.array([0, 1, 1, 0], np.float32)


def gradient_fit(**kw):
    return GradientFit(**{"decoder": NEAT(SPEC).decoder, "x": XOR_X, "y": XOR_Y, **kw})


for value in [None, SPEC, "neat"]:
    case("GradientFit", gradient_fit, "decoder", decoder=value)
for value in [np.zeros((4, 3)), np.zeros(4), np.zeros((0, 2)), "ab", None, np.full((4, 2), NAN)]:
    case("GradientFit", gradient_fit, r"\bx must", x=value)
for value in [np.zeros(3), np.zeros((4, 2)), np.array(["a"] * 4), np.full(4, INF)]:
    case("GradientFit", gradient_fit, r"\by must", y=value)
case("GradientFit", gradient_fit, "loss", loss="huber")
for value in [NAN, 0.0, 1.5, "half"]:
    case("GradientFit", gradient_fit, "fraction", fraction=value)
case("GradientFit", gradient_fit, "tuner", tuner={"steps": 3})
case("GradientFit", gradient_fit, "attributes", tuner=GradientTuner(attributes=("weight", "gain")))


test_bad_argument_is_refused_naming_it = refusal_test(CASES)


def test_the_defaults_of_the_table_build():
    """Every row above changes one argument of a call that works."""
    for cls in (*FLOAT_RULES, OutputMode, NEATConfig):
        cls()
    float_attribute(), substrate(), neat_mode(), NEAT(SPEC), NetworkFitness(lambda n, k: 0.0)
    GradientTuner(), gradient_fit()
    data = {"nodes": {0: {"bias": 0.5}}, "connections": {(-1, 0): {"innovation": 0, "weight": 2.0}}}
    assert genome_to_dict(SPEC, genome_from_dict(SPEC, data))["connections"][(-1, 0)]["weight"] == 2.0


@pytest.fixture(scope="module")
def network():
    return transform(
        SPEC,
        SPEC.initial(jax.random.key(0), 2).__class__(
            **{k: v[0] for k, v in vars(SPEC.initial(jax.random.key(0), 2)).items()}
        ),
    )


@pytest.mark.parametrize(
    "x",
    [np.zeros(3), np.zeros((1, 2)), np.zeros(()), "ab", None, np.array(["a", "b"]), np.zeros(2, complex)],
    ids=repr,
)
def test_forward_with_a_bad_input_names_x(network, x):
    with pytest.raises(ArgumentError, match="x must"):
        forward(SPEC, network, x)


@pytest.mark.parametrize("x", [np.zeros(2), np.zeros((4, 3)), np.zeros((4, 2, 1)), "ab", None], ids=repr)
def test_forward_batch_with_a_bad_input_names_x(network, x):
    with pytest.raises(ArgumentError, match=r"x must"):
        forward_batch(SPEC, network, x)


def _ini_text(**values) -> str:
    """neat-python's XOR settings as an INI file, with ``values`` replacing the keys' lines."""
    from evotensor.neat import to_ini

    spec, config = neat_mode("neat-python")
    text = to_ini(spec, config, population_size=150)
    for key, value in values.items():
        text, count = re.subn(rf"^{key}\s*=.*$", f"{key} = {value}", text, count=1, flags=re.M)
        assert count == 1, key
    return text


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (_ini_text(bias_init_mean="nan"), "bias_init_mean"),
        (_ini_text(bias_init_mean="1e39"), "bias_init_mean"),
        (_ini_text(bias_init_mean="zero"), "bias_init_mean"),
        (_ini_text(weight_max_value="inf"), "weight_max_value"),
        (_ini_text(pop_size="1.5"), "pop_size"),
        (_ini_text(pop_size="1"), "pop_size"),
        (_ini_text(compatibility_threshold="-1"), "compatibility_threshold"),
        (_ini_text(compatibility_threshold="1e39"), "compatibility_threshold"),
        (_ini_text(feed_forward="maybe"), "feed_forward"),
        (_ini_text(conn_add_prob="2"), "conn_add_prob"),
        (_ini_text().replace("[DefaultGenome]", "[DefaultGenome]\nno_such_key = 1"), "no_such_key"),
        (_ini_text().replace("[NEAT]", "[NEET]"), "NEET"),
        (_ini_text().replace("[NEAT]", "NEAT"), "INI"),
        (re.sub(r"^pop_size.*$", "", _ini_text(), flags=re.M), "pop_size"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "",
)
def test_a_bad_ini_file_names_the_file_and_the_key(tmp_path, text, key):
    path = tmp_path / "bad.ini"
    path.write_text(text)
    with pytest.raises(ArgumentError, match=key) as info:
        read_ini(path)
    assert str(path) in str(info.value)


def test_an_unreadable_ini_file_names_the_file(tmp_path):
    for path in (tmp_path / "missing.ini", tmp_path):
        with pytest.raises(ArgumentError, match="missing.ini" if path != tmp_path else str(tmp_path)):
            read_ini(path)
    binary = tmp_path / "binary.ini"
    binary.write_bytes(b"\xff\xfe\x00[NEAT]\x00\x81")
    with pytest.raises(ArgumentError, match="binary.ini"):
        read_ini(binary)
    with pytest.raises(ArgumentError, match="path"):
        read_ini(None)
    with pytest.raises(ArgumentError, match="text"):
        parse_ini(b"[NEAT]")


WILD = st.sampled_from([NAN, INF, -INF, -1, 0, -1.0, 0.0, 1e39, 10**40, "x", None, True, (), 0.5, 2, 3.0])


@given(
    cls=st.sampled_from(sorted(FLOAT_RULES.keys() | INT_RULES.keys(), key=lambda c: c.__name__)),
    data=st.data(),
)
def test_fuzzed_config_fields_build_or_raise_argument_error(cls, data):
    fields = config_fields(cls)
    name = data.draw(st.sampled_from(sorted(fields)))
    value = data.draw(WILD)
    try:
        built = cls(**{name: value})
    except ArgumentError as err:
        assert name in str(err), (name, value, str(err))
        return
    # what builds holds a float32-finite value in every numeric field
    for field in dataclasses.fields(built):
        v = getattr(built, field.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v) and abs(v) <= 3.4e38, (field.name, v)
