"""The machinery of :mod:`evotensor.es` moved to :mod:`evotensor.es.core` (a few helpers to
:mod:`evotensor.core`): every old import path still resolves, for one release, to the same object with
a ``DeprecationWarning`` naming the new path; names an algorithm module still uses itself, and the
package attributes ``evotensor.es.<Name>``, resolve without a warning."""

from __future__ import annotations

import importlib
import warnings

import pytest

import evotensor.es

# (old module, old name, new module, new name)
MOVED = [
    ("evotensor.es.base", "VectorStrategy", "evotensor.es.core.base", "VectorStrategy"),
    ("evotensor.es.base", "keep_state_if_all_invalid", "evotensor.es.core.base", "keep_state_if_all_invalid"),
    ("evotensor.es.base", "check_positive", "evotensor.core.checks", "check_positive"),
    ("evotensor.es.gradient_es", "GradientES", "evotensor.es.core.gradient_es", "GradientES"),
    ("evotensor.es.gradient_es", "tell_by_statistics", "evotensor.es.core.gradient_es", "tell_by_statistics"),
    ("evotensor.es.mean_sigma", "MeanSigmaStrategy", "evotensor.es.core.mean_sigma", "MeanSigmaStrategy"),
    (
        "evotensor.es.mean_sigma",
        "default_population_size",
        "evotensor.es.core.base",
        "default_population_size",
    ),
    ("evotensor.es.ga_base", "ElitistGA", "evotensor.es.core.ga_base", "ElitistGA"),
    ("evotensor.es.ga_base", "initial_population", "evotensor.es.core.base", "initial_population"),
    (
        "evotensor.es.diagonal_gaussian",
        "DiagonalGaussianStrategy",
        "evotensor.es.core.diagonal_gaussian",
        "DiagonalGaussianStrategy",
    ),
    ("evotensor.es.optimizers", "clipup", "evotensor.es.core.optimizers", "clipup"),
    ("evotensor.es.termination", "Termination", "evotensor.es.core.termination", "Termination"),
    ("evotensor.es.sharding", "sharded", "evotensor.es.core.sharding", "sharded"),
    ("evotensor.es.restarts", "RestartCMAES", "evotensor.es.core.restarts", "RestartCMAES"),
    ("evotensor.es.restarts", "IPOPCMAES", "evotensor.es.ipop_cma_es", "IPOPCMAES"),
    ("evotensor.es.restarts", "BIPOPCMAES", "evotensor.es.bipop_cma_es", "BIPOPCMAES"),
    ("evotensor.es.cma_es", "CMAESState", "evotensor.es.core.cma", "CMAESState"),
    ("evotensor.es.cma_es", "decompose", "evotensor.es.core.lazy_eigen", "decompose"),
    ("evotensor.es.cma_es", "lazy_eigen_update", "evotensor.es.core.lazy_eigen", "lazy_eigen_update"),
    ("evotensor.es.open_es", "chunked_normal", "evotensor.es.core.sampling", "chunked_normal"),
    (
        "evotensor.es.open_es",
        "antithetic_perturbations",
        "evotensor.es.core.sampling",
        "antithetic_perturbations",
    ),
    ("evotensor.es.xnes", "nes_weights", "evotensor.core.fitness_shaping", "nes_weights"),
    ("evotensor.es.xnes", "resolve_population_size", "evotensor.es.core.base", "population_size_or_default"),
    ("evotensor.es.persistent_es", "paired_sum", "evotensor.es.core.online_es", "paired_sum"),
]

# names an algorithm module uses itself: still its attributes, no warning
STILL_THERE = [
    ("evotensor.es.cma_es", "cma_update"),
    ("evotensor.es.cma_es", "sample"),
    ("evotensor.es.open_es", "mirrored_pair_sum"),
    ("evotensor.es.persistent_es", "OnlineES"),
    ("evotensor.es.noise_reuse_es", "OnlineESState"),
    ("evotensor.es.ma_es", "expected_norm"),
]


@pytest.mark.parametrize(
    "old_module, old_name, new_module, new_name", MOVED, ids=[f"{m}.{n}" for m, n, *_ in MOVED]
)
def test_old_path_warns_and_resolves_to_the_moved_object(old_module, old_name, new_module, new_name):
    old = importlib.import_module(old_module)
    with pytest.warns(DeprecationWarning, match=f"{new_module}.{new_name}"):
        value = getattr(old, old_name)
    assert value is getattr(importlib.import_module(new_module), new_name)


@pytest.mark.parametrize("module, name", STILL_THERE)
def test_names_an_algorithm_uses_resolve_without_warning(module, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert getattr(importlib.import_module(module), name) is not None


def test_package_attributes_do_not_warn_and_dead_code_is_gone():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in evotensor.es.__all__:
            assert getattr(evotensor.es, name).__name__ == name
    assert not hasattr(evotensor.es, "available")
    with pytest.raises(AttributeError, match="paired_gradient"):
        importlib.import_module("evotensor.es.persistent_es").paired_gradient  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        importlib.import_module("evotensor.es.base").no_such_name  # noqa: B018


def test_core_imports_no_algorithm():
    """The machinery never imports an algorithm module (only ``sharded_open_es`` does, when called)."""
    import ast
    from pathlib import Path

    core = Path(evotensor.es.__file__).parent / "core"
    algorithms = {p.stem for p in core.parent.glob("*.py")} - {"__init__", "_moved"}
    for path in core.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.col_offset == 0 and node.module:
                parts = node.module.split(".")
                assert not (
                    parts[:2] == ["evotensor", "es"] and len(parts) == 3 and parts[2] in algorithms
                ), (
                    path.name,
                    node.module,
                )
