"""Reading and writing neat-python 2.1 INI configuration files (evotensor.neat.ini).

The fixture ``XOR_CONFIG`` holds the settings of neat-python 2.1's ``examples/xor/config-feedforward``
(data, written out by hand). ``NEAT_PYTHON_KEYS`` lists, per section, every key neat-python 2.1
reads with its default classes (from its ``neat/config.py``, ``genome.py``, ``genes.py``,
``attributes.py``, ``species.py``, ``stagnation.py``, ``reproduction.py``): the mapping test
changes each of them and checks the field it lands in.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    NEAT,
    ChoiceAttribute,
    ConnectionGene,
    CrossoverConfig,
    DistanceConfig,
    FloatAttribute,
    GenomeSpec,
    MutationConfig,
    NEATConfig,
    NodeGene,
    OutputMode,
    ReproductionConfig,
    SpeciesConfig,
)
from evotensor.neat.ini import SECTIONS, neat_from_ini, parse_ini, read_ini, to_ini

XOR_CONFIG = """
[NEAT]
fitness_criterion     = max
fitness_threshold     = 3.9
pop_size              = 150
reset_on_extinction   = False

no_fitness_termination         = False

# seed = 42

[DefaultGenome]
# node activation options
activation_default      = sigmoid
activation_mutate_rate  = 0.0
activation_options      = sigmoid

aggregation_default     = sum
aggregation_mutate_rate = 0.0
aggregation_options     = sum

bias_init_mean          = 0.0
bias_init_stdev         = 1.0
bias_max_value          = 30.0
bias_min_value          = -30.0
bias_mutate_power       = 0.5
bias_mutate_rate        = 0.7
bias_replace_rate       = 0.1

compatibility_disjoint_coefficient = 1.0
compatibility_weight_coefficient   = 0.5

conn_add_prob           = 0.5
conn_delete_prob        = 0.5

enabled_default         = True
enabled_mutate_rate     = 0.01

feed_forward            = True
initial_connection      = full_direct

node_add_prob           = 0.2
node_delete_prob        = 0.2

num_hidden              = 0
num_inputs              = 2
num_outputs             = 1

response_init_mean      = 1.0
response_init_stdev     = 0.0
response_max_value      = 30.0
response_min_value      = -30.0
response_mutate_power   = 0.0
response_mutate_rate    = 0.0
response_replace_rate   = 0.0

weight_init_mean        = 0.0
weight_init_stdev       = 1.0
weight_max_value        = 30
weight_min_value        = -30
weight_mutate_power     = 0.5
weight_mutate_rate      = 0.8
weight_replace_rate     = 0.1

single_structural_mutation     = false
structural_mutation_surer      = default
bias_init_type                 = gaussian
response_init_type             = gaussian
weight_init_type               = gaussian
enabled_rate_to_true_add       = 0.0
enabled_rate_to_false_add      = 0.0

[DefaultSpeciesSet]
compatibility_threshold = 3.0

[DefaultStagnation]
species_fitness_func = max
max_stagnation       = 20
species_elitism      = 2

[DefaultReproduction]
elitism            = 2
survival_threshold = 0.2

min_species_size               = 2
"""


def _float_keys(name):
    return [
        f"{name}_{k}"
        for k in (
            "init_mean",
            "init_stdev",
            "init_type",
            "replace_rate",
            "mutate_rate",
            "mutate_power",
            "max_value",
            "min_value",
        )
    ]


NEAT_PYTHON_KEYS = {
    "NEAT": [
        "pop_size",
        "fitness_criterion",
        "fitness_threshold",
        "reset_on_extinction",
        "no_fitness_termination",
        "seed",
    ],
    "DefaultGenome": [
        "num_inputs",
        "num_outputs",
        "num_hidden",
        "feed_forward",
        "compatibility_disjoint_coefficient",
        "compatibility_weight_coefficient",
        "conn_add_prob",
        "conn_delete_prob",
        "node_add_prob",
        "node_delete_prob",
        "single_structural_mutation",
        "structural_mutation_surer",
        "initial_connection",
        "compatibility_excess_coefficient",
        "compatibility_include_node_genes",
        "compatibility_enable_penalty",
        *_float_keys("bias"),
        *_float_keys("response"),
        "activation_default",
        "activation_options",
        "activation_mutate_rate",
        "aggregation_default",
        "aggregation_options",
        "aggregation_mutate_rate",
        *_float_keys("time_constant"),
        *_float_keys("weight"),
        "enabled_default",
        "enabled_mutate_rate",
        "enabled_rate_to_true_add",
        "enabled_rate_to_false_add",
    ],
    "DefaultSpeciesSet": [
        "compatibility_threshold",
        "target_num_species",
        "threshold_adjust_rate",
        "threshold_min",
        "threshold_max",
    ],
    "DefaultStagnation": ["species_fitness_func", "max_stagnation", "species_elitism"],
    "DefaultReproduction": [
        "elitism",
        "survival_threshold",
        "min_species_size",
        "fitness_sharing",
        "spawn_method",
        "interspecies_crossover_prob",
    ],
}


def with_key(text: str, section: str, key: str, value: str | None) -> str:
    """``text`` with ``[section] key`` set to ``value`` (``None``: removed), added if absent."""
    lines = text.splitlines()
    start = lines.index(f"[{section}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i in range(start + 1, end):
        if pattern.match(lines[i]):
            if value is None:
                del lines[i]
            else:
                lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    assert value is not None, f"{key} not in [{section}]"
    lines.insert(start + 1, f"{key} = {value}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# the XOR example, field by field


def test_xor_example_every_field():
    spec, config, pop, extras = parse_ini(XOR_CONFIG)
    assert pop == 150
    assert extras == {
        "fitness_criterion": "max",
        "fitness_threshold": 3.9,
        "no_fitness_termination": False,
        "seed": None,
    }
    assert spec == GenomeSpec(
        num_inputs=2,
        num_outputs=1,
        max_nodes=50,
        max_conns=100,
        feed_forward=True,
        node_gene=NodeGene(
            bias=FloatAttribute("bias", 0.0, 1.0, "gaussian", 0.5, 0.7, 0.1, -30.0, 30.0),
            response=FloatAttribute("response", 1.0, 0.0, "gaussian", 0.0, 0.0, 0.0, -30.0, 30.0),
            activation=ChoiceAttribute("activation", ("sigmoid",), "sigmoid", 0.0),
            aggregation=ChoiceAttribute("aggregation", ("sum",), "sum", 0.0),
        ),
        conn_gene=ConnectionGene(
            weight=FloatAttribute("weight", 0.0, 1.0, "gaussian", 0.5, 0.8, 0.1, -30.0, 30.0),
            enabled_mutate_rate=0.01,
        ),
        initial_connection="full",
        connection_fraction=1.0,
    )
    assert spec.node_gene.float_names == ("bias", "response")  # no time_constant keys: none
    assert config == NEATConfig(
        mutation=MutationConfig(
            conn_add_prob=0.5,
            conn_delete_prob=0.5,
            node_add_prob=0.2,
            node_delete_prob=0.2,
            single_structural_mutation=False,
            structural_mutation_surer="default",
        ),
        crossover=CrossoverConfig(),
        distance=DistanceConfig(
            mode="neat-python",
            compatibility_disjoint_coefficient=1.0,
            compatibility_weight_coefficient=0.5,
            compatibility_excess_coefficient=None,
            compatibility_include_node_genes=True,
            compatibility_enable_penalty=1.0,
        ),
        species=SpeciesConfig(
            compatibility_threshold=3.0,
            target_num_species=None,
            threshold_adjust_rate=0.1,
            threshold_min=0.1,
            threshold_max=100.0,
            max_species=32,
            species_fitness_func="max",
            max_stagnation=20,
            species_elitism=2,
        ),
        reproduction=ReproductionConfig(
            elitism=2,
            survival_threshold=0.2,
            min_species_size=2,
            fitness_sharing="normalized",
            spawn_method="smoothed",
            interspecies_crossover_prob=0.0,
            reset_on_extinction=False,
        ),
        outputs=OutputMode(),
        functions="neat-python",
        policy="auto",
        mode="neat-python",
    )
    # the XOR example's settings are the library's "neat-python" mode (the same defaults)
    assert config.mutation == MutationConfig() and spec.node_gene == NodeGene()
    assert spec.conn_gene == ConnectionGene()


def test_xor_example_round_trip(tmp_path):
    path = tmp_path / "config-feedforward"
    path.write_text(XOR_CONFIG)
    first = read_ini(path)
    text = to_ini(*first[:3], **first[3])
    again = parse_ini(text)
    assert again == first
    assert to_ini(*again[:3], **again[3]) == text  # a fixed point
    out = tmp_path / "written.ini"
    to_ini(*first[:3], **first[3], path=out)
    assert out.read_text() == text


def test_neat_from_ini_builds_the_strategy(tmp_path):
    path = tmp_path / "config"
    path.write_text(XOR_CONFIG)
    strategy, extras = neat_from_ini(path, max_nodes=20, max_conns=40, max_species=8)
    assert isinstance(strategy, NEAT)
    assert strategy.population_size == 150 and extras["fitness_threshold"] == 3.9
    assert (strategy.spec.max_nodes, strategy.spec.max_conns) == (20, 40)
    assert strategy.config.species.max_species == 8
    assert type(strategy.decoder.apply).__name__ == "FeedForwardPolicy"


def test_reader_options():
    spec, config, _, _ = parse_ini(XOR_CONFIG, max_nodes=9, max_conns=7, max_species=5, policy="recurrent")
    assert (spec.max_nodes, spec.max_conns, config.species.max_species, config.policy) == (
        9,
        7,
        5,
        "recurrent",
    )
    # default species slots: at most pop // max(min_species_size, elitism)
    small = with_key(XOR_CONFIG, "NEAT", "pop_size", "10")
    assert parse_ini(small)[1].species.max_species == 5
    big_io = with_key(
        with_key(XOR_CONFIG, "DefaultGenome", "num_inputs", "40"), "DefaultGenome", "num_outputs", "3"
    )
    spec = parse_ini(big_io)[0]
    assert spec.max_nodes == 59 and spec.max_conns == 240
    with pytest.raises(ArgumentError, match="max_conns"):
        parse_ini(big_io, max_conns=100)  # full connectivity needs 120 rows
    with pytest.raises(ArgumentError, match="max_nodes"):
        parse_ini(XOR_CONFIG, max_nodes=2)
    with pytest.raises(ArgumentError, match="initial_self_loops"):
        parse_ini(XOR_CONFIG, initial_self_loops="keep")
    with pytest.raises(ArgumentError, match="functions"):
        parse_ini(XOR_CONFIG, functions="pytorch")
    # option names resolve in the chosen scheme
    scaled = with_key(XOR_CONFIG, _G, "activation_options", "scaled_sigmoid tanh")
    scaled = with_key(scaled, _G, "activation_default", "scaled_sigmoid")
    spec, config, _, _ = parse_ini(scaled, functions="tensorneat")
    assert config.functions == "tensorneat" and spec.node_gene.activation.options == (
        "scaled_sigmoid",
        "tanh",
    )
    with pytest.raises(ArgumentError, match=r"\[DefaultGenome\] activation_options.*'scaled_sigmoid'"):
        parse_ini(scaled)


# ---------------------------------------------------------------------------------------------
# every key lands in its field

_G = "DefaultGenome"


def _attr(spec, owner, name):
    gene = spec.node_gene if owner == "node" else spec.conn_gene
    return gene.floats[gene.float_names.index(name)]


def _float_cases(name, owner):
    a = lambda s: _attr(s, owner, name)  # noqa: E731
    return [
        ((_G, f"{name}_init_mean"), "0.25", lambda s, c, p, e: a(s).init_mean, 0.25),
        ((_G, f"{name}_init_stdev"), "0.75", lambda s, c, p, e: a(s).init_std, 0.75),
        ((_G, f"{name}_init_type"), "uniform", lambda s, c, p, e: a(s).init_type, "uniform"),
        ((_G, f"{name}_replace_rate"), "0.05", lambda s, c, p, e: a(s).replace_rate, 0.05),
        ((_G, f"{name}_mutate_rate"), "0.35", lambda s, c, p, e: a(s).mutate_rate, 0.35),
        ((_G, f"{name}_mutate_power"), "0.125", lambda s, c, p, e: a(s).mutate_power, 0.125),
        ((_G, f"{name}_max_value"), "12.5", lambda s, c, p, e: a(s).max_value, 12.5),
        ((_G, f"{name}_min_value"), "-7", lambda s, c, p, e: a(s).min_value, -7.0),
    ]


def _choice_cases(name):
    options = ("sigmoid", "tanh", "relu") if name == "activation" else ("sum", "product", "max")
    a = lambda s: getattr(s.node_gene, name)  # noqa: E731
    return [
        ((_G, f"{name}_options"), " ".join(options), lambda s, c, p, e: a(s).options, options),
        ((_G, f"{name}_default"), "none", lambda s, c, p, e: a(s).default, "random"),
        ((_G, f"{name}_mutate_rate"), "0.15", lambda s, c, p, e: a(s).mutate_rate, 0.15),
    ]


MAPPING = [
    (("NEAT", "pop_size"), "64", lambda s, c, p, e: p, 64),
    (("NEAT", "fitness_criterion"), "mean", lambda s, c, p, e: e["fitness_criterion"], "mean"),
    (("NEAT", "fitness_threshold"), "inf", lambda s, c, p, e: e["fitness_threshold"], math.inf),
    (("NEAT", "reset_on_extinction"), "True", lambda s, c, p, e: c.reproduction.reset_on_extinction, True),
    (("NEAT", "no_fitness_termination"), "yes", lambda s, c, p, e: e["no_fitness_termination"], True),
    (("NEAT", "seed"), "42", lambda s, c, p, e: e["seed"], 42),
    ((_G, "num_inputs"), "5", lambda s, c, p, e: s.num_inputs, 5),
    ((_G, "num_outputs"), "3", lambda s, c, p, e: s.num_outputs, 3),
    ((_G, "num_hidden"), "0", lambda s, c, p, e: s.num_io, 3),
    ((_G, "num_hidden"), "4", lambda s, c, p, e: (s.hidden_layers, s.initial_direct), ((4,), True)),
    ((_G, "feed_forward"), "False", lambda s, c, p, e: s.feed_forward, False),
    (
        (_G, "compatibility_disjoint_coefficient"),
        "1.5",
        lambda s, c, p, e: c.distance.disjoint_coefficient,
        1.5,
    ),
    (
        (_G, "compatibility_weight_coefficient"),
        "0.25",
        lambda s, c, p, e: c.distance.weight_coefficient,
        0.25,
    ),
    ((_G, "conn_add_prob"), "0.3", lambda s, c, p, e: c.mutation.conn_add_prob, 0.3),
    ((_G, "conn_delete_prob"), "0.1", lambda s, c, p, e: c.mutation.conn_delete_prob, 0.1),
    ((_G, "node_add_prob"), "0.05", lambda s, c, p, e: c.mutation.node_add_prob, 0.05),
    ((_G, "node_delete_prob"), "0.01", lambda s, c, p, e: c.mutation.node_delete_prob, 0.01),
    (
        (_G, "single_structural_mutation"),
        "true",
        lambda s, c, p, e: c.mutation.single_structural_mutation,
        True,
    ),
    ((_G, "structural_mutation_surer"), "on", lambda s, c, p, e: c.mutation.structural_mutation_surer, True),
    (
        (_G, "initial_connection"),
        "partial_nodirect 0.25",
        lambda s, c, p, e: (s.initial_connection, s.connection_fraction),
        ("partial", 0.25),
    ),
    (
        (_G, "compatibility_excess_coefficient"),
        "2.5",
        lambda s, c, p, e: c.distance.excess_coefficient,
        2.5,
    ),
    (
        (_G, "compatibility_include_node_genes"),
        "False",
        lambda s, c, p, e: c.distance.compatibility_include_node_genes,
        False,
    ),
    (
        (_G, "compatibility_enable_penalty"),
        "0.5",
        lambda s, c, p, e: c.distance.compatibility_enable_penalty,
        0.5,
    ),
    *_float_cases("bias", "node"),
    *_float_cases("response", "node"),
    *_choice_cases("activation"),
    *_choice_cases("aggregation"),
    *[
        (key, value, lambda s, c, p, e, get=get: get(s, c, p, e), want)
        for key, value, get, want in _float_cases("time_constant", "node")
        if key[1] != "time_constant_min_value"
    ],
    (
        (_G, "time_constant_min_value"),
        "0.5",
        lambda s, c, p, e: _attr(s, "node", "time_constant").min_value,
        0.5,
    ),
    *_float_cases("weight", "conn"),
    ((_G, "enabled_default"), "yes", lambda s, c, p, e: s.conn_gene.enabled_mutate_rate, 0.01),
    ((_G, "enabled_mutate_rate"), "0.2", lambda s, c, p, e: s.conn_gene.enabled_mutate_rate, 0.2),
    ((_G, "enabled_rate_to_true_add"), "0", lambda s, c, p, e: s.conn_gene.enabled_mutate_rate, 0.01),
    ((_G, "enabled_rate_to_false_add"), "0.0", lambda s, c, p, e: s.conn_gene.enabled_mutate_rate, 0.01),
    (
        ("DefaultSpeciesSet", "compatibility_threshold"),
        "2.25",
        lambda s, c, p, e: c.species.compatibility_threshold,
        2.25,
    ),
    (("DefaultSpeciesSet", "target_num_species"), "7", lambda s, c, p, e: c.species.target_num_species, 7),
    (
        ("DefaultSpeciesSet", "threshold_adjust_rate"),
        "0.3",
        lambda s, c, p, e: c.species.threshold_adjust_rate,
        0.3,
    ),
    (("DefaultSpeciesSet", "threshold_min"), "0.5", lambda s, c, p, e: c.species.threshold_min, 0.5),
    (("DefaultSpeciesSet", "threshold_max"), "9", lambda s, c, p, e: c.species.threshold_max, 9.0),
    (
        ("DefaultStagnation", "species_fitness_func"),
        "median",
        lambda s, c, p, e: c.species.species_fitness_func,
        "median",
    ),
    (("DefaultStagnation", "max_stagnation"), "11", lambda s, c, p, e: c.species.max_stagnation, 11),
    (("DefaultStagnation", "species_elitism"), "1", lambda s, c, p, e: c.species.species_elitism, 1),
    (("DefaultReproduction", "elitism"), "1", lambda s, c, p, e: c.reproduction.elitism, 1),
    (
        ("DefaultReproduction", "survival_threshold"),
        "0.4",
        lambda s, c, p, e: c.reproduction.survival_threshold,
        0.4,
    ),
    (("DefaultReproduction", "min_species_size"), "3", lambda s, c, p, e: c.reproduction.min_species_size, 3),
    (
        ("DefaultReproduction", "fitness_sharing"),
        "canonical",
        lambda s, c, p, e: c.reproduction.fitness_sharing,
        "canonical",
    ),
    (
        ("DefaultReproduction", "spawn_method"),
        "proportional",
        lambda s, c, p, e: c.reproduction.spawn_method,
        "proportional",
    ),
    (
        ("DefaultReproduction", "interspecies_crossover_prob"),
        "0.01",
        lambda s, c, p, e: c.reproduction.interspecies_crossover_prob,
        0.01,
    ),
]


def test_mapping_covers_every_neat_python_key():
    covered = {key for key, *_ in MAPPING}
    listed = {(section, key) for section, keys in NEAT_PYTHON_KEYS.items() for key in keys}
    assert covered == listed
    assert tuple(NEAT_PYTHON_KEYS) == SECTIONS


@pytest.mark.parametrize(
    ("where", "value", "get", "want"), MAPPING, ids=[f"{s}.{k}" for (s, k), *_ in MAPPING]
)
def test_every_key_is_mapped(where, value, get, want):
    section, key = where
    text = with_key(XOR_CONFIG, section, key, value)
    if key.startswith("activation_options"):
        text = with_key(text, section, "activation_default", "tanh")
    if key.startswith("aggregation_options"):
        text = with_key(text, section, "aggregation_default", "max")
    if key == "feed_forward":
        text = with_key(text, section, "initial_connection", "unconnected")
    got = get(*parse_ini(text))
    assert got == want, (where, got, want)
    # and the untouched file does not already give that value
    try:
        before = get(*parse_ini(XOR_CONFIG))
    except ValueError:  # time_constant: the XOR example's node gene has none
        before = None
    assert before != want or key in _SAME_AS_XOR


# keys whose test value equals the XOR example's (the mapping is then shown by the value surviving
# and, for the enabled_* keys, by the error tests below)
_SAME_AS_XOR = {"num_hidden", "enabled_default", "enabled_rate_to_true_add", "enabled_rate_to_false_add"}


def test_time_constant_keys_give_a_ctrnn_node_gene():
    text = with_key(XOR_CONFIG, _G, "time_constant_init_mean", "2.0")
    text = with_key(text, _G, "feed_forward", "False")
    text = with_key(text, _G, "initial_connection", "unconnected")
    spec, config, _, _ = parse_ini(text)
    assert spec.node_gene.float_names == ("bias", "response", "time_constant")
    # the other items at neat-python's DefaultNodeGene defaults
    assert _attr(spec, "node", "time_constant") == FloatAttribute(
        "time_constant", 2.0, 0.0, "gaussian", 0.0, 0.0, 0.0, 0.01, 10.0
    )
    strategy = NEAT(spec, 150, config)
    assert type(strategy.decoder.apply).__name__ == "CTRNNPolicy"
    # a feedforward file with time_constant keys (neat-python's Config.save writes them) still
    # runs feedforward
    ff_spec, ff_config, _, _ = parse_ini(with_key(XOR_CONFIG, _G, "time_constant_init_mean", "1.0"))
    assert "time_constant" in ff_spec.node_gene.float_names and ff_config.policy == "feedforward"
    assert type(NEAT(ff_spec, 150, ff_config).decoder.apply).__name__ == "FeedForwardPolicy"


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("full", ("full", 1.0)),
        ("full_nodirect", ("full", 1.0)),
        ("full_direct", ("full", 1.0)),
        ("unconnected", ("none", 1.0)),
        ("partial 0.5", ("partial", 0.5)),
        ("partial_direct 0", ("partial", 0.0)),
        ("partial_nodirect 1.0", ("partial", 1.0)),
    ],
)
def test_initial_connection_modes(value, want):
    spec = parse_ini(with_key(XOR_CONFIG, _G, "initial_connection", value))[0]
    assert (spec.initial_connection, spec.connection_fraction) == want


def test_recurrent_full_connectivity_needs_a_choice_about_self_loops():
    text = with_key(XOR_CONFIG, _G, "feed_forward", "False")
    with pytest.raises(ArgumentError, match=r"\[DefaultGenome\] initial_connection = 'full_direct'.*self"):
        parse_ini(text)
    spec = parse_ini(text, initial_self_loops="omit")[0]
    assert not spec.feed_forward and spec.initial_connection == "full"
    assert parse_ini(with_key(text, _G, "initial_connection", "unconnected"))[0].initial_connection == "none"


# ---------------------------------------------------------------------------------------------
# errors name the key


@pytest.mark.parametrize(
    ("section", "key", "value", "match"),
    [
        (_G, "bias_init_meen", "0.0", r"\[DefaultGenome\] bias_init_meen: unknown key"),
        ("NEAT", "population", "10", r"\[NEAT\] population: unknown key"),
        ("DefaultStagnation", "max_stagnatoin", "3", r"\[DefaultStagnation\] max_stagnatoin: unknown key"),
        (_G, "conn_add_prob", "often", r"\[DefaultGenome\] conn_add_prob = 'often': must be a number"),
        (_G, "conn_add_prob", "1.5", r"\[DefaultGenome\] conn_add_prob = '1.5': must be in \[0, 1\]"),
        (_G, "bias_mutate_power", "-1", r"\[DefaultGenome\] bias_mutate_power"),
        (_G, "weight_init_mean", "nan", r"\[DefaultGenome\] weight_init_mean = 'nan': must be finite"),
        (_G, "num_inputs", "2.0", r"\[DefaultGenome\] num_inputs = '2.0': must be an integer"),
        (_G, "num_inputs", "0", r"\[DefaultGenome\] num_inputs = '0': must be >= 1"),
        (_G, "feed_forward", "maybe", r"\[DefaultGenome\] feed_forward = 'maybe': must be True or False"),
        (_G, "num_hidden", "-1", r"\[DefaultGenome\] num_hidden = '-1': must be >= 0"),
        (_G, "initial_connection", "fs_neat_nohidden", r"\[DefaultGenome\] initial_connection = 'fs_neat"),
        (_G, "initial_connection", "fs_neat", r"initial_connection = 'fs_neat'.*not supported"),
        (_G, "initial_connection", "partial", r"initial_connection = 'partial': .*needs a fraction"),
        (_G, "initial_connection", "partial_direct 1.5", r"initial_connection.*\[0, 1\]"),
        (_G, "initial_connection", "mesh", r"\[DefaultGenome\] initial_connection = 'mesh'"),
        (_G, "enabled_default", "random", r"\[DefaultGenome\] enabled_default = 'random': only True"),
        (_G, "enabled_rate_to_true_add", "0.1", r"\[DefaultGenome\] enabled_rate_to_true_add = '0.1'"),
        (_G, "enabled_rate_to_false_add", "0.2", r"\[DefaultGenome\] enabled_rate_to_false_add = '0.2'"),
        (_G, "activation_options", "sigmoid swish", r"\[DefaultGenome\] activation_options.*'swish'"),
        (_G, "aggregation_options", "sum norm", r"\[DefaultGenome\] aggregation_options.*'norm'"),
        (_G, "activation_default", "tanh", r"\[DefaultGenome\] activation_default = 'tanh'"),
        (_G, "bias_init_type", "cauchy", r"\[DefaultGenome\] bias_init_type = 'cauchy'"),
        (_G, "weight_min_value", "40", r"\[DefaultGenome\] weight_min_value = '40': must be <="),
        (_G, "structural_mutation_surer", "sometimes", r"\[DefaultGenome\] structural_mutation_surer"),
        (
            _G,
            "compatibility_excess_coefficient",
            "big",
            r"\[DefaultGenome\] compatibility_excess_coefficient",
        ),
        ("NEAT", "fitness_criterion", "median", r"\[NEAT\] fitness_criterion = 'median'"),
        ("NEAT", "pop_size", "1", r"\[NEAT\] pop_size = '1': must be >= 2"),
        ("DefaultSpeciesSet", "target_num_species", "many", r"\[DefaultSpeciesSet\] target_num_species"),
        (
            "DefaultSpeciesSet",
            "compatibility_threshold",
            "0",
            r"\[DefaultSpeciesSet\] compatibility_threshold",
        ),
        ("DefaultSpeciesSet", "threshold_max", "0.05", r"\[DefaultSpeciesSet\] threshold_max"),
        (
            "DefaultStagnation",
            "species_fitness_func",
            "median2",
            r"species_fitness_func = 'median2'.*median2",
        ),
        (
            "DefaultReproduction",
            "fitness_sharing",
            "rank",
            r"\[DefaultReproduction\] fitness_sharing = 'rank'",
        ),
        ("DefaultReproduction", "spawn_method", "even", r"\[DefaultReproduction\] spawn_method"),
        ("DefaultReproduction", "elitism", "-1", r"\[DefaultReproduction\] elitism = '-1'"),
    ],
)
def test_bad_values_name_the_key(section, key, value, match):
    with pytest.raises(ArgumentError, match=match):
        parse_ini(with_key(XOR_CONFIG, section, key, value))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("NEAT", "pop_size"),
        ("NEAT", "reset_on_extinction"),
        (_G, "num_hidden"),
        (_G, "conn_add_prob"),
        (_G, "bias_init_mean"),
        (_G, "activation_options"),
        (_G, "enabled_default"),
        ("DefaultSpeciesSet", "compatibility_threshold"),
    ],
)
def test_missing_required_key_is_named(section, key):
    with pytest.raises(ArgumentError, match=rf"\[{section}\] {key}: missing"):
        parse_ini(with_key(XOR_CONFIG, section, key, None))


def test_optional_keys_take_neat_python_defaults():
    text = XOR_CONFIG
    for key in ("elitism", "survival_threshold", "min_species_size"):
        text = with_key(text, "DefaultReproduction", key, None)
    for key in ("species_fitness_func", "max_stagnation", "species_elitism"):
        text = with_key(text, "DefaultStagnation", key, None)
    for key in (
        "single_structural_mutation",
        "bias_init_type",
        "activation_default",
        "enabled_rate_to_true_add",
    ):
        text = with_key(text, _G, key, None)
    spec, config, _, _ = parse_ini(text)
    assert (config.reproduction.elitism, config.reproduction.survival_threshold) == (0, 0.2)
    assert config.reproduction.min_species_size == 1
    assert (config.species.species_fitness_func, config.species.max_stagnation) == ("mean", 15)
    assert config.species.species_elitism == 0
    assert config.mutation.single_structural_mutation is False
    assert spec.node_gene.floats[0].init_type == "gaussian"
    assert spec.node_gene.activation.default == "random"


def test_sections_and_files():
    no_stagnation = XOR_CONFIG.split("[DefaultStagnation]")[0] + (
        "[DefaultReproduction]" + XOR_CONFIG.split("[DefaultReproduction]")[1]
    )
    with pytest.raises(ArgumentError, match=r"\[DefaultStagnation\]: section missing"):
        parse_ini(no_stagnation)
    with pytest.raises(ArgumentError, match=r"\[MyGenome\]: unknown section"):
        parse_ini(XOR_CONFIG + "\n[MyGenome]\nx = 1\n")
    with pytest.raises(ArgumentError, match="not a valid INI file"):
        parse_ini("pop_size = 3\n")
    with pytest.raises(ArgumentError, match="path: cannot read"):
        read_ini("/nonexistent/config-feedforward")
    with pytest.raises(ArgumentError, match="text must be a str"):
        parse_ini(b"[NEAT]")
    # ConfigParser's [DEFAULT] values reach every section, so a stray key there is refused too
    with pytest.raises(ArgumentError, match=r"\[NEAT\] verbose: unknown key"):
        parse_ini("[DEFAULT]\nverbose = 1\n" + XOR_CONFIG)


# ---------------------------------------------------------------------------------------------
# writing


def test_to_ini_refuses_what_neat_python_cannot_express():
    spec, config, pop, _ = parse_ini(XOR_CONFIG)
    cases = [
        (spec, config.replace(functions="tensorneat"), "config.functions"),
        (spec, config.replace(outputs=OutputMode.tensorneat()), "config.outputs"),
        (spec, config.replace(mutation={"split": "delete"}), "config.mutation.split"),
        (spec, config.replace(crossover=CrossoverConfig(mode="paper")), "config.crossover"),
        (spec, config.replace(distance=DistanceConfig(mode="paper")), "config.distance.mode"),
        (spec, config.replace(reproduction={"fitness_sharing": "rank"}), "fitness_sharing"),
        (spec, config.replace(reproduction={"mutate_only_prob": 0.25}), "mutate_only_prob"),
        (
            dataclasses.replace(spec, node_gene=NodeGene(extra=(FloatAttribute("gate"),))),
            config,
            "spec.node_gene.floats",
        ),
    ]
    for s, c, match in cases:
        with pytest.raises(ArgumentError, match=match):
            to_ini(s, c, pop)
    with pytest.raises(ArgumentError, match="population_size"):
        to_ini(spec, config, 1)


_unit = st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 0.7, 1.0])
_real = st.floats(-5.0, 5.0, allow_nan=False).map(lambda v: round(v, 3))


@st.composite
def float_attributes(draw, name):
    low = draw(st.floats(-30.0, 0.0).map(lambda v: round(v, 2)))
    high = draw(st.floats(0.0, 30.0).map(lambda v: round(v, 2)))
    return FloatAttribute(
        name,
        init_mean=draw(_real),
        init_std=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        init_type=draw(st.sampled_from(["gaussian", "uniform"])),
        mutate_power=draw(st.sampled_from([0.0, 0.15, 0.5])),
        mutate_rate=draw(_unit),
        replace_rate=draw(_unit),
        min_value=low,
        max_value=high,
    )


@st.composite
def ini_settings(draw):
    """A random (spec, config, pop, extras) that neat-python can express."""
    feed_forward = draw(st.booleans())
    ctrnn = draw(st.booleans())
    acts = tuple(
        draw(
            st.lists(
                st.sampled_from(["sigmoid", "tanh", "relu", "gauss", "identity"]), min_size=1, unique=True
            )
        )
    )
    aggs = tuple(draw(st.lists(st.sampled_from(["sum", "product", "max", "mean"]), min_size=1, unique=True)))
    tc = None
    if ctrnn:
        tc = dataclasses.replace(draw(float_attributes("time_constant")), min_value=0.01, max_value=10.0)
    node = NodeGene(
        bias=draw(float_attributes("bias")),
        response=draw(float_attributes("response")),
        activation=ChoiceAttribute("activation", acts, draw(st.sampled_from(["random", *acts])), draw(_unit)),
        aggregation=ChoiceAttribute(
            "aggregation", aggs, draw(st.sampled_from(["random", *aggs])), draw(_unit)
        ),
        time_constant=tc,
    )
    conn = ConnectionGene(weight=draw(float_attributes("weight")), enabled_mutate_rate=draw(_unit))
    n_in, n_out = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    initial = draw(st.sampled_from(["full", "partial", "none"]))
    spec = GenomeSpec(
        n_in,
        n_out,
        max_nodes=50,
        max_conns=100,
        feed_forward=feed_forward,
        node_gene=node,
        conn_gene=conn,
        initial_connection=initial,
        connection_fraction=draw(_unit) if initial == "partial" else 1.0,
    )
    pop = draw(st.integers(8, 300))
    rep = ReproductionConfig(
        elitism=draw(st.integers(0, 3)),
        survival_threshold=draw(st.sampled_from([0.1, 0.2, 0.5])),
        min_species_size=draw(st.integers(1, 3)),
        fitness_sharing=draw(st.sampled_from(["normalized", "canonical"])),
        spawn_method=draw(st.sampled_from(["smoothed", "proportional"])),
        interspecies_crossover_prob=draw(_unit),
        reset_on_extinction=draw(st.booleans()),
    )
    species = SpeciesConfig(
        compatibility_threshold=draw(st.sampled_from([0.5, 2.0, 3.0, 4.5])),
        target_num_species=draw(st.none() | st.integers(1, 20)),
        threshold_adjust_rate=draw(st.sampled_from([0.0, 0.1, 0.3])),
        threshold_min=draw(st.sampled_from([0.1, 0.5])),
        threshold_max=draw(st.sampled_from([10.0, 100.0])),
        max_species=max(1, min(32, pop // rep.min_size)),
        species_fitness_func=draw(st.sampled_from(["max", "min", "mean", "median"])),
        max_stagnation=draw(st.integers(1, 30)),
        species_elitism=draw(st.integers(0, 3)),
    )
    config = NEATConfig(
        mutation=MutationConfig(
            conn_add_prob=draw(_unit),
            conn_delete_prob=draw(_unit),
            node_add_prob=draw(_unit),
            node_delete_prob=draw(_unit),
            single_structural_mutation=draw(st.booleans()),
            structural_mutation_surer=draw(st.sampled_from(["default", True, False])),
        ),
        distance=DistanceConfig(
            compatibility_disjoint_coefficient=draw(st.sampled_from([0.5, 1.0, 2.0])),
            compatibility_weight_coefficient=draw(st.sampled_from([0.4, 0.5, 1.0])),
            compatibility_excess_coefficient=draw(st.sampled_from([None, 0.0, 1.5])),
            compatibility_include_node_genes=draw(st.booleans()),
            compatibility_enable_penalty=draw(st.sampled_from([0.0, 1.0, 2.5])),
        ),
        species=species,
        reproduction=rep,
    )
    extras = {
        "fitness_criterion": draw(st.sampled_from(["max", "min", "mean"])),
        "fitness_threshold": draw(st.sampled_from([3.9, -1.0, 1e6, math.inf])),
        "no_fitness_termination": draw(st.booleans()),
        "seed": draw(st.none() | st.integers(0, 2**31 - 1)),
    }
    return spec, config, pop, extras


@settings(max_examples=60)
@given(ini_settings())
def test_write_then_read_is_the_identity(settings_):
    spec, config, pop, extras = settings_
    text = to_ini(spec, config, pop, **extras)
    got = parse_ini(text, initial_self_loops="omit")
    # the written distance coefficients are resolved numbers; compare the resolved values
    assert got[0] == spec
    assert got[2] == pop and got[3] == extras
    ff_with_tau = spec.feed_forward and "time_constant" in spec.node_gene.float_names
    want = config.replace(
        policy="feedforward" if ff_with_tau else config.policy,
        distance=dataclasses.replace(
            config.distance,
            compatibility_disjoint_coefficient=config.distance.disjoint_coefficient,
            compatibility_weight_coefficient=config.distance.weight_coefficient,
        ),
    )
    assert got[1] == want
