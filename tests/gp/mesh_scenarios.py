"""GP on a mesh: scenarios run by the multi-device launcher (``tests/distributed/harness.py``).

Each ``scenario_<name>()`` builds its mesh over ``jax.devices()`` (4 devices: 4 in one process, or
2 processes x 2), runs, and returns a JSON-ready dict; ``reference_<name>()`` runs the same thing on
ONE device (no mesh), and ``check(name, result, reference)`` raises ``AssertionError`` unless they
agree as the scenario promises:

* ``pop``: ``evotensor.run`` of a GP on a small regression problem with linear scaling and
  constant optimization, the population split 4 ways: bit-identical to one device (history, final
  state, best tree, hall of fame). Also the compiled evaluation's custom calls, whose forest operand
  must be the local ``[pop / 4, max_len]`` slice.
* ``lexicase``: the same with per-case errors and lexicase selection (the predictions split 4 ways):
  bit-identical.
* ``variation``: a GP whose variation exercises every case of the per-device split
  (:mod:`evotensor.gp.mesh_variation`: elites, NSGA-II, a user's operators, one of them computed
  whole): bit-identical; also the split's plan and the collectives of the run's compiled chunk.
* ``data``: a 2 x 2 mesh, trees split over ``pop`` and the 101 rows over ``data`` (one row left
  over): the fitness of one forest for several metrics with and without linear scaling, the
  predictions, and one evaluation with constant optimization, equal to one device within the
  float32 summation-order tolerances of ``TOLERANCES``.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, ConstantOptimizer, FunctionSet, SymbolicRegression, evaluate, fitness
from evotensor.gp.functions import CONST
from evotensor.gp.sharding import ForestMesh, evaluate_on_mesh, fitness_on_mesh
from evotensor.gp.strategy import MUTATIONS
from evotensor.gp.variation import GPOperator, default_registry

POP, MAX_LEN, GENERATIONS = 24, 16, 3  # 24 x 16: "[6,16]" in the HLO can only be a quarter of the forest
FUNCTIONS = ("add", "sub", "mul", "div", "sin")
HISTORY_MEAN = "generation_mean"
TOLERANCES = {"data": dict(rtol=2e-5, atol=1e-6), "data_tuned": dict(rtol=1e-3, atol=1e-5)}


def _data(n_rows: int = 101) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    X = rng.uniform(-2.0, 2.0, (n_rows, 2)).astype(np.float32)
    y = (1.5 * X[:, 0] * X[:, 1] + np.sin(X[:, 0]) - 0.3).astype(np.float32)
    return X, y


def _problem(**options: Any) -> SymbolicRegression:
    X, y = _data()
    return SymbolicRegression(X, y, FunctionSet(FUNCTIONS), **options)


def _host(a: Any) -> np.ndarray:
    """A (possibly multi-process) array as one NumPy array in every process."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        if a.sharding.is_fully_replicated:
            return np.asarray(a.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return np.asarray(a)


def _listed(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: _host(a).tolist(), tree)


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, names, devices=jax.devices())


def _run(gp: GP, problem: SymbolicRegression, mesh: Any) -> dict:
    result = evotensor.run(gp, problem, GENERATIONS, jax.random.key(3), mesh=mesh)
    state = result.state
    return {
        "history": _listed({k: result.history[k] for k in ("best_fitness", "generation_best", HISTORY_MEAN)}),
        "forest": _listed(dict(vars(state.forest))),
        "fitness": _listed(state.fitness),
        "best": _listed(dict(vars(result.best_genotype))),
        "best_fitness": float(result.best_fitness),
        "hall_of_fame": _listed(state.hall_of_fame.loss),
    }


def _custom_call_operands(problem: SymbolicRegression, forest: Any) -> list[list]:
    """``[target, rows, columns]`` of the first (opcode) operand of every GP custom call in the
    compiled evaluation (the FFI target's name, e.g. ``evotensor_gp_moments``)."""
    text = jax.jit(problem.evaluate).lower(jax.random.key(0), forest).compile().as_text()
    calls = []
    for line in text.splitlines():
        target = re.search(r'custom_call_target="(evotensor_gp_\w+)"', line)
        if target and "custom-call(" in line:
            operands = line.split("custom-call(", 1)[1]
            shape = re.search(r"s32\[(\d+),(\d+)\]", operands)
            calls.append([target.group(1), *(int(g) for g in shape.groups())] if shape else [target.group(1)])
    return calls


def run_pop(mesh: Any) -> dict:
    """The ``pop`` scenario's run on ``mesh`` (``None``: one device, no mesh; with a mesh, also the
    collectives of the run's compiled chunk)."""
    problem = _problem(constant_optimization=ConstantOptimizer(steps=3, fraction=0.25))
    gp = GP(POP, problem.function_set, 2, max_len=MAX_LEN)
    return _run(gp, problem, mesh) if mesh is None else _run_counting_collectives(gp, problem, mesh)


def scenario_pop() -> dict:
    """The population split 4 ways (linear scaling, constant optimization)."""
    mesh = _mesh((4,), ("pop",))
    out = run_pop(mesh)
    problem = _problem(constant_optimization=ConstantOptimizer(steps=3, fraction=0.25))
    forest = GP(POP, problem.function_set, 2, max_len=MAX_LEN).init(jax.random.key(1)).forest
    out["custom_call_operands"] = _custom_call_operands(problem.on_mesh(mesh), forest)
    return out


def reference_pop() -> dict:
    return run_pop(None)


def _lexicase(mesh: Any) -> dict:
    problem = _problem(case_errors=True)
    gp = GP(POP, problem.function_set, 2, max_len=MAX_LEN, selection="lexicase")
    return _run(gp, problem, mesh)


def scenario_lexicase() -> dict:
    """Per-case errors (the predictions split 4 ways) and lexicase selection."""
    return _lexicase(_mesh((4,), ("pop",)))


def reference_lexicase() -> dict:
    return _lexicase(None)


def _negate_constants(draws, forest, ctx, params):
    """A user's mutation with a draw per row and one shared by its rows: split over the devices."""
    u, shared = draws  # [n], [1]
    hit = (forest.opcode == CONST) & (u[:, None] < shared[0])
    return forest.replace(value=jnp.where(hit, -forest.value, forest.value)), jnp.any(hit, -1)


def _scale_constants(draws, forest, ctx, params):
    """A user's mutation whose one draw is not laid out by rows (``[n + 1]``: a shared factor,
    then one per row): computed whole on every device."""
    (u,) = draws
    hit = (forest.opcode == CONST) & (u[1:, None] < 0.5)
    return forest.replace(value=jnp.where(hit, forest.value * (0.5 + u[0]), forest.value)), jnp.any(hit, -1)


def variation_gp() -> GP:
    """A GP whose variation exercises every case of the per-device split (``variation`` scenario):
    elites, leaf-biased crossover, NSGA-II survival, every built-in mutation and two of a user's
    (one split, one computed whole), blocks whose counts do not divide by 4."""
    registry = default_registry()
    for name, shapes, apply in (
        ("negate", lambda n, ctx: ((n,), (1,)), _negate_constants),
        ("scale", lambda n, ctx: ((n + 1,),), _scale_constants),
    ):
        registry.register(GPOperator(name, "mutation", shapes, apply, grows=False))
    probs = {**{name: 1.0 for name in MUTATIONS}, "negate": 2.0, "scale": 1.0}
    return GP(
        POP, FunctionSet(FUNCTIONS), 2, max_len=MAX_LEN, elite_rate=0.1, crossover="leaf_biased",
        survival="nsga2", operators=registry, mutation_probs=probs, mutation_rate=0.9,
    )  # fmt: skip


COLLECTIVES = re.compile(
    r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)(?:-start)?\("
)


def collectives(hlo: str) -> dict[str, int]:
    """``{op: count}`` of the collectives in an optimized HLO text."""
    counts: dict[str, int] = {}
    for op in COLLECTIVES.findall(hlo):
        counts[op] = counts.get(op, 0) + 1
    return counts


def _run_counting_collectives(gp: GP, problem: SymbolicRegression, mesh: Any) -> dict:
    """:func:`_run`, with ``"collectives"``: those of the run's chunk of generations (the largest
    program it compiled)."""
    compiled = []
    compile_lowered = jax.stages.Lowered.compile

    def keep(self, *args, **kwargs):  # the run's compiled programs, to read their collectives
        out = compile_lowered(self, *args, **kwargs)
        compiled.append(out)
        return out

    jax.stages.Lowered.compile = keep
    try:
        out = _run(gp, problem, mesh)
    finally:
        jax.stages.Lowered.compile = compile_lowered
    out["collectives"] = collectives(max((c.as_text() for c in compiled), key=len))
    return out


def _variation(mesh: Any) -> dict:
    """The ``variation`` scenario's run on ``mesh`` (``None``: one device, no mesh)."""
    if mesh is None:
        return _run(variation_gp(), _problem(), mesh)
    out = _run_counting_collectives(variation_gp(), _problem(), mesh)
    plan = variation_gp().on_mesh(mesh)._variation_plan
    out["plan"] = {
        "local_children": plan.local_children,
        "whole": [b.block.name for b in plan.blocks if b.local is b.block],
    }
    return out


def scenario_variation() -> dict:
    """The per-device variation (each device makes its share of the children) on 4 devices, and
    the collectives of the run's compiled chunk of generations."""
    return _variation(_mesh((4,), ("pop",)))


def reference_variation() -> dict:
    return _variation(None)


METRIC_CASES = (("mse", True), ("mse", False), ("r2", True), ("rmse", False))


def _data_axis(mesh: Any) -> dict:
    X, y = _data()
    labels = (y > np.median(y)).astype(np.float32)
    fs = FunctionSet(FUNCTIONS)
    forest = GP(POP, fs, 2, max_len=MAX_LEN).init(jax.random.key(5)).forest
    layout = None if mesh is None else ForestMesh.of(mesh, "pop", data_axis="data")
    problem = _problem(constant_optimization=ConstantOptimizer(steps=4, fraction=0.5))
    placed = problem if mesh is None else problem.on_mesh(mesh, "pop", data_axis="data")

    def score(f, targets, metric, scaled=False):
        if layout is None:
            return fitness(f, X, targets, fs, metric, linear_scaling=scaled)
        return fitness_on_mesh(layout, f, X, targets, fs, metric, linear_scaling=scaled)

    def everything(f, key):  # one program: one compilation
        out = {f"{m}/{'scaled' if s else 'raw'}": score(f, y, m, s) for m, s in METRIC_CASES}
        out.update({m: score(f, labels, m) for m in ("accuracy", "cross_entropy")})
        out["predictions"] = evaluate(f, X, fs) if layout is None else evaluate_on_mesh(layout, f, X, fs)
        out["tuned_fitness"] = placed.evaluate(key, f).fitness
        out["odd_population"] = score(f[: POP - 1], y, "mse", True)  # 23 trees: padded to split
        return out

    out = _listed(jax.jit(everything)(forest, jax.random.key(2)))
    if mesh is not None:
        out["errors"] = _errors(mesh)
    return out


def _errors(mesh: Any) -> dict[str, str]:
    """The messages of what a mesh cannot split (every device count here is 4 in all)."""
    messages = {}
    attempts = {
        "gp_population": lambda: GP(22, FunctionSet(FUNCTIONS), 2).on_mesh(jax.make_mesh((4,), ("pop",))),
        "few_rows": lambda: (
            _problem()
            .__class__(*(a[:1] for a in _data()), FunctionSet(FUNCTIONS))
            .on_mesh(mesh, "pop", data_axis="data")
        ),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            messages[name] = ""
        except ArgumentError as e:
            messages[name] = str(e)
    return messages


def scenario_data() -> dict:
    """Trees over ``pop`` and rows over ``data`` on a 2 x 2 mesh."""
    return _data_axis(_mesh((2, 2), ("pop", "data")))


def reference_data() -> dict:
    return _data_axis(None)


def _leaves(tree: Any, path: str = "") -> dict[str, np.ndarray]:
    if isinstance(tree, dict):
        return {p: v for k, sub in tree.items() for p, v in _leaves(sub, f"{path}/{k}").items()}
    return {path: np.asarray(tree)}


def check(name: str, result: dict, reference: dict) -> None:
    """Raise ``AssertionError`` unless scenario ``name``'s ``result`` agrees with ``reference``."""
    got, want = _leaves(result), _leaves(reference)
    if name in ("pop", "lexicase", "variation"):
        for key, value in want.items():
            if key == "/history/generation_mean":
                # the run loop's mean over the fitness it lays out population-sharded: XLA adds the
                # devices' partial sums, another float32 summation order than one device's
                np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=f"{name}: {key}")
            else:
                np.testing.assert_array_equal(got[key], value, err_msg=f"{name}: {key}")
        if name == "pop":  # every kernel ran on this device's quarter of the trees it evaluates
            calls = result["custom_call_operands"]
            expected = {"evotensor_gp_moments": POP // 4, "evotensor_gp_normal_equations": -(-POP // 4 // 4)}
            assert {c[0] for c in calls} == set(expected), calls
            assert all(c[1:] == [expected[c[0]], MAX_LEN] for c in calls), calls
        return
    assert name == "data", name
    for key, value in want.items():
        tol = TOLERANCES["data_tuned" if key.startswith("/tuned") else "data"]
        np.testing.assert_allclose(got[key], value, err_msg=f"data: {key}", **tol)
