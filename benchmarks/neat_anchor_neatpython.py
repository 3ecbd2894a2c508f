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
# pop_size and no_fitness_termination are substituted (the example's values: 150 and False), and
# num_inputs / num_outputs (2 and 1; CartPole: 4 and 2).
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
num_inputs              = {num_inputs}
num_outputs             = {num_outputs}
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


def make_config(
    pop_size: int, no_fitness_termination: bool, num_inputs: int = 2, num_outputs: int = 1
) -> neat.Config:
    text = XOR_CONFIG.format(
        pop_size=pop_size,
        no_fitness_termination=no_fitness_termination,
        num_inputs=num_inputs,
        num_outputs=num_outputs,
    )
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
        self.start_generation_t = []
        self.post_evaluate_t = []
        self.end_generation_t = []

    def start_generation(self, generation):
        self.generation = generation
        self.start_generation_t.append(time.perf_counter())

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


def timed(fn, seconds: list):
    """``fn`` that appends the wall seconds of each call to ``seconds``."""

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        seconds.append(time.perf_counter() - t)
        return out

    return wrapper


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

    pop.species.speciate = timed(pop.species.speciate, speciate_s)
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


# --------------------------------------------------------------------------------------------
# CartPole-v1 (gymnasium), the workload of ``neat_cartpole.py``

CARTPOLE_EPISODES = 5
_ENV = None  # one gymnasium environment per process (the main one or a ParallelEvaluator worker)


def _cartpole_env():
    global _ENV
    if _ENV is None:
        import gymnasium

        _ENV = gymnasium.make("CartPole-v1")  # TimeLimit: an episode ends at 500 steps
    return _ENV


def cartpole_rollouts(genome, config, seed: int, episodes: int) -> tuple[float, int]:
    """``(mean return, steps)`` of ``episodes`` CartPole-v1 episodes of neat-python's
    ``FeedForwardNetwork`` of ``genome`` (action = argmax of the 2 outputs, the first on a tie as
    NumPy's). The episodes' reset seeds come from a ``random.Random`` of ``(seed, genome.key)``:
    the same fitness serial or in a ``ParallelEvaluator`` worker, and neat-python's own ``random``
    (its reproduction) is never touched."""
    net = neat.nn.FeedForwardNetwork.create(genome, config)
    env = _cartpole_env()
    rng = random.Random(seed * 1_000_003 + genome.key)
    total, steps = 0.0, 0
    for _ in range(episodes):
        obs, _ = env.reset(seed=rng.getrandbits(31))
        done = False
        while not done:
            out = net.activate(obs.tolist())
            obs, reward, terminated, truncated, _ = env.step(0 if out[0] >= out[1] else 1)
            total += reward
            steps += 1
            done = terminated or truncated
    return total / episodes, steps


def cartpole_fitness(genome, config, seed: int = 0, episodes: int = CARTPOLE_EPISODES) -> float:
    """The ``ParallelEvaluator`` form of :func:`cartpole_rollouts`: ``(genome, config) -> fitness``."""
    return cartpole_rollouts(genome, config, seed, episodes)[0]


def _cpu_s() -> float:
    """CPU seconds of this process and its live children (the ``ParallelEvaluator``'s pool workers:
    ``process_time`` counts only this process, ``os.times`` only children already waited for)."""
    import multiprocessing

    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def run_cartpole(seed: int, pop_size: int, generations: int, workers: int, episodes: int) -> dict:
    """Exactly ``generations`` generations of neat-python on CartPole-v1 at ``pop_size``: the XOR
    example's config with 4 inputs and 2 outputs (:func:`make_config`), fitness = mean return of
    ``episodes`` episodes (:func:`cartpole_rollouts`), evaluated serially (``workers=0``) or by a
    ``neat.ParallelEvaluator(workers, ...)``. Per generation: wall and CPU (workers included)
    seconds, the evaluation / reproduce / speciate split, best and mean return, and the mean
    episode length (= the mean return: CartPole pays 1 per step; the serial run checks it)."""
    import functools

    config = make_config(pop_size, True, 4, 2)
    random.seed(seed)
    t_setup = time.perf_counter()
    population = neat.Population(config)
    evaluator = None
    if workers:
        fitness = functools.partial(cartpole_fitness, seed=seed, episodes=episodes)
        evaluator = neat.ParallelEvaluator(workers, fitness)
    setup_s = time.perf_counter() - t_setup
    tracker = Tracker()
    population.add_reporter(tracker)
    eval_s, speciate_s, best_per_gen, mean_per_gen, mean_len_per_gen, cpu_marks = [], [], [], [], [], []

    def timed_eval(genomes, cfg):
        t = time.perf_counter()
        if evaluator is not None:
            evaluator.evaluate(genomes, cfg)
        else:
            steps = 0
            for _, genome in genomes:
                genome.fitness, n = cartpole_rollouts(genome, cfg, seed, episodes)
                steps += n
            mean_len = steps / (episodes * len(genomes))
        eval_s.append(time.perf_counter() - t)
        returns = [g.fitness for _, g in genomes]
        best_per_gen.append(max(returns))
        mean_per_gen.append(statistics.fmean(returns))
        if evaluator is None and abs(mean_len - mean_per_gen[-1]) > 1e-6 * max(1.0, mean_len):
            raise AssertionError(f"mean episode length {mean_len} != mean return {mean_per_gen[-1]}")
        mean_len_per_gen.append(mean_per_gen[-1])

    class CPUMarks(neat.reporting.BaseReporter):
        def start_generation(self, generation):
            cpu_marks.append(_cpu_s())

        def end_generation(self, config, population, species_set):
            cpu_marks.append(_cpu_s())

    population.species.speciate = timed(population.species.speciate, speciate_s)
    population.add_reporter(CPUMarks())
    c0, t0 = _cpu_s(), time.perf_counter()
    try:
        population.run(timed_eval, generations)
    finally:
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
        if evaluator is not None:
            evaluator.close()
    between = [e - p for p, e in zip(tracker.post_evaluate_t, tracker.end_generation_t)]
    reproduce_s = [b - s for b, s in zip(between, speciate_s)]
    gen_s = [e - s for s, e in zip(tracker.start_generation_t, tracker.end_generation_t)]
    gen_cpu_s = [cpu_marks[2 * i + 1] - cpu_marks[2 * i] for i in range(len(cpu_marks) // 2)]
    rest, rest_cpu = gen_s[1:] or gen_s, gen_cpu_s[1:] or gen_cpu_s
    med = statistics.median
    return {
        "record": "timing",
        "engine": "neat-python",
        "version": VERSION,
        "task": "cartpole",
        "workers": workers,
        "episodes": episodes,
        "gymnasium": version("gymnasium"),
        "seed": seed,
        "pop": pop_size,
        "generations": generations,
        "setup_s": setup_s,
        "compile_s": None,
        "wall_s": wall,
        "cpu_s": cpu,
        "first_gen_s": gen_s[0],
        "s_per_generation": sum(rest) / len(rest),
        "cpu_s_per_generation": sum(rest_cpu) / len(rest),
        "gen_s": gen_s,
        "gen_cpu_s": gen_cpu_s,
        "eval_s": med(eval_s[1:] or eval_s),
        "tell_s": med([r + s for r, s in zip(reproduce_s, speciate_s)][1:] or reproduce_s),
        "eval_per_gen_s": eval_s,
        "reproduce_s": reproduce_s,
        "speciate_s": speciate_s,
        "best_per_gen": best_per_gen,
        "mean_return_per_gen": mean_per_gen,
        "mean_episode_length_per_gen": mean_len_per_gen,
        "species_last": tracker.species,
        "mean_nodes": statistics.mean(g.size()[0] for g in population.population.values()),
        "mean_conns": statistics.mean(g.size()[1] for g in population.population.values()),
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
    parser.add_argument("mode", nargs="?", default="xor", choices=("xor", "timing", "cartpole"))
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    parser.add_argument(
        "--generations", type=int, help="xor: at most this many (300); timing: exactly (20); cartpole: (5)"
    )
    parser.add_argument("--pop", type=int, default=1000, help="timing / cartpole population (default 1000)")
    parser.add_argument(
        "--workers", type=int, default=0, help="cartpole: ParallelEvaluator workers (0: serial, the default)"
    )
    parser.add_argument(
        "--episodes", type=int, default=CARTPOLE_EPISODES, help="cartpole: episodes per fitness (5)"
    )
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    generations = args.generations or {"xor": 300, "timing": 20, "cartpole": 5}[args.mode]
    settings = SETTINGS
    if args.mode == "timing":
        settings += f"; pop {args.pop}, no fitness termination"
    elif args.mode == "cartpole":
        settings = (
            f"{SETTINGS.replace('fitness 4 - SSE, threshold 3.9, ', '')}; 4 inputs, 2 outputs, "
            f"pop {args.pop}, no fitness termination; fitness: mean return of {args.episodes} "
            "gymnasium CartPole-v1 episodes (at most 500 steps), argmax action; "
            + (f"ParallelEvaluator({args.workers})" if args.workers else "serial evaluation")
        )
    meta = {
        "record": "meta",
        "engine": "neat-python",
        "version": VERSION,
        "module": neat.__file__,
        "mode": args.mode,
        "settings": settings,
        **machine(),
    }
    print(json.dumps(meta), flush=True)
    for seed in seeds:
        if args.mode == "xor":
            rec = run_xor(seed, generations)
        elif args.mode == "timing":
            rec = run_timing(seed, args.pop, generations)
        else:
            rec = run_cartpole(seed, args.pop, generations, args.workers, args.episodes)
        rec["load"] = os.getloadavg()[0]
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
