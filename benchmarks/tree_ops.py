"""Tree container benchmarks: evotensor.tree vs DI-treetensor vs Tianshou Batch vs dict pytrees.

Workloads are treevalue's published ones (treevalue README, "Speed Performance"; TreeTensor paper
Table 4):

* get / set on ``{a: randn(2,3), x: {c: randn(3,4)}}``
* init (construction from a dict): ``{a: 1, b: 2, x: {c: 3, d: 4}}`` and the tensor tree above
* deepcopy of ``{obs: (4,84,84), action: (1,), reward: (1,)}``
* stack and cat of N copies of the get/set tree (N = 2 .. 256)
* split of ``{obs: (n,4,84,84), action: (n,1), reward: (n,1)}`` into n size-1 pieces
* indexing every leaf of the get/set tree: ``t[0]``, ``t[:1]``, ``t[int_array]`` (not one of
  treevalue's published workloads; added for ``evotensor.tree.index``)
* pytree overhead against plain dicts with ``jax.tree_util`` on ``{a: 1, b: 2, x: {c: 3, d: 4}}``:
  flatten, unflatten, ``jax.tree.map``; and a jitted ``t * 2 + 1`` (per-call time, Tree vs dict)

evotensor.tree is measured with NumPy, JAX and (if installed) PyTorch leaves; DI-treetensor and
Batch (both optional, detected at import) with PyTorch tensors, as in treevalue's own benchmark.
Each figure is the best of several repeats of a timed loop (``timeit``), per call. By default the
loops are timed in CPU time of this process (``time.process_time``): on a shared, loaded machine
wall-clock time mostly measures how long the process waited for a core. ``--wall`` times wall-clock
instead. Comparisons that matter (Tree vs dict, evotensor vs DI-treetensor) are also timed in
alternating short rounds; their ratio column is the median of the per-round ratios.

Usage::

    python benchmarks/tree_ops.py            # full run (a few minutes on 2 cores)
    python benchmarks/tree_ops.py --quick    # fewer sizes, shorter timing loops
    python benchmarks/tree_ops.py --pytree   # only the paired tables (Tree vs dict, vs DI-treetensor)
    python benchmarks/tree_ops.py --joins    # only stack/cat/split, evotensor[jax] vs DI-treetensor, paired
    python benchmarks/tree_ops.py --index    # only indexing, evotensor[jax] vs DI-treetensor, paired
    EVOTENSOR_NO_SPEEDUPS=1 python benchmarks/tree_ops.py --pytree   # Tree without its compiled core

The header line says whether ``evotensor.tree``'s optional compiled core was in use (``SPEEDUPS``);
with ``PYTHONPATH=src`` it must have been built in place (``pip install -e .`` or
``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import time
import timeit
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import evotensor.tree as et
from evotensor.tree import Tree

try:
    import torch

    torch.set_num_threads(1)  # thread pools fight over a small shared machine; every library gets 1
except ImportError:
    torch = None
try:
    import treetensor.torch as ttorch
    import treevalue
except ImportError:
    ttorch = treevalue = None
try:
    from tianshou.data import Batch
except ImportError:
    Batch = None


TIMER = time.process_time  # replaced by time.perf_counter with --wall


def per_call(fn: Callable[[], object], min_time: float, repeat: int) -> float:
    """Best-of-``repeat`` seconds per call, each repeat running for about ``min_time``."""
    timer = timeit.Timer(fn, timer=TIMER)
    number = 1
    while True:
        t = timer.timeit(number)
        if t >= min_time / 5 or number >= 1 << 22:
            break
        number *= 4
    number = max(1, int(number * (min_time / max(t, 1e-9))))
    return min(timer.repeat(repeat=repeat, number=number)) / number


def fmt(seconds: float | None, ratio: bool = False) -> str:
    if seconds is None:
        return "-"
    if ratio:
        return f"{seconds:.2f}x"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms"


class Table:
    def __init__(self, columns: list[str]):
        self.columns = columns
        self.rows: list[tuple[str, dict[str, float]]] = []

    def add(self, name: str, results: dict[str, float]) -> None:
        self.rows.append((name, results))
        cells = " | ".join(f"{c}={fmt(results.get(c), '/' in c)}" for c in self.columns if c in results)
        print(f"  {name}: {cells}", flush=True)

    def markdown(self) -> str:
        head = "| op | " + " | ".join(self.columns) + " |"
        sep = "|---|" + "---:|" * len(self.columns)
        lines = [head, sep]
        for name, res in self.rows:
            lines.append(f"| {name} | " + " | ".join(fmt(res.get(c), "/" in c) for c in self.columns) + " |")
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and shorter timing loops")
    parser.add_argument("--wall", action="store_true", help="time wall-clock instead of process CPU time")
    parser.add_argument("--pytree", action="store_true", help="only the paired tables")
    parser.add_argument(
        "--joins", action="store_true", help="only stack/cat/split with JAX leaves vs DI-treetensor, paired"
    )
    parser.add_argument(
        "--index", action="store_true", help="only indexing with JAX leaves vs DI-treetensor, paired"
    )
    args = parser.parse_args()
    global TIMER
    if args.wall:
        TIMER = time.perf_counter
    min_time, repeat = (0.05, 3) if args.quick else (0.2, 5)
    counts = [2, 16, 256] if args.quick else [2, 8, 32, 128, 256]
    split_ns = [2, 16] if args.quick else [2, 16, 64]

    def m(fn: Callable[[], object]) -> float:
        return per_call(fn, min_time, repeat)

    backends: dict[str, Callable[[np.ndarray], object]] = {
        "evotensor[numpy]": lambda a: a,
        "evotensor[jax]": lambda a: jnp.asarray(a),
    }
    if torch is not None:
        backends["evotensor[torch]"] = lambda a: torch.as_tensor(a)
    columns = list(backends)
    if ttorch is not None:
        columns.append("DI-treetensor[torch]")
    if Batch is not None:
        columns.append("Batch[torch]" if torch is not None else "Batch[numpy]")
    batch_col = columns[-1] if Batch is not None else None
    to_batch_leaf = (lambda a: torch.as_tensor(a)) if torch is not None else (lambda a: a)
    rng = np.random.default_rng(0)

    print(
        f"evotensor.tree benchmarks — {datetime.date.today()} — {platform.platform()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, jax {jax.__version__}, "
        f"numpy {np.__version__}"
        + (f", torch {torch.__version__}" if torch is not None else "")
        + (f", treevalue {treevalue.__version__}" if treevalue is not None else "")
        + f"; evotensor.tree compiled core (SPEEDUPS): {getattr(et, 'SPEEDUPS', 'absent')}"
        + f"; timer: {'wall clock' if args.wall else 'process CPU time'}",
        flush=True,
    )
    if args.joins:  # the small counts are where the per-call overheads show: 4 is added here
        joins_table(min_time, sorted({*counts, 4}), split_ns)
        return
    if args.index:
        index_table(min_time)
        return
    if not args.pytree:
        container_tables(args, m, backends, columns, batch_col, to_batch_leaf, rng, counts, split_ns)
    pytree_tables(min_time)


def joins_table(min_time: float, counts: list[int], split_ns: list[int]) -> None:
    """stack / cat / split with JAX leaves vs DI-treetensor's torch leaves, in alternating rounds.

    The JAX calls are not blocked on (nor are DI-treetensor's), as in the container table: with CPU
    time the XLA work done in the background is counted anyway.
    """
    if ttorch is None:
        print("DI-treetensor is not installed: no paired join table")
        return
    names = ("evotensor[jax]", "DI-treetensor[torch]")
    table = Table([*names, "evotensor[jax]/DI-treetensor[torch]"])
    small = small_tree(np.random.default_rng(0))
    for op in ("stack", "cat"):
        fe = et.stack if op == "stack" else et.concatenate
        ft = ttorch.stack if op == "stack" else ttorch.cat
        for n in counts:
            te = [Tree(conv(small, jnp.asarray)) for _ in range(n)]
            tt = [ttorch.Tensor(conv(small, torch.as_tensor)) for _ in range(n)]
            jax.block_until_ready(fe(te))
            table.add(
                f"{op} {n}",
                _paired(lambda fe=fe, te=te: fe(te), lambda ft=ft, tt=tt: ft(tt), names, min_time),
            )
    rng = np.random.default_rng(1)
    for n in split_ns:
        data = {
            "obs": rng.standard_normal((n, 4, 84, 84)).astype(np.float32),
            "action": rng.integers(0, 6, (n, 1)),
            "reward": rng.random((n, 1)).astype(np.float32),
        }
        te = Tree(conv(data, jnp.asarray))
        tt = ttorch.Tensor(conv(data, torch.as_tensor))
        jax.block_until_ready(et.split(te, n))
        table.add(
            f"split {n} -> size 1",
            _paired(lambda te=te, n=n: et.split(te, n), lambda tt=tt: ttorch.split(tt, 1), names, min_time),
        )
    print("\n" + table.markdown() + "\n", flush=True)


INDEX_OPS = ("t[0]", "t[:1]", "t[int array]", "index(t, 1, axis=1)")


def _index_fns(t: object, make_array: Callable[[list[int]], object], index_fn: Callable | None) -> list:
    """The indexing workloads of ``INDEX_OPS`` on tree ``t`` (``index_fn(t, i, axis)`` if given)."""
    arr = make_array([1, 0])
    fns = [lambda: t[0], lambda: t[:1], lambda: t[arr]]
    fns.append((lambda: index_fn(t, 1, 1)) if index_fn is not None else (lambda: t[:, 1]))
    return fns


def index_table(min_time: float) -> None:
    """Indexing every leaf: evotensor[jax] vs DI-treetensor's torch leaves, in alternating rounds.

    The JAX results are not blocked on (nor are DI-treetensor's); with CPU time the XLA work done in
    the background is counted anyway. DI-treetensor has no ``index(t, i, axis)``: ``t[:, 1]`` there.
    """
    if ttorch is None:
        print("DI-treetensor is not installed: no paired index table")
        return
    names = ("evotensor[jax]", "DI-treetensor[torch]")
    table = Table([*names, "evotensor[jax]/DI-treetensor[torch]"])
    small = small_tree(np.random.default_rng(0))
    te = Tree(conv(small, jnp.asarray))
    tt = ttorch.Tensor(conv(small, torch.as_tensor))
    fes = _index_fns(te, lambda v: np.array(v), et.index)
    fts = _index_fns(tt, lambda v: torch.tensor(v), None)
    for name, fe, ft in zip(INDEX_OPS, fes, fts):
        jax.block_until_ready(fe())
        table.add(name, _paired(fe, ft, names, min_time))
    # a wider tree: 16 subtrees of 2 leaves (one compiled call vs 32 torch calls)
    rng = np.random.default_rng(2)
    wide = {
        f"k{i:02d}": {"w": rng.standard_normal((8, 4)), "b": rng.standard_normal((8, 2))} for i in range(16)
    }
    te = Tree(conv(wide, jnp.asarray))
    tt = ttorch.Tensor(conv(wide, torch.as_tensor))
    fes = _index_fns(te, lambda v: np.array(v), et.index)
    fts = _index_fns(tt, lambda v: torch.tensor(v), None)
    for name, fe, ft in zip(INDEX_OPS, fes, fts):
        jax.block_until_ready(fe())
        table.add(f"{name}, 17 nodes / 32 leaves", _paired(fe, ft, names, min_time))
    print("\n" + table.markdown() + "\n", flush=True)


def container_tables(args, m, backends, columns, batch_col, to_batch_leaf, rng, counts, split_ns) -> None:
    table = Table(columns)

    small = small_tree(rng)
    # ---- get / set / init --------------------------------------------------------------------
    res_get1, res_get, res_set, res_init_t, res_init_s = {}, {}, {}, {}, {}
    for name, leaf in backends.items():
        d = conv(small, leaf)
        t = Tree(d)
        new = leaf(rng.standard_normal((2, 3)).astype(np.float32))
        res_get1[name] = m(lambda t=t: t.a)
        res_get[name] = m(lambda t=t: t.x.c)
        res_set[name] = m(lambda t=t, v=new: setattr(t, "a", v))
        res_init_t[name] = m(lambda d=d: Tree(d))
    res_init_s["evotensor[numpy]"] = m(lambda: Tree({"a": 1, "b": 2, "x": {"c": 3, "d": 4}}))
    if ttorch is not None:
        d = conv(small, torch.as_tensor)
        t = ttorch.Tensor(d)
        new = torch.randn(2, 3)
        res_get1["DI-treetensor[torch]"] = m(lambda: t.a)
        res_get["DI-treetensor[torch]"] = m(lambda: t.x.c)
        res_set["DI-treetensor[torch]"] = m(lambda: setattr(t, "a", new))
        res_init_t["DI-treetensor[torch]"] = m(lambda: ttorch.Tensor(d))
        res_init_s["DI-treetensor[torch]"] = m(
            lambda: treevalue.FastTreeValue({"a": 1, "b": 2, "x": {"c": 3, "d": 4}})
        )
    if Batch is not None:
        d = conv(small, to_batch_leaf)
        b = Batch(d)
        new = to_batch_leaf(rng.standard_normal((2, 3)).astype(np.float32))
        res_get1[batch_col] = m(lambda: b.a)
        res_get[batch_col] = m(lambda: b.x.c)
        res_set[batch_col] = m(lambda: setattr(b, "a", new))
        res_init_t[batch_col] = m(lambda: Batch(d))
        res_init_s[batch_col] = m(lambda: Batch({"a": 1, "b": 2, "x": {"c": 3, "d": 4}}))
    table.add("get `t.a`", res_get1)
    table.add("get `t.x.c`", res_get)
    table.add("set `t.a = v`", res_set)
    table.add("init from dict of arrays", res_init_t)
    table.add("init from dict of ints", res_init_s)

    # ---- deepcopy ---------------------------------------------------------------------------
    big = {
        "obs": rng.standard_normal((4, 84, 84)).astype(np.float32),
        "action": rng.integers(0, 6, (1,)),
        "reward": rng.random(1).astype(np.float32),
    }
    res = {}
    for name, leaf in backends.items():
        t = Tree(conv(big, leaf))
        res[name] = m(lambda t=t: copy.deepcopy(t))
    if ttorch is not None:
        t = ttorch.Tensor(conv(big, torch.as_tensor))
        res["DI-treetensor[torch]"] = m(lambda: copy.deepcopy(t))
    if Batch is not None:
        b = Batch(conv(big, to_batch_leaf))
        res[batch_col] = m(lambda: copy.deepcopy(b))
    table.add("deepcopy obs(4,84,84)", res)

    # ---- stack / cat ---------------------------------------------------------------------------
    for op in ("stack", "cat"):
        for n in counts:
            res = {}
            for name, leaf in backends.items():
                trees = [Tree(conv(small, leaf)) for _ in range(n)]
                fn = et.stack if op == "stack" else et.concatenate
                res[name] = m(lambda trees=trees, fn=fn: fn(trees))
            if ttorch is not None:
                trees = [ttorch.Tensor(conv(small, torch.as_tensor)) for _ in range(n)]
                fn = ttorch.stack if op == "stack" else ttorch.cat
                res["DI-treetensor[torch]"] = m(lambda trees=trees, fn=fn: fn(trees))
            if Batch is not None:
                bs = [Batch(conv(small, to_batch_leaf)) for _ in range(n)]
                fn = Batch.stack if op == "stack" else Batch.cat
                res[batch_col] = m(lambda bs=bs, fn=fn: fn(bs))
            table.add(f"{op} {n}", res)

    # ---- split into size-1 pieces --------------------------------------------------------------
    for n in split_ns:
        data = {
            "obs": rng.standard_normal((n, 4, 84, 84)).astype(np.float32),
            "action": rng.integers(0, 6, (n, 1)),
            "reward": rng.random((n, 1)).astype(np.float32),
        }
        res = {}
        for name, leaf in backends.items():
            t = Tree(conv(data, leaf))
            res[name] = m(lambda t=t, n=n: et.split(t, n))
        if ttorch is not None:
            t = ttorch.Tensor(conv(data, torch.as_tensor))
            res["DI-treetensor[torch]"] = m(lambda t=t: ttorch.split(t, 1))
        if Batch is not None:
            b = Batch(conv(data, to_batch_leaf))
            res[batch_col] = m(lambda b=b: list(b.split(1, shuffle=False, merge_last=True)))
        table.add(f"split {n} -> size 1", res)

    # ---- indexing every leaf ----------------------------------------------------------------------
    rows: list[dict[str, float]] = [{} for _ in INDEX_OPS]
    for name, leaf in backends.items():
        t = Tree(conv(small, leaf))
        make = (lambda v: torch.tensor(v)) if name == "evotensor[torch]" else (lambda v: np.array(v))
        for row, fn in zip(rows, _index_fns(t, make, et.index)):
            row[name] = m(fn)
    if ttorch is not None:
        t = ttorch.Tensor(conv(small, torch.as_tensor))
        for row, fn in zip(rows, _index_fns(t, lambda v: torch.tensor(v), None)):
            row["DI-treetensor[torch]"] = m(fn)
    if Batch is not None:
        b = Batch(conv(small, to_batch_leaf))
        make = (lambda v: torch.tensor(v)) if torch is not None else (lambda v: np.array(v))
        for row, fn in zip(rows[:3], _index_fns(b, make, None)[:3]):  # Batch has no axis-1 indexing
            row[batch_col] = m(fn)
    for op, row in zip(INDEX_OPS, rows):
        table.add(f"index {op}", row)

    print("\n" + table.markdown() + "\n", flush=True)


def small_tree(rng: np.random.Generator) -> dict:
    return {
        "a": rng.standard_normal((2, 3)).astype(np.float32),
        "x": {"c": rng.standard_normal((3, 4)).astype(np.float32)},
    }


def conv(d: dict, leaf: Callable) -> dict:
    return {k: conv(v, leaf) if isinstance(v, dict) else leaf(v) for k, v in d.items()}


def _paired(
    fa: Callable[[], object],
    fb: Callable[[], object],
    names: tuple[str, str],
    min_time: float,
    rounds: int = 9,
) -> dict[str, float]:
    """``fa`` and ``fb`` timed in alternating short rounds (the machine is shared and its load
    drifts): each cell is the best round, ``a/b`` the median of the per-round ratios."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(per_call(fa, min_time / 4, 3))
        tb.append(per_call(fb, min_time / 4, 3))
    ratios = sorted(a / b for a, b in zip(ta, tb))
    a, b = names
    return {a: min(ta), b: min(tb), f"{a}/{b}": ratios[len(ratios) // 2]}


def pytree_tables(min_time: float) -> None:
    tiny = {"a": 1, "b": 2, "x": {"c": 3, "d": 4}}
    t_tiny = Tree(tiny)
    inc = lambda x: x + 1  # noqa: E731

    # ---- evotensor vs DI-treetensor, paired --------------------------------------------------------
    if treevalue is not None and torch is not None:
        names = ("evotensor", "DI-treetensor")
        vtable = Table(["evotensor", "DI-treetensor", "evotensor/DI-treetensor"])
        d = conv(small_tree(np.random.default_rng(0)), torch.as_tensor)
        t, tv = Tree(d), ttorch.Tensor(d)
        new = torch.randn(2, 3)
        fv = treevalue.FastTreeValue(tiny)

        def pair(fa: Callable[[], object], fb: Callable[[], object]) -> dict[str, float]:
            return _paired(fa, fb, names, min_time)

        vtable.add("get `t.a` (torch leaves)", pair(lambda: t.a, lambda: tv.a))
        vtable.add("get `t.x.c` (torch leaves)", pair(lambda: t.x.c, lambda: tv.x.c))
        vtable.add(
            "set `t.a = v` (torch leaves)", pair(lambda: setattr(t, "a", new), lambda: setattr(tv, "a", new))
        )
        vtable.add('get `t["a"]` (torch leaves)', pair(lambda: t["a"], lambda: tv["a"]))
        vtable.add(
            'set `t["a"] = v` (torch leaves)',
            pair(lambda: t.__setitem__("a", new), lambda: tv.__setitem__("a", new)),
        )
        vtable.add("init from dict of ints", pair(lambda: Tree(tiny), lambda: treevalue.FastTreeValue(tiny)))
        vtable.add(
            "map (`evotensor.tree.map` / `treevalue.mapping`)",
            pair(lambda: et.map(t_tiny, inc), lambda: treevalue.mapping(fv, inc)),
        )
        vtable.add(
            "flatten (`evotensor.tree.flatten` -> dict / `treevalue.flatten` -> list)",
            pair(lambda: et.flatten(t_tiny), lambda: treevalue.flatten(fv)),
        )
        vtable.add(
            "flatten to a path-keyed dict (treevalue: `dict(treevalue.flatten(t))`)",
            pair(lambda: et.flatten(t_tiny), lambda: dict(treevalue.flatten(fv))),
        )
        print("\n" + vtable.markdown() + "\n", flush=True)

    # ---- pytree overhead: Tree vs dict --------------------------------------------------------------
    names = ("Tree", "dict")
    columns = ["Tree", "dict", "Tree/dict"]
    ptable = Table(columns)

    def paired(fa: Callable[[], object], fb: Callable[[], object]) -> dict[str, float]:
        return _paired(fa, fb, names, min_time)

    tu = jax.tree_util
    leaves_t, def_t = tu.tree_flatten(t_tiny)
    leaves_d, def_d = tu.tree_flatten(tiny)
    ptable.add(
        "jax.tree_util.tree_flatten", paired(lambda: tu.tree_flatten(t_tiny), lambda: tu.tree_flatten(tiny))
    )
    ptable.add(
        "treedef.unflatten", paired(lambda: def_t.unflatten(leaves_t), lambda: def_d.unflatten(leaves_d))
    )
    ptable.add(
        "jax.tree.map(x+1)", paired(lambda: jax.tree.map(inc, t_tiny), lambda: jax.tree.map(inc, tiny))
    )
    big = {f"k{i:02d}": {"w": 1.0, "b": 2.0} for i in range(16)}
    t_big = Tree(big)
    leaves_tb, def_tb = tu.tree_flatten(t_big)
    leaves_db, def_db = tu.tree_flatten(big)
    ptable.add(
        "jax.tree_util.tree_flatten, 17 nodes",
        paired(lambda: tu.tree_flatten(t_big), lambda: tu.tree_flatten(big)),
    )
    ptable.add(
        "treedef.unflatten, 17 nodes",
        paired(lambda: def_tb.unflatten(leaves_tb), lambda: def_db.unflatten(leaves_db)),
    )

    # jitted t * 2 + 1, per call (dispatch + tiny compute + waiting for the result)
    f_tree = jax.jit(lambda t: t * 2 + 1)
    f_dict = jax.jit(lambda d: jax.tree.map(lambda x: x * 2 + 1, d))
    g_tree = jax.jit(lambda t: sum(jnp.sum(x) for x in jax.tree_util.tree_leaves(t)))
    for label, dj in (
        ("2 nodes / 2 leaves", {"a": jnp.ones((2, 3)), "x": {"c": jnp.ones((3, 4))}}),
        (
            "17 nodes / 32 leaves",
            {f"k{i:02d}": {"w": jnp.ones((8,)), "b": jnp.ones((2,))} for i in range(16)},
        ),
    ):
        tj = Tree(dj)
        jax.block_until_ready((f_tree(tj), f_dict(dj), g_tree(tj), g_tree(dj)))
        ptable.add(
            f"jit(t * 2 + 1) per call, {label}",
            paired(
                lambda tj=tj: jax.block_until_ready(f_tree(tj)),
                lambda dj=dj: jax.block_until_ready(f_dict(dj)),
            ),
        )
        ptable.add(
            f"jit(sum of leaves) per call (tree in, array out), {label}",
            paired(
                lambda tj=tj: jax.block_until_ready(g_tree(tj)),
                lambda dj=dj: jax.block_until_ready(g_tree(dj)),
            ),
        )
    # array in, tree out: isolates the unflatten of the result (one Python callback per Tree node)
    x0 = jnp.ones(3)
    for label, n in (("2 nodes", 1), ("17 nodes", 16)):
        if n == 1:
            h_tree = jax.jit(lambda x: Tree(a=x, x=Tree(c=x)))
            h_dict = jax.jit(lambda x: {"a": x, "x": {"c": x}})
        else:
            h_tree = jax.jit(lambda x: Tree({f"k{i:02d}": {"w": x, "b": x} for i in range(16)}))
            h_dict = jax.jit(lambda x: {f"k{i:02d}": {"w": x, "b": x} for i in range(16)})
        jax.block_until_ready((h_tree(x0), h_dict(x0)))
        ptable.add(
            f"jit(array in, tree out) per call, {label}",
            paired(lambda h=h_tree: h(x0), lambda h=h_dict: h(x0)),
        )
    print("\n" + ptable.markdown(), flush=True)


if __name__ == "__main__":
    main()
