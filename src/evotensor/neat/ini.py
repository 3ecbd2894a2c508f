"""Read (and write) neat-python 2.1 INI configuration files.

:func:`read_ini` turns a neat-python configuration file (sections ``[NEAT]``, ``[DefaultGenome]``,
``[DefaultSpeciesSet]``, ``[DefaultStagnation]``, ``[DefaultReproduction]``) into
``(GenomeSpec, NEATConfig, population_size, extras)``; :func:`neat_from_ini` goes on to a
:class:`~evotensor.neat.NEAT` strategy. :func:`to_ini` writes the file back for the settings that
neat-python can express, so a configuration survives ``read_ini(to_ini(...))`` unchanged.

Parsing follows neat-python 2.1 (``neat/config.py`` and the ``parse_config`` of its genome, gene
attribute, species set, stagnation and reproduction classes): Python's ``ConfigParser`` with its
defaults (full-line ``#``/``;`` comments only, key names case-insensitive), the same key names, the
same required keys (a required key that is missing is an error naming it) and the same defaults for
optional ones. On top of neat-python it refuses every key or section it does not know, so a typo
fails loudly instead of silently keeping a default. Every error is an
:class:`~evotensor.core.checks.ArgumentError` naming ``[section] key`` and the value.

The mapping (neat-python key -> evotensor field):

* ``[NEAT]``: ``pop_size`` -> ``population_size``; ``reset_on_extinction`` ->
  ``ReproductionConfig.reset_on_extinction`` (without it the strategy reports
  ``metrics["extinct"]`` where neat-python raises ``CompleteExtinctionException``);
  ``fitness_criterion`` (``max``/``min``/``mean``), ``fitness_threshold``,
  ``no_fitness_termination`` and ``seed`` go to ``extras`` (the run loop's business: stopping and
  seeding). With ``fitness_criterion = min`` neat-python minimizes; in evotensor the orientation
  is the problem's ``maximize``.
* ``[DefaultGenome]``: ``num_inputs``, ``num_outputs``, ``feed_forward`` -> :class:`GenomeSpec`;
  ``num_hidden = n`` -> ``hidden_layers=(n,)``; ``initial_connection``: ``full``/``full_nodirect``
  -> ``"full"``, ``full_direct`` -> ``"full"`` with ``initial_direct=True`` (the same without hidden
  nodes), ``partial[_direct|_nodirect] p`` -> ``"partial"`` with ``connection_fraction=p`` (and
  ``initial_direct`` for ``_direct``), ``unconnected`` -> ``"none"``; the ``fs_neat*`` modes are not
  expressible by :class:`GenomeSpec` and raise. neat-python gives a
  *recurrent* genome with full or partial initial connectivity a self-connection on every node as
  well, which :class:`GenomeSpec` cannot express either: that raises unless
  ``initial_self_loops="omit"``.
  ``bias_*``, ``response_*`` -> :class:`FloatAttribute` of :class:`NodeGene` (``*_init_stdev`` is
  ``init_std``; an ``init_type`` containing ``gauss``/``normal`` is ``"gaussian"``, one containing
  ``uniform`` is ``"uniform"``, as neat-python tests it); ``time_constant_*`` (any of them
  present) -> ``NodeGene(time_constant=...)``, missing ones at neat-python's defaults (mean 1,
  stdev 0, bounds [0.01, 10], no mutation); when none is present the node gene has no
  ``time_constant`` (neat-python's is then constant 1 and adds nothing to any distance);
  ``activation_*``, ``aggregation_*`` -> :class:`ChoiceAttribute` (default ``none`` = ``random``);
  ``weight_*`` -> the connection gene's weight; ``enabled_mutate_rate`` ->
  ``ConnectionGene.enabled_mutate_rate``; ``enabled_default`` must be true (connections start
  enabled here) and ``enabled_rate_to_true_add`` / ``enabled_rate_to_false_add`` must be 0
  (state-dependent flip rates are not implemented). ``conn_add_prob``, ``conn_delete_prob``,
  ``node_add_prob``, ``node_delete_prob``, ``single_structural_mutation``,
  ``structural_mutation_surer`` -> :class:`MutationConfig` (its other fields keep neat-python's
  semantics, the defaults); ``compatibility_disjoint_coefficient``,
  ``compatibility_weight_coefficient``, ``compatibility_excess_coefficient`` (``auto`` or a
  number), ``compatibility_include_node_genes``, ``compatibility_enable_penalty`` ->
  :class:`DistanceConfig` (mode ``"neat-python"``).
* ``[DefaultSpeciesSet]`` and ``[DefaultStagnation]`` -> :class:`SpeciesConfig`
  (``target_num_species = none`` -> ``None``; ``species_fitness_func`` ``max``, ``min``,
  ``mean`` or ``median``; neat-python's ``median2`` is not implemented).
* ``[DefaultReproduction]`` -> :class:`ReproductionConfig` (``fitness_sharing``
  ``normalized``/``canonical``, ``spawn_method`` ``smoothed``/``proportional``).

Settings neat-python does not have are keyword arguments of the readers: ``max_nodes``,
``max_conns`` (the fixed genome capacity), ``max_species`` (species slots), ``policy``,
``functions`` (see :func:`read_ini`). Everything else takes neat-python 2.1's semantics (crossover,
network outputs, activation names).

Example::

    strategy, extras = neat_from_ini("config-feedforward")
    result = evotensor.run(strategy, XOR(), generations=300, key=jax.random.key(extras["seed"] or 0))
"""

from __future__ import annotations

import configparser
import dataclasses
import io
import math
from pathlib import Path
from typing import Any

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.neat.activations import function_set
from evotensor.neat.config import NEATConfig
from evotensor.neat.crossover import CrossoverConfig
from evotensor.neat.distance import DistanceConfig
from evotensor.neat.genes import ChoiceAttribute, ConnectionGene, FloatAttribute, NodeGene
from evotensor.neat.genome import GenomeSpec
from evotensor.neat.mutation import MutationConfig
from evotensor.neat.network import OutputMode
from evotensor.neat.reproduction import ReproductionConfig
from evotensor.neat.species import SpeciesConfig
from evotensor.neat.strategy import NEAT

__all__ = ["SECTIONS", "neat_from_ini", "parse_ini", "read_ini", "to_ini"]

SECTIONS = ("NEAT", "DefaultGenome", "DefaultSpeciesSet", "DefaultStagnation", "DefaultReproduction")
"""The sections of a neat-python 2.1 configuration file, in file order."""

_REQUIRED = object()

_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")

# neat-python 2.1's FloatAttribute items; ``None`` marks a required item
_FLOAT_ITEMS = ("init_mean", "init_stdev", "init_type", "replace_rate", "mutate_rate", "mutate_power")
_FLOAT_BOUNDS = ("max_value", "min_value")
_TIME_CONSTANT_DEFAULTS = {
    "init_mean": 1.0,
    "init_stdev": 0.0,
    "init_type": "gaussian",
    "replace_rate": 0.0,
    "mutate_rate": 0.0,
    "mutate_power": 0.0,
    "max_value": 10.0,
    "min_value": 0.01,
}


def _float_attribute_keys(name: str, defaults: dict[str, Any] | None = None) -> dict[str, tuple[str, Any]]:
    defaults = defaults or {}
    out = {}
    for item in (*_FLOAT_ITEMS, *_FLOAT_BOUNDS):
        kind = "str" if item == "init_type" else "float"
        default = defaults.get(item, "gaussian" if item == "init_type" else _REQUIRED)
        out[f"{name}_{item}"] = (kind, default)
    return out


def _choice_keys(name: str) -> dict[str, tuple[str, Any]]:
    return {
        f"{name}_default": ("str", "random"),
        f"{name}_options": ("list", _REQUIRED),
        f"{name}_mutate_rate": ("float", _REQUIRED),
    }


# (type, default) of every key neat-python 2.1 reads, per section
_KEYS: dict[str, dict[str, tuple[str, Any]]] = {
    "NEAT": {
        "pop_size": ("int", _REQUIRED),
        "fitness_criterion": ("str", _REQUIRED),
        "fitness_threshold": ("float", _REQUIRED),
        "reset_on_extinction": ("bool", _REQUIRED),
        "no_fitness_termination": ("bool", False),
        "seed": ("int", None),
    },
    "DefaultGenome": {
        "num_inputs": ("int", _REQUIRED),
        "num_outputs": ("int", _REQUIRED),
        "num_hidden": ("int", _REQUIRED),
        "feed_forward": ("bool", _REQUIRED),
        "compatibility_disjoint_coefficient": ("float", _REQUIRED),
        "compatibility_weight_coefficient": ("float", _REQUIRED),
        "conn_add_prob": ("float", _REQUIRED),
        "conn_delete_prob": ("float", _REQUIRED),
        "node_add_prob": ("float", _REQUIRED),
        "node_delete_prob": ("float", _REQUIRED),
        "single_structural_mutation": ("bool", False),
        "structural_mutation_surer": ("str", "default"),
        "initial_connection": ("str", "unconnected"),
        "compatibility_excess_coefficient": ("str", "auto"),
        "compatibility_include_node_genes": ("bool", True),
        "compatibility_enable_penalty": ("float", 1.0),
        **_float_attribute_keys("bias"),
        **_float_attribute_keys("response"),
        **_choice_keys("activation"),
        **_choice_keys("aggregation"),
        **_float_attribute_keys("time_constant", _TIME_CONSTANT_DEFAULTS),
        **_float_attribute_keys("weight"),
        "enabled_default": ("str", _REQUIRED),
        "enabled_mutate_rate": ("float", _REQUIRED),
        "enabled_rate_to_true_add": ("float", 0.0),
        "enabled_rate_to_false_add": ("float", 0.0),
    },
    "DefaultSpeciesSet": {
        "compatibility_threshold": ("float", _REQUIRED),
        "target_num_species": ("str", "none"),
        "threshold_adjust_rate": ("float", 0.1),
        "threshold_min": ("float", 0.1),
        "threshold_max": ("float", 100.0),
    },
    "DefaultStagnation": {
        "species_fitness_func": ("str", "mean"),
        "max_stagnation": ("int", 15),
        "species_elitism": ("int", 0),
    },
    "DefaultReproduction": {
        "elitism": ("int", 0),
        "survival_threshold": ("float", 0.2),
        "min_species_size": ("int", 1),
        "fitness_sharing": ("str", "normalized"),
        "spawn_method": ("str", "smoothed"),
        "interspecies_crossover_prob": ("float", 0.0),
    },
}


class _Section:
    """The typed values of one section, errors naming ``[section] key``."""

    def __init__(self, name: str, raw: dict[str, str]):
        self.name = name
        self.raw = raw
        keys = _KEYS[name]
        unknown = [k for k in raw if k not in keys]
        if unknown:
            raise ArgumentError(
                f"[{name}] {unknown[0]}: unknown key (neat-python 2.1 reads: {', '.join(sorted(keys))})"
            )

    def where(self, key: str) -> str:
        return f"[{self.name}] {key}"

    def error(self, key: str, message: str) -> ArgumentError:
        value = self.raw.get(key)
        shown = f" = {value!r}" if value is not None else ""
        return ArgumentError(f"{self.where(key)}{shown}: {message}")

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str, allow_inf: bool = False) -> Any:
        kind, default = _KEYS[self.name][key]
        if key not in self.raw:
            if default is _REQUIRED:
                raise ArgumentError(f"{self.where(key)}: missing (neat-python 2.1 requires it)")
            return default
        text = self.raw[key].strip()
        if kind == "str":
            return text
        if kind == "list":
            items = text.split()
            if not items:
                raise self.error(key, "needs at least one name")
            return tuple(items)
        if kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise self.error(key, "must be True or False")
        if kind == "int":
            try:
                return int(text)
            except ValueError:
                raise self.error(key, "must be an integer") from None
        try:
            value = float(text)
        except ValueError:
            raise self.error(key, "must be a number") from None
        if math.isnan(value) or (math.isinf(value) and not allow_inf):
            raise self.error(key, "must be finite")
        return value

    def fraction(self, key: str) -> float:
        value = self.get(key)
        if not 0.0 <= value <= 1.0:
            raise self.error(key, "must be in [0, 1]")
        return value

    def nonnegative(self, key: str) -> float:
        value = self.get(key)
        if value < 0.0:
            raise self.error(key, "must be >= 0")
        return value

    def count(self, key: str, minimum: int) -> int:
        value = self.get(key)
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}")
        return value


def _float_attribute(sec: _Section, name: str) -> FloatAttribute:
    init_type = sec.get(f"{name}_init_type").lower()
    if "gauss" in init_type or "normal" in init_type:
        init_type = "gaussian"
    elif "uniform" in init_type:
        init_type = "uniform"
    else:
        raise sec.error(f"{name}_init_type", "must name 'gaussian' (or 'normal') or 'uniform'")
    low, high = sec.get(f"{name}_min_value"), sec.get(f"{name}_max_value")
    if low > high:
        raise sec.error(f"{name}_min_value", f"must be <= {name}_max_value ({high})")
    return FloatAttribute(
        name,
        init_mean=sec.get(f"{name}_init_mean"),
        init_std=sec.nonnegative(f"{name}_init_stdev"),
        init_type=init_type,
        mutate_power=sec.nonnegative(f"{name}_mutate_power"),
        mutate_rate=sec.fraction(f"{name}_mutate_rate"),
        replace_rate=sec.fraction(f"{name}_replace_rate"),
        min_value=low,
        max_value=high,
    )


def _choice_attribute(sec: _Section, name: str, known: tuple[str, ...]) -> ChoiceAttribute:
    options = sec.get(f"{name}_options")
    for option in options:
        if option not in known:
            raise sec.error(
                f"{name}_options", f"unknown {name} {option!r}; known: {', '.join(sorted(known))}"
            )
    if len(set(options)) != len(options):
        raise sec.error(f"{name}_options", "lists a name twice")
    default = sec.get(f"{name}_default")
    if default.lower() in ("none", "random"):
        default = "random"
    elif default not in options:
        raise sec.error(f"{name}_default", f"must be one of {name}_options {options} or 'random'")
    return ChoiceAttribute(name, options, default, sec.fraction(f"{name}_mutate_rate"))


def _initial_connection(sec: _Section, feed_forward: bool, self_loops: str) -> tuple[str, float, bool]:
    key = "initial_connection"
    text = sec.get(key)
    words = text.split()
    mode = words[0] if words else ""
    if mode in ("full", "full_direct", "full_nodirect", "partial", "partial_direct", "partial_nodirect"):
        if not feed_forward and self_loops == "error":
            raise sec.error(
                key,
                "neat-python also gives every node of a recurrent genome a self-connection at the "
                "start, which GenomeSpec cannot express; pass initial_self_loops='omit' to start "
                "without them",
            )
    if mode.startswith("partial"):
        if len(words) != 2:
            raise sec.error(key, "partial connectivity needs a fraction, e.g. 'partial_direct 0.5'")
        try:
            fraction = float(words[1])
        except ValueError:
            raise sec.error(key, "the partial connection fraction must be a number") from None
        if not 0.0 <= fraction <= 1.0:
            raise sec.error(key, "the partial connection fraction must be in [0, 1]")
        return "partial", fraction, mode == "partial_direct"
    if len(words) != 1:
        raise sec.error(key, "expected one word (a fraction only follows 'partial*')")
    if mode in ("full", "full_direct", "full_nodirect"):
        return "full", 1.0, mode == "full_direct"
    if mode == "unconnected":
        return "none", 1.0, False
    if mode in ("fs_neat", "fs_neat_nohidden", "fs_neat_hidden"):
        raise sec.error(
            key, "the fs_neat modes (one random input per output) are not supported by GenomeSpec"
        )
    raise sec.error(
        key,
        "must be one of unconnected, full, full_direct, full_nodirect, partial[_direct|_nodirect] <p>",
    )


def _sections(text: str, source: str) -> dict[str, _Section]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text, source=source)
    except configparser.Error as exc:
        raise ArgumentError(f"{source}: not a valid INI file: {exc}") from None
    unknown = [s for s in parser.sections() if s not in SECTIONS]
    if unknown:
        raise ArgumentError(
            f"[{unknown[0]}]: unknown section (neat-python 2.1 with its default classes reads "
            f"{', '.join(f'[{s}]' for s in SECTIONS)})"
        )
    out = {}
    for name in SECTIONS:
        if not parser.has_section(name):
            raise ArgumentError(f"[{name}]: section missing from {source}")
        try:
            raw = dict(parser.items(name))
        except configparser.Error as exc:
            raise ArgumentError(f"[{name}]: {exc}") from None
        out[name] = _Section(name, raw)
    return out


def parse_ini(
    text: str,
    *,
    max_nodes: int | None = None,
    max_conns: int | None = None,
    max_species: int | None = None,
    policy: str = "auto",
    functions: str = "neat-python",
    initial_self_loops: str = "error",
    source: str = "<string>",
) -> tuple[GenomeSpec, NEATConfig, int, dict[str, Any]]:
    """:func:`read_ini` of the file's text."""
    if not isinstance(text, str):
        raise ArgumentError(f"text must be a str, got {type(text).__name__}")
    check_choice(initial_self_loops, "initial_self_loops", ("error", "omit"))
    check_choice(policy, "policy", ("auto", "feedforward", "recurrent", "ctrnn"))
    if not isinstance(functions, str):
        raise ArgumentError(f"functions must be a scheme name (str), got {functions!r}")
    fs = function_set(functions)
    sec = _sections(text, source)

    neat = sec["NEAT"]
    population_size = neat.count("pop_size", 2)
    criterion = neat.get("fitness_criterion")
    if criterion not in ("max", "min", "mean"):
        raise neat.error("fitness_criterion", "must be max, min or mean")
    extras = {
        "fitness_criterion": criterion,
        "fitness_threshold": neat.get("fitness_threshold", allow_inf=True),
        "no_fitness_termination": neat.get("no_fitness_termination"),
        "seed": neat.get("seed"),
    }

    g = sec["DefaultGenome"]
    num_inputs = g.count("num_inputs", 1)
    num_outputs = g.count("num_outputs", 1)
    num_hidden = g.count("num_hidden", 0)
    feed_forward = g.get("feed_forward")
    initial, fraction, direct = _initial_connection(g, feed_forward, initial_self_loops)

    time_constant = None
    if any(g.has(f"time_constant_{item}") for item in (*_FLOAT_ITEMS, *_FLOAT_BOUNDS)):
        time_constant = _float_attribute(g, "time_constant")
        if time_constant.min_value <= 0.0:
            raise g.error("time_constant_min_value", "must be > 0 (a time constant divides)")
    activation_names = tuple(name for name, _ in fs.activations)
    aggregation_names = tuple(name for name, _ in fs.aggregations)
    node_gene = NodeGene(
        bias=_float_attribute(g, "bias"),
        response=_float_attribute(g, "response"),
        activation=_choice_attribute(g, "activation", activation_names),
        aggregation=_choice_attribute(g, "aggregation", aggregation_names),
        time_constant=time_constant,
    )
    enabled_default = g.get("enabled_default").lower()
    if enabled_default not in _TRUE:
        raise g.error("enabled_default", "only True is supported (connections start enabled)")
    for key in ("enabled_rate_to_true_add", "enabled_rate_to_false_add"):
        if g.get(key) != 0.0:
            raise g.error(key, "state-dependent enable/disable rates are not supported; use 0.0")
    conn_gene = ConnectionGene(
        weight=_float_attribute(g, "weight"), enabled_mutate_rate=g.fraction("enabled_mutate_rate")
    )

    n_io = num_inputs + num_outputs
    layers = (num_hidden,) if num_hidden else ()
    # the candidate initial links (GenomeSpec counts them the same way)
    links = GenomeSpec(
        num_inputs,
        num_outputs,
        n_io + num_hidden,
        1,
        initial_connection="none",
        hidden_layers=layers,
        initial_direct=direct,
    ).num_initial_conns
    if max_nodes is None:
        max_nodes = max(50, n_io + num_hidden + 16)
    if max_conns is None:
        max_conns = max(100, 2 * links)
    max_nodes = check_int(max_nodes, "max_nodes", minimum=n_io + num_hidden)
    max_conns = check_int(max_conns, "max_conns", minimum=links if initial == "full" else 1)
    spec = GenomeSpec(
        num_inputs,
        num_outputs,
        max_nodes=max_nodes,
        max_conns=max_conns,
        feed_forward=feed_forward,
        node_gene=node_gene,
        conn_gene=conn_gene,
        initial_connection=initial,
        connection_fraction=fraction,
        hidden_layers=layers,
        initial_direct=direct,
    )

    surer = g.get("structural_mutation_surer").lower()
    if surer in _TRUE:
        surer = True
    elif surer in _FALSE:
        surer = False
    elif surer != "default":
        raise g.error("structural_mutation_surer", "must be true, false or default")
    mutation = MutationConfig(
        conn_add_prob=g.fraction("conn_add_prob"),
        conn_delete_prob=g.fraction("conn_delete_prob"),
        node_add_prob=g.fraction("node_add_prob"),
        node_delete_prob=g.fraction("node_delete_prob"),
        single_structural_mutation=g.get("single_structural_mutation"),
        structural_mutation_surer=surer,
    )
    excess = g.get("compatibility_excess_coefficient")
    if excess.lower() == "auto":
        excess_value: float | None = None
    else:
        try:
            excess_value = float(excess)
        except ValueError:
            raise g.error("compatibility_excess_coefficient", "must be 'auto' or a number") from None
        if not (math.isfinite(excess_value) and excess_value >= 0.0):
            raise g.error("compatibility_excess_coefficient", "must be finite and >= 0")
    distance = DistanceConfig(
        mode="neat-python",
        compatibility_disjoint_coefficient=g.nonnegative("compatibility_disjoint_coefficient"),
        compatibility_weight_coefficient=g.nonnegative("compatibility_weight_coefficient"),
        compatibility_excess_coefficient=excess_value,
        compatibility_include_node_genes=g.get("compatibility_include_node_genes"),
        compatibility_enable_penalty=g.nonnegative("compatibility_enable_penalty"),
    )

    ss, st = sec["DefaultSpeciesSet"], sec["DefaultStagnation"]
    threshold = ss.get("compatibility_threshold")
    if threshold <= 0.0:
        raise ss.error("compatibility_threshold", "must be > 0")
    target = ss.get("target_num_species")
    if target.lower() == "none":
        target_value: int | None = None
    else:
        try:
            target_value = int(target)
        except ValueError:
            raise ss.error("target_num_species", "must be 'none' or an integer") from None
        if target_value < 1:
            raise ss.error("target_num_species", "must be >= 1")
    t_min, t_max = ss.get("threshold_min"), ss.get("threshold_max")
    if t_min <= 0.0:
        raise ss.error("threshold_min", "must be > 0")
    if t_max < t_min:
        raise ss.error("threshold_max", f"must be >= threshold_min ({t_min})")
    fitness_func = st.get("species_fitness_func")
    if fitness_func not in ("max", "min", "mean", "median"):
        hint = " (median2 is not implemented)" if fitness_func == "median2" else ""
        raise st.error("species_fitness_func", f"must be max, min, mean or median{hint}")

    r = sec["DefaultReproduction"]
    sharing = r.get("fitness_sharing")
    if sharing not in ("normalized", "canonical"):
        raise r.error("fitness_sharing", "must be normalized or canonical")
    spawn = r.get("spawn_method")
    if spawn not in ("smoothed", "proportional"):
        raise r.error("spawn_method", "must be smoothed or proportional")
    reproduction = ReproductionConfig(
        elitism=r.count("elitism", 0),
        survival_threshold=r.fraction("survival_threshold"),
        min_species_size=r.count("min_species_size", 1),
        fitness_sharing=sharing,
        spawn_method=spawn,
        interspecies_crossover_prob=r.fraction("interspecies_crossover_prob"),
        reset_on_extinction=neat.get("reset_on_extinction"),
    )
    if max_species is None:
        max_species = max(1, min(32, population_size // reproduction.min_size))
    max_species = check_int(max_species, "max_species")
    species = SpeciesConfig(
        compatibility_threshold=threshold,
        target_num_species=target_value,
        threshold_adjust_rate=ss.nonnegative("threshold_adjust_rate"),
        threshold_min=t_min,
        threshold_max=t_max,
        max_species=max_species,
        species_fitness_func=fitness_func,
        max_stagnation=st.count("max_stagnation", 1),
        species_elitism=st.count("species_elitism", 0),
    )
    if policy == "auto" and feed_forward and time_constant is not None:
        # neat-python's Config.save writes the time_constant_* keys of every config; a
        # feedforward one still runs as a feedforward network
        policy = "feedforward"
    config = NEATConfig(
        mutation=mutation,
        crossover=CrossoverConfig(),
        distance=distance,
        species=species,
        reproduction=reproduction,
        outputs=OutputMode(),
        functions=fs.scheme,
        policy=policy,
        mode="neat-python",
    )
    return spec, config, population_size, extras


def read_ini(
    path: str | Path,
    *,
    max_nodes: int | None = None,
    max_conns: int | None = None,
    max_species: int | None = None,
    policy: str = "auto",
    functions: str = "neat-python",
    initial_self_loops: str = "error",
) -> tuple[GenomeSpec, NEATConfig, int, dict[str, Any]]:
    """A neat-python 2.1 configuration file as ``(spec, config, population_size, extras)``.

    Args:
        path: the INI file (neat-python's ``config-feedforward`` and friends).
        max_nodes: node rows per genome, input pins included (neat-python has no limit); default
            ``max(50, num_inputs + num_outputs + 16)``.
        max_conns: connection rows per genome; default ``max(100, 2 * num_inputs * num_outputs)``.
        max_species: species slots; default ``min(32, pop_size // max(min_species_size,
            elitism))`` (at least 1), which the strategy's size check always accepts.
        policy: how networks run, :attr:`NEATConfig.policy` (``"auto"``: a CTRNN when the node gene
            has a ``time_constant``, i.e. when the file has ``time_constant_*`` keys, else
            feedforward or recurrent per ``feed_forward``; see
            :func:`~evotensor.neat.network.neat_policy`), except that a feedforward file with
            ``time_constant_*`` keys (neat-python's ``Config.save`` writes them) gets
            ``"feedforward"``. neat-python leaves this choice to the script.
        functions: the activation/aggregation naming scheme (:attr:`NEATConfig.functions`,
            ``"neat-python"`` or ``"tensorneat"``) the option names must resolve in; functions
            added with :func:`~evotensor.neat.register_activation` count.
        initial_self_loops: ``"error"`` (default) or ``"omit"``: what to do with the self-connections
            neat-python adds to recurrent genomes with full/partial initial connectivity.

    Returns:
        ``(GenomeSpec, NEATConfig, population_size, extras)`` with ``extras`` the dict
        ``{"fitness_criterion", "fitness_threshold", "no_fitness_termination", "seed"}`` (``seed``
        is ``None`` when the file has none).

    Raises:
        ArgumentError: naming ``[section] key`` for an unknown section or key, a missing required
            key, a bad value, or a setting evotensor cannot express.
    """
    if not isinstance(path, (str, Path)):
        raise ArgumentError(f"path must be a str or Path, got {path!r}")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"path: cannot read the neat-python config {str(path)!r}: {exc}") from None
    try:
        return parse_ini(
            text,
            max_nodes=max_nodes,
            max_conns=max_conns,
            max_species=max_species,
            policy=policy,
            functions=functions,
            initial_self_loops=initial_self_loops,
            source=str(path),
        )
    except ArgumentError as err:  # every error names the file as well as [section] key
        if str(path) in str(err):
            raise
        raise ArgumentError(f"{path}: {err}") from None


def neat_from_ini(path: str | Path, **kw: Any) -> tuple[NEAT, dict[str, Any]]:
    """``(NEAT strategy, extras)`` from a neat-python 2.1 configuration file; ``kw`` as
    :func:`read_ini`. The evotensor counterpart of ``neat.Config(...)`` + ``neat.Population``."""
    spec, config, population_size, extras = read_ini(path, **kw)
    return NEAT(spec, population_size, config), extras


# ---------------------------------------------------------------------------------------------
# writing


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _unexpressible(field: str, value: Any, why: str = "") -> ArgumentError:
    return ArgumentError(
        f"{field} = {value!r} cannot be written as a neat-python 2.1 configuration{': ' + why if why else ''}"
    )


def _float_lines(attr: FloatAttribute) -> list[tuple[str, Any]]:
    n = attr.name
    return [
        (f"{n}_init_mean", float(attr.init_mean)),
        (f"{n}_init_stdev", float(attr.init_std)),
        (f"{n}_init_type", "uniform" if attr.init_type == "uniform" else "gaussian"),
        (f"{n}_max_value", float(attr.max_value)),
        (f"{n}_min_value", float(attr.min_value)),
        (f"{n}_mutate_power", float(attr.mutate_power)),
        (f"{n}_mutate_rate", float(attr.mutate_rate)),
        (f"{n}_replace_rate", float(attr.replace_rate)),
    ]


def to_ini(
    spec: GenomeSpec,
    config: NEATConfig,
    population_size: int,
    *,
    fitness_criterion: str = "max",
    fitness_threshold: float = math.inf,
    no_fitness_termination: bool = False,
    seed: int | None = None,
    path: str | Path | None = None,
) -> str:
    """The neat-python 2.1 configuration text of ``(spec, config, population_size)`` (written to
    ``path`` too, if given); :func:`read_ini` of it gives the same objects back (``max_nodes``,
    ``max_conns`` and ``max_species`` are not part of the file: pass them to the reader).

    The ``extras`` keywords fill ``[NEAT]`` (``fitness_threshold`` defaults to ``inf``: never
    reached). A recurrent spec with ``initial_connection="full"`` or ``"partial"`` is written as
    ``full_direct``/``partial_direct``, which reads back with ``initial_self_loops="omit"``.

    Raises :class:`ArgumentError` naming the first setting neat-python cannot express (TensorNEAT
    or paper options, custom gene attributes, an output transform, ...).
    """
    if not isinstance(spec, GenomeSpec):
        raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
    if not isinstance(config, NEATConfig):
        raise ArgumentError(f"config must be a NEATConfig, got {type(config).__name__}")
    population_size = check_int(population_size, "population_size", minimum=2)
    check_choice(fitness_criterion, "fitness_criterion", ("max", "min", "mean"))
    if seed is not None:
        seed = check_int(seed, "seed", minimum=None)

    # what neat-python cannot say
    if config.functions != "neat-python":
        raise _unexpressible("config.functions", config.functions)
    if config.outputs != OutputMode():
        raise _unexpressible("config.outputs", config.outputs, "neat-python activates every output")
    if config.crossover != CrossoverConfig():
        raise _unexpressible("config.crossover", config.crossover)
    base = MutationConfig()
    for f in dataclasses.fields(MutationConfig):
        if f.name in ("conn_add_prob", "conn_delete_prob", "node_add_prob", "node_delete_prob"):
            continue
        if f.name in ("single_structural_mutation", "structural_mutation_surer"):
            continue
        if getattr(config.mutation, f.name) != getattr(base, f.name):
            raise _unexpressible(f"config.mutation.{f.name}", getattr(config.mutation, f.name))
    dist = config.distance
    if dist.mode != "neat-python":
        raise _unexpressible("config.distance.mode", dist.mode)
    rep = config.reproduction
    if rep.fitness_sharing not in ("normalized", "canonical"):
        raise _unexpressible("config.reproduction.fitness_sharing", rep.fitness_sharing)
    if rep.mutate_only_prob != 0.0:
        raise _unexpressible("config.reproduction.mutate_only_prob", rep.mutate_only_prob)
    ng, cg = spec.node_gene, spec.conn_gene
    if type(ng) is not NodeGene or type(cg) is not ConnectionGene:
        raise _unexpressible("spec.node_gene/conn_gene", (type(ng).__name__, type(cg).__name__))
    expected = ("bias", "response", "time_constant")[: ng.num_floats]
    if ng.float_names != expected:
        raise _unexpressible("spec.node_gene.floats", ng.float_names)
    if cg.float_names != ("weight",):
        raise _unexpressible("spec.conn_gene.floats", cg.float_names)

    sp = config.species
    if len(spec.hidden_layers) > 1:
        raise _unexpressible("spec.hidden_layers", spec.hidden_layers)
    # without hidden nodes neat-python's _direct and _nodirect are the same
    suffix = "_direct" if spec.initial_direct or not spec.hidden_layers else "_nodirect"
    initial = {"full": "full" + suffix, "none": "unconnected"}.get(spec.initial_connection)
    if initial is None:
        initial = f"partial{suffix} {float(spec.connection_fraction)!r}"
    surer = config.mutation.structural_mutation_surer
    surer = "default" if surer == "default" else ("true" if surer else "false")
    excess = dist.compatibility_excess_coefficient
    genome: list[tuple[str, Any]] = [
        ("num_inputs", spec.num_inputs),
        ("num_outputs", spec.num_outputs),
        ("num_hidden", spec.num_hidden),
        ("feed_forward", spec.feed_forward),
        ("initial_connection", initial),
        ("compatibility_disjoint_coefficient", float(dist.disjoint_coefficient)),
        ("compatibility_weight_coefficient", float(dist.weight_coefficient)),
        ("compatibility_excess_coefficient", "auto" if excess in (None, "auto") else float(excess)),
        ("compatibility_include_node_genes", dist.compatibility_include_node_genes),
        ("compatibility_enable_penalty", float(dist.compatibility_enable_penalty)),
        ("conn_add_prob", float(config.mutation.conn_add_prob)),
        ("conn_delete_prob", float(config.mutation.conn_delete_prob)),
        ("node_add_prob", float(config.mutation.node_add_prob)),
        ("node_delete_prob", float(config.mutation.node_delete_prob)),
        ("single_structural_mutation", config.mutation.single_structural_mutation),
        ("structural_mutation_surer", surer),
    ]
    for attr in ng.floats:
        genome += _float_lines(attr)
    for choice in (ng.activation, ng.aggregation):
        genome += [
            (
                f"{choice.name}_default",
                "random" if choice.default in ("random", "none", None) else choice.default,
            ),
            (f"{choice.name}_options", " ".join(choice.options)),
            (f"{choice.name}_mutate_rate", float(choice.mutate_rate)),
        ]
    genome += _float_lines(cg.floats[0])
    genome += [
        ("enabled_default", True),
        ("enabled_mutate_rate", float(cg.enabled_mutate_rate)),
        ("enabled_rate_to_true_add", 0.0),
        ("enabled_rate_to_false_add", 0.0),
    ]
    threshold = float(fitness_threshold)
    if math.isnan(threshold):
        raise ArgumentError("fitness_threshold must not be NaN")
    sections: list[tuple[str, list[tuple[str, Any]]]] = [
        (
            "NEAT",
            [
                ("fitness_criterion", fitness_criterion),
                ("fitness_threshold", float(threshold)),
                ("no_fitness_termination", bool(no_fitness_termination)),
                ("pop_size", population_size),
                ("reset_on_extinction", rep.reset_on_extinction),
                *([("seed", seed)] if seed is not None else []),
            ],
        ),
        ("DefaultGenome", genome),
        (
            "DefaultSpeciesSet",
            [
                ("compatibility_threshold", float(sp.compatibility_threshold)),
                ("target_num_species", "none" if sp.target_num_species is None else sp.target_num_species),
                ("threshold_adjust_rate", float(sp.threshold_adjust_rate)),
                ("threshold_min", float(sp.threshold_min)),
                ("threshold_max", float(sp.threshold_max)),
            ],
        ),
        (
            "DefaultStagnation",
            [
                ("species_fitness_func", sp.species_fitness_func),
                ("max_stagnation", sp.max_stagnation),
                ("species_elitism", sp.species_elitism),
            ],
        ),
        (
            "DefaultReproduction",
            [
                ("elitism", rep.elitism),
                ("survival_threshold", float(rep.survival_threshold)),
                ("min_species_size", rep.min_species_size),
                ("fitness_sharing", rep.fitness_sharing),
                ("spawn_method", rep.spawn_method),
                ("interspecies_crossover_prob", float(rep.interspecies_crossover_prob)),
            ],
        ),
    ]
    out = io.StringIO()
    out.write("# neat-python 2.1 configuration written by evotensor.neat.ini.to_ini\n")
    for name, items in sections:
        out.write(f"\n[{name}]\n")
        width = max(len(k) for k, _ in items)
        for key, value in items:
            out.write(f"{key.ljust(width)} = {_fmt(value)}\n")
    text = out.getvalue()
    if path is not None:
        Path(path).write_text(text)
    return text
