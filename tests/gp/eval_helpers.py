"""Test helpers for the evaluation tests: a tiny, independent random-forest builder.

Trees are built as nested tuples ``(name, output_index, children_or_value)`` and flattened to the
shared encoding contract (prefix order; ``opcode, value, size, output`` arrays ``[pop, max_len]``;
PAD after the tree). Nothing here imports the encoding module, so the evaluation tests do not
depend on the operators' implementation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from evotensor.gp.functions import CONST, PAD, VAR, FunctionSet

SPECIAL_CONSTANTS = np.array([0.0, 1.0, -1.0, 0.0005, -2.0, 0.5], np.float32)


@dataclasses.dataclass
class ArrayForest:
    """Duck-typed forest: the four contract fields as NumPy arrays."""

    opcode: np.ndarray
    value: np.ndarray
    size: np.ndarray
    output: np.ndarray

    def __getitem__(self, i):
        return ArrayForest(self.opcode[i], self.value[i], self.size[i], self.output[i])


def random_tree(rng, fs: FunctionSet, n_vars: int, depth: int, n_outputs: int, p_leaf=0.3, p_modi=0.4):
    """A nested-tuple tree of at most ``depth`` levels below the root."""
    modi = n_outputs > 1 and rng.random() < p_modi
    out = int(rng.integers(0, n_outputs + 1)) if modi else -1  # index n_outputs: out of range, ignored
    if depth == 0 or rng.random() < p_leaf:
        if rng.random() < 0.5:
            c = rng.choice(SPECIAL_CONSTANTS) if rng.random() < 0.3 else rng.uniform(-3, 3)
            return ("const", out, float(np.float32(c)))
        return ("var", out, int(rng.integers(0, n_vars)))
    name = fs.names[int(rng.integers(0, len(fs.names)))]
    arity = int(fs.arity[fs.opcode(name)])
    children = tuple(random_tree(rng, fs, n_vars, depth - 1, n_outputs, p_leaf, p_modi) for _ in range(arity))
    return (name, out, children)


def tree_to_arrays(tree, fs: FunctionSet, max_len: int):
    """Flatten a nested tree to the contract's four arrays ``[max_len]`` (prefix order)."""
    opcode = np.full(max_len, PAD, np.int32)
    value = np.zeros(max_len, np.float32)
    size = np.zeros(max_len, np.int32)
    output = np.full(max_len, -1, np.int32)
    pos = 0

    def walk(node):
        nonlocal pos
        name, out, payload = node
        i = pos
        if i >= max_len:
            raise OverflowError
        pos += 1
        output[i] = out
        if name == "const":
            opcode[i], value[i] = CONST, payload
        elif name == "var":
            opcode[i], value[i] = VAR, float(payload)
        else:
            opcode[i] = fs.opcode(name)
            for child in payload:
                walk(child)
        size[i] = pos - i

    walk(tree)
    return opcode, value, size, output


def random_forest(
    seed: int, fs: FunctionSet, pop: int, max_len: int, n_vars: int, n_outputs: int = 1, max_depth: int = 5
) -> ArrayForest:
    """``pop`` random valid trees (each fits in ``max_len``) as an :class:`ArrayForest`."""
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) < pop:
        tree = random_tree(rng, fs, n_vars, int(rng.integers(0, max_depth + 1)), n_outputs)
        try:
            rows.append(tree_to_arrays(tree, fs, max_len))
        except OverflowError:
            continue
    return ArrayForest(*(np.stack(col) for col in zip(*rows)))


def random_data(seed: int, n_points: int, n_vars: int) -> np.ndarray:
    """Rows in [-3, 3] with singular values (0, +-0.0005, negatives) mixed in."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n_points, n_vars)).astype(np.float32)
    special = np.array([0.0, 0.0005, -0.0005, -1.0, 1.0], np.float32)
    mask = rng.random((n_points, n_vars)) < 0.2
    X[mask] = rng.choice(special, mask.sum())
    return X


def assert_same_values(fast, ref, rtol=2e-3, atol=2e-3):
    """Same NaN / +inf / -inf pattern, and finite values close."""
    fast = np.asarray(fast)
    ref = np.asarray(ref)
    assert fast.shape == ref.shape, (fast.shape, ref.shape)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref), err_msg="NaN pattern differs")
    np.testing.assert_array_equal(np.isposinf(fast), np.isposinf(ref), err_msg="+inf pattern differs")
    np.testing.assert_array_equal(np.isneginf(fast), np.isneginf(ref), err_msg="-inf pattern differs")
    finite = np.isfinite(ref)
    np.testing.assert_allclose(fast[finite], ref[finite], rtol=rtol, atol=atol)


def well_conditioned(ref, ref_perturbed, rtol=1e-3, atol=1e-3):
    """Elements whose reference value is stable under a few-ulp perturbation of the inputs.

    Float32 paths that round intermediates differently (libm vs XLA ``sin``, fused vs unfused
    ops) can only be compared where the expression is not chaotic (e.g. ``cos(sinh(tan(x)))``
    near a pole of ``tan``); such elements change drastically when the data move by a few ulps.
    """
    same_pattern = (
        (np.isnan(ref) == np.isnan(ref_perturbed))
        & (np.isposinf(ref) == np.isposinf(ref_perturbed))
        & (np.isneginf(ref) == np.isneginf(ref_perturbed))
    )
    with np.errstate(all="ignore"):
        close = np.isclose(ref, ref_perturbed, rtol=rtol, atol=atol) | ~np.isfinite(ref)
    return same_pattern & close


def assert_matches_reference(fast, forest, X, fs, n_outputs=1, min_fraction=0.9):
    """``fast`` equals :func:`reference_eval` (NaN/inf pattern and values) on every well-conditioned
    element, and at least ``min_fraction`` of the elements are well-conditioned."""
    from evotensor.gp.reference import reference_eval

    X = np.asarray(X, np.float32)
    ref = reference_eval(forest, X, fs, n_outputs)
    sign = np.where(np.arange(X.size).reshape(X.shape) % 2 == 0, 1.0, -1.0).astype(np.float32)
    ref_p = reference_eval(forest, X * (np.float32(1) + np.float32(5e-7) * sign), fs, n_outputs)
    ok = well_conditioned(ref, ref_p)
    assert ok.mean() >= min_fraction, f"only {ok.mean():.2f} of the elements are well-conditioned"
    fast = np.asarray(fast)
    assert fast.shape == ref.shape
    assert_same_values(fast[ok], ref[ok])
    return ref


def decision_is_stable(pred: np.ndarray, metric: str) -> np.ndarray:
    """Per tree: no row sits within float32 noise of an accuracy decision boundary."""
    if metric != "accuracy":
        return np.ones(pred.shape[0], bool)
    with np.errstate(all="ignore"):
        if pred.shape[-1] == 1:
            margin = np.abs(pred[..., 0])
        else:
            top2 = np.sort(pred, axis=-1)[..., -2:]
            margin = top2[..., 1] - top2[..., 0]
        return ~np.any(np.isfinite(margin) & (margin <= 1e-3 * (1 + np.abs(pred).max(axis=-1))), axis=1)
