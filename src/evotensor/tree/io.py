"""Printing, saving/loading and drawing trees.

* ``repr(t)``: tree art with sorted children, each array leaf as ``Type(shape, dtype)`` (array
  contents are never printed, so printing is cheap), other leaves by a one-line ``repr``; a
  subtree reached twice is printed once, then referred to by its first path. Its code,
  :func:`tree_repr` (which ``Tree.__repr__`` calls), is in the private module
  :mod:`evotensor.tree._core`; this module re-exports it.
* :func:`save` / :func:`load`: one ``.npz`` file whose entries are the leaf paths joined by ``/``
  (``np.load(f)["x/c"]`` works), plus a JSON manifest that restores the leaf kinds (JAX, NumPy,
  PyTorch, Python scalars) and empty subtrees. Other leaves (strings, None, objects) are pickled
  inside the file and need ``load(..., allow_pickle=True)``. Constraints are not saved.
  ``pickle`` round-trips trees too (constraints included when they are picklable).
* :func:`to_dot` (graphviz source text) and :func:`draw` (matplotlib) show the structure.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from typing import Any

import numpy as np

from evotensor.tree import constraints as _c
from evotensor.tree._core import Tree, _leaf_text, from_dict, tree_repr

__all__ = ["draw", "load", "save", "to_dot", "tree_repr"]


# ---- save / load ----------------------------------------------------------------------------

_MANIFEST = "%manifest"  # escaped leaf names never start with '%m'


def _escape(key: str) -> str:
    return key.replace("%", "%25").replace("/", "%2F")


def _kind(v: Any) -> str:
    mod = type(v).__module__
    if mod.startswith("torch") and hasattr(v, "detach"):
        return "torch"
    if mod.startswith("jax") or mod.startswith("jaxlib"):
        return "jax"
    if isinstance(v, np.ndarray):
        return "numpy"
    if isinstance(v, np.generic):
        return "numpy_scalar"
    if isinstance(v, bool | int | float | complex) and type(v) in (bool, int, float, complex):
        return type(v).__name__
    return "object"


def _entries(node: Tree, path: tuple[str, ...], out: list) -> None:
    for k, v in node.__dict__.items():
        p = (*path, k)
        if isinstance(v, Tree):
            if v.__dict__:
                _entries(v, p, out)
            else:
                out.append((p, "tree", None))
        else:
            out.append((p, _kind(v), v))


def save(t: Tree, file: str | os.PathLike | Any) -> None:
    """Save ``t`` to one ``.npz`` file (a path or a binary file object).

    Array leaves are stored as arrays under their ``/``-joined paths; JAX/NumPy/PyTorch kinds and
    Python scalars are restored by :func:`load`; other leaves are pickled (loading them needs
    ``allow_pickle=True``).
    """
    if not isinstance(t, Tree):
        raise TypeError(f"save: t must be a Tree, got {type(t).__name__}")
    entries: list = []
    _entries(t, (), entries)
    arrays: dict[str, np.ndarray] = {}
    manifest = []
    for path, kind, v in entries:
        name = "/".join(_escape(k) for k in path)
        manifest.append({"path": list(path), "kind": kind, "name": name})
        if kind == "tree":
            continue
        if kind == "torch":
            arr = v.detach().cpu().numpy()
        elif kind == "object":
            arr = np.frombuffer(pickle.dumps(v), dtype=np.uint8)
        else:
            arr = np.asarray(v)
        if kind in ("jax", "numpy", "torch") and arr.dtype.kind == "V":  # e.g. bfloat16 via ml_dtypes
            manifest[-1]["dtype"] = _c.dtype_name(v.dtype)
        arrays[name] = arr
    arrays[_MANIFEST] = np.frombuffer(json.dumps({"format": 1, "entries": manifest}).encode(), dtype=np.uint8)
    if isinstance(file, str | os.PathLike):
        with open(file, "wb") as f:
            np.savez(f, **arrays)
    else:
        np.savez(file, **arrays)


def load(file: str | os.PathLike | Any, allow_pickle: bool = False, cls: type[Tree] = Tree) -> Tree:
    """Load a tree written by :func:`save`.

    ``allow_pickle`` must be ``True`` to restore pickled (non-array, non-scalar) leaves: only
    load such files from sources you trust.

    Raises:
        ValueError: the file is damaged (empty, truncated, corrupted) or was not written by
            :func:`save`; the message names the file. ``OSError`` when it cannot be opened.
    """
    try:
        return _load(file, allow_pickle, cls)
    except (EOFError, zipfile.BadZipFile, KeyError, IndexError, TypeError, pickle.UnpicklingError) as err:
        detail = f"{type(err).__name__}: {err}"
    except ValueError as err:
        if str(err).startswith("load: "):  # our own messages name the file or the leaf already
            raise
        # numpy reads any file that is neither .npy nor .npz as a pickle
        detail = "not an .npz archive" if "pickle" in str(err) else f"{type(err).__name__}: {err}"
    name = os.fspath(file) if isinstance(file, str | os.PathLike) else repr(file)
    raise ValueError(f"load: {name} is damaged or was not written by evotensor.tree.save ({detail})")


def _load(file: str | os.PathLike | Any, allow_pickle: bool, cls: type[Tree]) -> Tree:
    data = np.load(file, allow_pickle=False)
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"load: {file!r} is a single .npy array, not a tree written by evotensor.tree.save")
    with data:
        if _MANIFEST not in data.files:
            raise ValueError(f"load: {file!r} was not written by evotensor.tree.save (no manifest)")
        manifest = json.loads(bytes(data[_MANIFEST]).decode())
        flat: dict = {}
        for e in manifest["entries"]:
            path, kind, name = tuple(e["path"]), e["kind"], e["name"]
            if kind == "tree":
                node: dict = {}
                flat[path] = node
                continue
            arr = data[name]
            if "dtype" in e:
                import ml_dtypes  # noqa: F401 - registers bfloat16 & co with numpy

                arr = arr.view(np.dtype(e["dtype"]))
            flat[path] = _restore(kind, arr, path, allow_pickle)
    root: dict = {}
    for path, v in flat.items():
        node = root
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return from_dict(root, cls)


def _restore(kind: str, arr: np.ndarray, path: tuple[str, ...], allow_pickle: bool) -> Any:
    if kind == "numpy":
        return arr
    if kind == "numpy_scalar":
        return arr[()]
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.asarray(arr)
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(arr))
    if kind in ("bool", "int", "float", "complex"):
        return {"bool": bool, "int": int, "float": float, "complex": complex}[kind](arr[()])
    if kind == "object":
        if not allow_pickle:
            raise ValueError(
                f"load: the leaf at {_c.format_path(path)} is a pickled object; pass allow_pickle=True "
                "if you trust the file"
            )
        return pickle.loads(arr.tobytes())
    raise ValueError(f"load: unknown leaf kind {kind!r} at {_c.format_path(path)}")


# ---- drawing --------------------------------------------------------------------------------


def to_dot(t: Tree, name: str = "tree") -> str:
    """Graphviz DOT source of the structure (render with ``dot -Tpng`` or the graphviz package)."""
    if not isinstance(t, Tree):
        raise TypeError(f"to_dot: t must be a Tree, got {type(t).__name__}")
    lines = [f"digraph {json.dumps(name)} {{", "  node [fontname=monospace];"]
    ids: dict[int, str] = {}

    def node_id(obj: Any) -> str:
        return ids.setdefault(id(obj), f"n{len(ids)}")

    def walk(node: Tree) -> None:
        nid = node_id(node)
        lines.append(f"  {nid} [shape=ellipse, label={json.dumps(type(node).__name__)}];")
        for k, v in node.__dict__.items():
            if isinstance(v, Tree):
                seen = id(v) in ids
                cid = node_id(v)
                if not seen:
                    walk(v)
            else:
                cid = f"{nid}_{len(ids)}"
                ids[id((nid, k))] = cid
                lines.append(f"  {cid} [shape=box, label={json.dumps(_leaf_text(v, 40))}];")
            lines.append(f"  {nid} -> {cid} [label={json.dumps(k)}];")

    walk(t)
    lines.append("}")
    return "\n".join(lines)


def draw(t: Tree, ax: Any = None) -> Any:
    """Draw the structure with matplotlib (nodes as circles, leaves as boxes); returns the Axes."""
    import matplotlib.pyplot as plt

    if not isinstance(t, Tree):
        raise TypeError(f"draw: t must be a Tree, got {type(t).__name__}")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    positions: list[tuple[float, int, str, bool]] = []  # x, depth, label, is_leaf
    edges: list[tuple[int, int, str]] = []
    next_x = [0.0]

    def place(node: Tree, depth: int) -> int:
        me = len(positions)
        positions.append((0.0, depth, type(node).__name__, False))
        xs = []
        for k, v in node.__dict__.items():
            if isinstance(v, Tree):
                child = place(v, depth + 1)
            else:
                child = len(positions)
                positions.append((next_x[0], depth + 1, _leaf_text(v, 28), True))
                next_x[0] += 1.0
            edges.append((me, child, k))
            xs.append(positions[child][0])
        x = sum(xs) / len(xs) if xs else next_x[0]
        if not xs:
            next_x[0] += 1.0
        positions[me] = (x, depth, positions[me][2], False)
        return me

    place(t, 0)
    for a, b, label in edges:
        xa, ya = positions[a][0], -positions[a][1]
        xb, yb = positions[b][0], -positions[b][1]
        ax.plot([xa, xb], [ya, yb], color="0.6", zorder=1)
        ax.text((xa + xb) / 2, (ya + yb) / 2, label, fontsize=8, color="tab:blue", ha="center")
    for x, depth, label, is_leaf in positions:
        style = {"boxstyle": "square" if is_leaf else "circle", "fc": "white", "ec": "0.3"}
        ax.text(x, -depth, label, ha="center", va="center", fontsize=7, bbox=style, zorder=2)
    ax.set_axis_off()
    max_depth = max(p[1] for p in positions)
    ax.set_ylim(-max_depth - 0.6, 0.6)
    ax.set_xlim(-0.8, max(next_x[0], 1.0) - 0.2)
    return ax
