"""State hashes of NEAT runs: the before/after check that a change to NEAT is bit-identical (run by
hand, not a test).

XOR: ``NEAT.from_mode(mode, 2, 1, pop)`` for the modes neat-python, paper and tensorneat at pop 150
and 1000, 20 generations of the compiled loop step (``evotensor.core.run.Loop``, as the benchmarks
run it); ``reset``: ``tell`` alone through extinction resets (tests/neat/test_strategy.py's set-up,
pop 200, 8 generations); CartPole: ``neat_cartpole.py``'s set-up (``neat_xor.evotensor_strategy(
"neat-python", 4, 2, 1000, "cartpole")`` on ``GymnaxProblem("CartPole-v1", num_episodes=5,
chunk=64)``), 4 generations. Prints one sha256 per run over every leaf (dtype, shape, bytes) of the
final carry and of every generation's metrics.

Usage (the same digests before and after a change mean the same numbers)::

    mkdir -p /tmp/before && git archive HEAD src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/neat_statehash.py   # before
    .venv/bin/python benchmarks/neat_statehash.py [xor] [reset] [cartpole]     # after
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # neat_xor (CartPole set-up)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import evotensor  # noqa: E402
from evotensor.core.run import Loop  # noqa: E402
from evotensor.neat import NEAT  # noqa: E402
from evotensor.problems.function_fit import XOR  # noqa: E402


def leaves_hash(h, tree):
    for leaf in jax.tree_util.tree_leaves(tree):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        a = np.asarray(leaf)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())


def run(strategy, problem, generations, seed=0):
    loop = Loop(strategy, problem)
    carry, loop_key = jax.jit(lambda k: loop.init(k, None))(jax.random.key(seed))
    step = jax.jit(lambda c, k: loop.step(c, k, None))
    h = hashlib.sha256()
    for _ in range(generations):
        carry, metrics = step(carry, loop_key)
        leaves_hash(h, metrics)
    leaves_hash(h, carry)
    best = float(jnp.max(carry.best_fitness)) if hasattr(carry, "best_fitness") else float("nan")
    return h.hexdigest()[:20], best


def main():
    print("package", os.path.dirname(evotensor.__file__), "jax", jax.__version__, flush=True)
    which = sys.argv[1:] or ["xor", "reset", "cartpole"]
    if "xor" in which:
        for mode in ("neat-python", "paper", "tensorneat"):
            for pop in (150, 1000):
                digest, best = run(NEAT.from_mode(mode, 2, 1, pop), XOR(), 20)
                print(f"xor {mode:12s} pop {pop:5d} gens 20: {digest}  best {best:.6f}", flush=True)
    if "reset" in which:  # extinction resets (tests/neat/test_strategy.py's set-up), tell alone
        from evotensor.core.evaluation import Evaluation
        from evotensor.neat.config import neat_mode

        spec, config = neat_mode("neat-python", 2, 1, max_nodes=16, max_conns=32)
        config = config.replace(
            species={"max_stagnation": 1, "species_elitism": 0, "max_species": 5}, reproduction={"elitism": 0}
        )
        strategy = NEAT(spec, 200, config)
        state = jax.jit(strategy.init)(jax.random.key(1))
        tell = jax.jit(strategy.tell)
        h, resets = hashlib.sha256(), 0
        for g in range(8):
            pop, state = strategy.ask(None, state)
            fitness = -jnp.arange(200, dtype=jnp.float32) * (g == 0)
            state, metrics = tell(jax.random.key(g), state, pop, Evaluation(fitness=fitness))
            resets += int(metrics["resets"])
            leaves_hash(h, metrics)
        leaves_hash(h, state)
        print(f"reset neat-python pop 200 gens 8 ({resets} resets): {h.hexdigest()[:20]}", flush=True)
    if "cartpole" in which:
        from neat_xor import evotensor_strategy

        from evotensor.problems.control import GymnaxProblem

        problem = GymnaxProblem("CartPole-v1", num_episodes=5, chunk=64)
        digest, best = run(evotensor_strategy("neat-python", 4, 2, 1000, "cartpole"), problem, 4)
        print(f"cartpole neat-python pop 1000 gens 4: {digest}  best {best:.6f}", flush=True)


if __name__ == "__main__":
    main()
