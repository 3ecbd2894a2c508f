"""neat-python's side of the NEAT benchmarks; runs INSIDE the ``neat`` (or ``neat21``) venv of
``bench_venvs.py``, never in the project's (``benchmarks/neat_xor.py`` starts it there).

Two modes, each printing one JSON object per line on stdout (the first line, ``"record": "meta"``,
gives date, machine, neat-python's version and the settings):

* ``xor`` (default): neat-python's own XOR example, ``examples/xor/evolve-feedforward.py`` with
  ``examples/xor/config-feedforward`` (the settings are written out below in :data:`XOR_CONFIG`,
  unchanged: pop 150, fitness criterion max, threshold 3.9, feed-forward, sigmoid and sum only,
  full_direct initial connections, compatibility threshold 3.0, disjoint 1.0 / weight 0.5,
  species elitism 2, max stagnation 20, elitism 2, survival threshold 0.2, min species size 2,
  ...). Fitness = 4 - sum over the 4 cases of (output - target)^2 with neat-python's
  ``nn.FeedForwardNetwork``; at most ``--generations`` (300, as in the example) generations.
  One record per seed (``random.seed(seed)`` before the population is built): ``solve_generation``
  (neat-python's 0-based generation counter when a genome first reached 3.9, or None),
  ``generations_evaluated``, ``wall_s`` / ``cpu_s`` (the whole ``Population`` construction and
  run), ``best_fitness`` and ``best_sse`` (= 4 - fitness), ``species`` (number of species of the
  last evaluated generation), ``best_nodes`` / ``best_conns`` (``genome.size()``: output + hidden
  nodes, enabled connections; input pins are not nodes in neat-python).
* ``timing``: seconds per generation at ``--pop`` (1000) on the same XOR fitness for exactly
  ``--generations`` generations (``no_fitness_termination = True``, so nothing stops early; the
  config is otherwise the XOR one with ``pop_size`` replaced). A reporter and a wrapped fitness
  function time each generation's parts: ``eval`` (the fitness function: network creation +
  activation), ``reproduce`` (``DefaultReproduction.reproduce``: stagnation, spawn counts,
  crossover, mutation) and ``speciate`` (``DefaultSpeciesSet.speciate``, timed by wrapping that
  bound method of the population's species set). One record per seed with the per-generation
  lists and their medians.

Usage (from the repository root)::

    .bench/venvs/neat/bin/python benchmarks/neat_anchor_neatpython.py xor --seeds 0-9
    .bench/venvs/neat/bin/python benchmarks/neat_anchor_neatpython.py timing --pop 1000 --generations 20

Only neat-python's public API is used (``Config``, ``Population``, ``BaseReporter``,
``nn.FeedForwardNetwork``); nothing of its code is copied here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from importlib.metadata import version

import neat

VERSION = version("neat-python")

# neat-python's examples/xor/config-feedforward (identical in 2.0.0 and 2.1.0), written out; only
# pop_size and no_fitness_termination are substituted (the example's values: 150 and False).
XOR_CONFIG = """\
[NEAT]
fitness_criterion     = max
fitness_threshold     = 3.9
pop_size              = {pop_size}
reset_on_extinction   = False
no_fitness_termination = {no_fitness_termination}

[DefaultGenome]
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
min_species_size   = 2
"""

XOR_INPUTS = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
XOR_OUTPUTS = [0.0, 1.0, 1.0, 0.0]
SETTINGS = (
    "neat-python examples/xor/config-feedforward: fitness 4 - SSE, threshold 3.9, sigmoid(5z) + sum only, "
    "full_direct init, compat threshold 3.0 (disjoint 1.0, weight 0.5), weight mutate 0.8 x N(0, 0.5), "
    "replace 0.1, bias mutate 0.7 x N(0, 0.5), conn add/delete 0.5/0.5, node add/delete 0.2/0.2, "
    "elitism 2, survival 0.2, min species size 2, species elitism 2, max stagnation 20 (species max)"
)


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load": os.getloadavg()[0],
    }


def make_config(pop_size: int, no_fitness_termination: bool) -> neat.Config:
    text = XOR_CONFIG.format(pop_size=pop_size, no_fitness_termination=no_fitness_termination)
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write(text)
    try:
        return neat.Config(
            neat.DefaultGenome,
            neat.DefaultReproduction,
            neat.DefaultSpeciesSet,
            neat.DefaultStagnation,
            f.name,
        )
    finally:
        os.unlink(f.name)


def eval_genomes(genomes, config):
    """The example's fitness: 4 - sum of squared errors over the four XOR cases."""
    for _, genome in genomes:
        net = neat.nn.FeedForwardNetwork.create(genome, config)
        fitness = 4.0
        for xi, xo in zip(XOR_INPUTS, XOR_OUTPUTS):
            fitness -= (net.activate(xi)[0] - xo) ** 2
        genome.fitness = fitness


class Tracker(neat.reporting.BaseReporter):
    """Records when each generation's hooks fire, the solution generation and the species count."""

    def __init__(self):
        self.generation = -1
        self.solved_at = None
        self.species = 0
        self.post_evaluate_t = []
        self.end_generation_t = []

    def start_generation(self, generation):
        self.generation = generation

    def post_evaluate(self, config, population, species, best_genome):
        self.post_evaluate_t.append(time.perf_counter())
        self.species = len(species.species)

    def end_generation(self, config, population, species_set):
        self.end_generation_t.append(time.perf_counter())

    def found_solution(self, config, generation, best):
        if not config.no_fitness_termination:
            self.solved_at = generation


def run_xor(seed: int, generations: int) -> dict:
    config = make_config(150, False)
    c0, t0 = time.process_time(), time.perf_counter()
    random.seed(seed)
    pop = neat.Population(config)
    tracker = Tracker()
    pop.add_reporter(tracker)
    best = pop.run(eval_genomes, generations)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    nodes, conns = best.size()
    return {
        "record": "xor",
        "engine": "neat-python",
        "version": VERSION,
        "seed": seed,
        "pop": 150,
        "max_generations": generations,
        "solve_generation": tracker.solved_at,
        "generations_evaluated": tracker.generation + 1,
        "wall_s": wall,
        "cpu_s": cpu,
        "best_fitness": best.fitness,
        "best_sse": 4.0 - best.fitness,
        "species": tracker.species,
        "best_nodes": nodes,
        "best_conns": conns,
    }


def run_timing(seed: int, pop_size: int, generations: int) -> dict:
    config = make_config(pop_size, True)
    random.seed(seed)
    t_setup = time.perf_counter()
    pop = neat.Population(config)
    setup_s = time.perf_counter() - t_setup
    tracker = Tracker()
    pop.add_reporter(tracker)
    eval_s, speciate_s, best_per_gen = [], [], []

    def timed_eval(genomes, cfg):
        t = time.perf_counter()
        eval_genomes(genomes, cfg)
        eval_s.append(time.perf_counter() - t)
        best_per_gen.append(max(g.fitness for _, g in genomes))

    speciate = pop.species.speciate

    def timed_speciate(*args, **kwargs):
        t = time.perf_counter()
        out = speciate(*args, **kwargs)
        speciate_s.append(time.perf_counter() - t)
        return out

    pop.species.speciate = timed_speciate
    c0, t0 = time.process_time(), time.perf_counter()
    pop.run(timed_eval, generations)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # post_evaluate -> end_generation spans reproduce + speciate (the last generation's too)
    between = [e - p for p, e in zip(tracker.post_evaluate_t, tracker.end_generation_t)]
    reproduce_s = [b - s for b, s in zip(between, speciate_s)]
    generation_s = [e + b for e, b in zip(eval_s, between)]
    med = statistics.median
    return {
        "record": "timing",
        "engine": "neat-python",
        "version": VERSION,
        "seed": seed,
        "pop": pop_size,
        "generations": generations,
        "setup_s": setup_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "s_per_generation": wall / generations,
        "cpu_s_per_generation": cpu / generations,
        "median_generation_s": med(generation_s),
        "median_eval_s": med(eval_s),
        "median_reproduce_s": med(reproduce_s),
        "median_speciate_s": med(speciate_s),
        "eval_s": eval_s,
        "reproduce_s": reproduce_s,
        "speciate_s": speciate_s,
        "species_last": tracker.species,
        "best_per_gen": best_per_gen,
        "mean_nodes": statistics.mean(g.size()[0] for g in pop.population.values()),
        "mean_conns": statistics.mean(g.size()[1] for g in pop.population.values()),
    }


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"`` -> seeds."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return seeds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="xor", choices=("xor", "timing"))
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    parser.add_argument("--generations", type=int, help="xor: at most this many (300); timing: exactly (20)")
    parser.add_argument("--pop", type=int, default=1000, help="timing mode's population (default 1000)")
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    generations = args.generations or (300 if args.mode == "xor" else 20)
    meta = {
        "record": "meta",
        "engine": "neat-python",
        "version": VERSION,
        "module": neat.__file__,
        "mode": args.mode,
        "settings": SETTINGS + ("" if args.mode == "xor" else f"; pop {args.pop}, no fitness termination"),
        **machine(),
    }
    print(json.dumps(meta), flush=True)
    for seed in seeds:
        if args.mode == "xor":
            rec = run_xor(seed, generations)
        else:
            rec = run_timing(seed, args.pop, generations)
        rec["load"] = os.getloadavg()[0]
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
