"""The shared shape of the per-family bad-input tables (``tests/<family>/test_bad_input.py``).

Each family lists ``CASES``: ``(label, build, argument, kwargs)`` rows, each a call that works with
one argument made bad; :func:`refusal_test` turns them into one parametrized test asserting an
:class:`~evotensor.core.checks.ArgumentError` whose message names ``argument``.
"""

from __future__ import annotations

import re

import pytest

from evotensor.core.checks import ArgumentError


def case_id(case) -> str:
    """A stable test id: no memory addresses (pytest-xdist's workers must collect the same ids)."""
    label, _, argument, kwargs = case
    return re.sub(r" at 0x[0-9a-f]+", "", f"{label}-{argument}-{kwargs!r}")[:90]


def refusal_test(cases):
    """The parametrized test of a family's table (assign it to a ``test_*`` name in the module)."""

    @pytest.mark.parametrize(("label", "build", "argument", "kwargs"), cases, ids=[case_id(c) for c in cases])
    def test_bad_argument_is_refused_naming_it(label, build, argument, kwargs):
        with pytest.raises(ArgumentError, match=argument):
            build(**kwargs)

    return test_bad_argument_is_refused_naming_it
