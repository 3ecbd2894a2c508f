"""GPConfig's ``function_weights`` and ``variable_weights``: checked, normalized, and obeyed by (or
passed to) every generator of new subtrees (initial trees, subtree mutation, insert mutation)."""

import math

import jax
import numpy as np
import pytest

from evotensor.core.checks import ArgumentError
from evotensor.gp.config import GPConfig
from evotensor.gp.encoding import CONST
from evotensor.gp.functions import FunctionSet
from evotensor.gp.strategy import GP

FS = FunctionSet(("add", "mul", "sin", "cos"))


def test_function_weights_are_normalized_in_function_set_order():
    # a mapping names some functions (the others get 0), a sequence follows FS.names
    assert GPConfig(8, FS, 1, 16, function_weights={"mul": 3.0, "add": 1.0}).function_weights == (
        0.25,
        0.75,
        0.0,
        0.0,
    )
    assert GPConfig(8, FS, 1, 16, function_weights=(2, 2, 0, 4)).function_weights == (0.25, 0.25, 0.0, 0.5)
    assert GPConfig(8, FS, 1, 16).function_weights is None  # uniform, as before


@pytest.mark.parametrize(
    "bad",
    [
        (1, 1, 1),
        (1, -1, 1, 1),
        (0, 0, 0, 0),
        (1, math.nan, 1, 1),
        (1, math.inf, 1, 1),
        {"tan": 1.0},
        "add",
        3.0,
    ],
)
def test_bad_function_weights_are_refused_naming_the_argument(bad):
    with pytest.raises(ArgumentError, match="function_weights"):
        GPConfig(8, FS, 1, 16, function_weights=bad)


def _counts(forest) -> dict[str, int]:
    op = np.asarray(forest.opcode)
    return {f: int((op == FS.opcode(f)).sum()) for f in FS.names} | {"const": int((op == CONST).sum())}


def test_every_generator_of_new_subtrees_draws_functions_by_the_weights():
    gp = GP(16, FS, 1, 16, function_weights={"add": 3.0, "mul": 1.0}, const_prob=0.0)
    generators = {"init": gp.initializer, "subtree": gp.mutation_generator, "insert": gp.insert_generator}
    for name, generate in generators.items():
        counts = _counts(generate(jax.random.key(0), 2000))
        assert counts["sin"] == counts["cos"] == counts["const"] == 0, (name, counts)
        assert 2.6 < counts["add"] / counts["mul"] < 3.4, (name, counts)  # ~3 (thousands of draws)


def test_variable_weights_are_checked_normalized_and_reach_every_generator():
    c = GPConfig(8, FS, 3, 16, variable_weights={"x2": 1.0, "x0": 3.0})
    assert c.variable_weights == (0.75, 0.0, 0.25)
    assert GPConfig(8, FS, 2, 16, variable_weights=(1, 3)).variable_weights == (0.25, 0.75)
    assert GPConfig(8, FS, 2, 16).variable_weights is None  # uniform, as before
    gp = GP(8, FS, 2, 16, variable_weights=(1, 3))
    for gen in (gp.initializer, gp.mutation_generator, gp.insert_generator):
        assert gen.variable_weights == (0.25, 0.75)
    for bad in ((1.0,), (0.0, 0.0), (1.0, -1.0), {"x5": 1.0}, (1.0, math.nan)):
        with pytest.raises(ArgumentError, match="variable_weights"):
            GPConfig(8, FS, 2, 16, variable_weights=bad)
