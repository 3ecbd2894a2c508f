"""The house rules of docs/design.md, checked on the source with ``ast`` (nothing is imported).

* Every import inside ``src/evotensor`` (module level or in a function) is an edge of the import
  graph; the graph has no cycle.
* Families (``es``, ``gp``, ``qd``) import ``core``, ``tree``, ``io``, ``problems`` and ``tasks``,
  and no sibling family, except that ``qd`` may use ``es``'s public API (its CMA emitters reuse
  the strategy) and the ``tasks`` modules of ``gp`` and ``neat`` may use ``qd``'s (their MAP-Elites
  tasks). ``problems`` knows nothing of families; ``core`` only ``io`` (the run loop writes
  the run directory); ``tree`` only ``core``.
* No module imports a leading-underscore name from another module, except from a private module
  (``_*.py``) of its own package.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
PKG = os.path.join(SRC, "evotensor")

# what each part may import from (besides itself)
ALLOWED = {
    "core": {"io"},  # the run loop writes the run directory (io builds on core's types)
    "tree": {"core"},
    "io": {"core", "tree"},
    "problems": {"core", "tree"},
    "es": {"core", "tree", "problems", "tasks", "io", "distributed"},  # Ray: the distributed-gradient ES
    "gp": {"core", "tree", "problems", "tasks", "io"},
    "neat": {"core", "tree", "problems", "tasks", "io"},
    "qd": {"core", "tree", "problems", "tasks", "io", "es"},
    "tasks": {"core", "__init__"},  # the registry walks the package's folders
    "cli": {"core", "tree", "io", "tasks", "problems", "__init__", "distributed"},
    "__init__": {"core"},
    "distributed": {"core", "io"},  # multi-process jobs and Ray: built on the run loop and run directory
}
# what a family's tasks module may import besides its family's ALLOWED (its MAP-Elites task)
TASKS_ALLOWED = {"gp": {"qd"}, "neat": {"qd"}}


def _modules() -> dict[str, str]:
    """``{dotted module name: path}`` for every ``.py`` file and compiled extension of the package."""
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            stem = f.split(".")[0]
            if f.endswith(".py") or (f.endswith((".so", ".pyd")) and stem.startswith("_")):
                rel = os.path.relpath(os.path.join(root, stem), SRC).replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(root, f)
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES.get(name, "").endswith("__init__.py")


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _in_type_checking(tree: ast.AST) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:`` (not run, so not edges)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    lines.add(sub.lineno)
    return lines


def _imports():
    """``(importer, imported module, imported name or None, lineno)`` for every evotensor import."""
    found = []
    for name, path in MODULES.items():
        if not path.endswith(".py"):
            continue  # a compiled extension imports nothing of ours
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        skip = _in_type_checking(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("evotensor"):
                        found.append((name, alias.name, None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, node)
                if not target.startswith("evotensor"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in MODULES:  # `from pkg import module`
                        found.append((name, sub, None, node.lineno))
                    else:
                        found.append((name, target, alias.name, node.lineno))
    return found


IMPORTS = _imports()


def _part(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_the_import_graph_has_no_cycle():
    graph = defaultdict(set)
    for importer, module, _, _ in IMPORTS:
        if module in MODULES and module != importer:
            graph[importer].add(module)
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(MODULES):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles[:10])


def test_parts_import_only_what_the_design_allows():
    bad = []
    for importer, module, _, line in IMPORTS:
        src, dst = _part(importer), _part(module)
        allowed = ALLOWED.get(src, set())
        if importer == f"evotensor.{src}.tasks":
            allowed = allowed | TASKS_ALLOWED.get(src, set())
        if src != dst and dst not in allowed:
            bad.append(f"{importer}:{line} imports {module} ({src} may not import {dst})")
    assert not bad, "\n".join(bad)


def test_no_private_name_is_imported_from_another_module():
    bad = []
    for importer, module, name, line in IMPORTS:
        private_module = module.rsplit(".", 1)[-1].startswith("_") and not module.endswith("__init__")
        if private_module and module.rsplit(".", 1)[0] == importer.rsplit(".", 1)[0]:
            continue  # a package's own private module
        if name is not None and name.startswith("_") and not name.startswith("__"):
            bad.append(f"{importer}:{line} imports {name} from {module}")
        elif private_module and name is None:
            bad.append(f"{importer}:{line} imports the private module {module}")
    assert not bad, "\n".join(bad)
