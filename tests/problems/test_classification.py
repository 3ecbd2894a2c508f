"""Digits classification: scores against NumPy, split, orientation, minibatches."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.problems.classification import DigitsClassification
from evotensor.problems.networks import ParamsDecoder, cnn_apply, init_cnn


def linear_apply(w, x):
    # HIGHEST: the scores are compared with float64 NumPy; a GPU's default float32 matmul (TF32)
    # rounds x and w to ~3 digits, which moves the cross-entropy by ~1e-5 and can flip an argmax
    return jnp.matmul(x, w["w"], precision=jax.lax.Precision.HIGHEST) + w["b"]


def np_scores(w, b, x, y):
    """Accuracy and mean cross-entropy, one example at a time."""
    correct, ce = 0, 0.0
    for xi, yi in zip(np.asarray(x, np.float64), np.asarray(y)):
        logits = xi @ w + b
        m = logits.max()
        log_z = m + math.log(sum(math.exp(v - m) for v in logits))
        ce += log_z - logits[yi]
        correct += int(np.argmax(logits) == yi)
    return correct / len(y), ce / len(y)


@pytest.fixture(scope="module")
def problem():
    return DigitsClassification(metric="accuracy", test_fraction=0.25, seed=0)


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 64, 10)).astype(np.float32)
    b = rng.standard_normal((3, 10)).astype(np.float32)
    return {"w": jnp.asarray(w), "b": jnp.asarray(b)}


def test_split(problem):
    n_train, n_test = problem.y_train.shape[0], problem.y_test.shape[0]
    assert n_train + n_test == 1797 and n_test == math.ceil(0.25 * 1797)
    assert problem.x_train.shape == (n_train, 64) and problem.x_train.dtype == jnp.float32
    assert float(problem.x_train.min()) >= 0.0 and float(problem.x_train.max()) <= 1.0
    # Stratified: every class has (nearly) the same share in both parts.
    train_share = np.bincount(np.asarray(problem.y_train), minlength=10) / n_train
    test_share = np.bincount(np.asarray(problem.y_test), minlength=10) / n_test
    assert np.max(np.abs(train_share - test_share)) < 0.01
    other = DigitsClassification(seed=1)
    assert not np.array_equal(np.asarray(other.y_test), np.asarray(problem.y_test))


def test_scores_match_numpy(problem, weights):
    acc_problem = problem
    ce_problem = DigitsClassification(metric="neg_cross_entropy", test_fraction=0.25, seed=0)
    acc = acc_problem.evaluate(jax.random.key(0), weights, linear_apply)
    ce = ce_problem.evaluate(jax.random.key(0), weights, linear_apply)
    test = acc_problem.test_evaluate(weights, linear_apply)
    for i in range(3):
        w, b = np.asarray(weights["w"][i], np.float64), np.asarray(weights["b"][i], np.float64)
        ref_acc, ref_ce = np_scores(w, b, acc_problem.x_train, acc_problem.y_train)
        assert float(acc.fitness[i]) == pytest.approx(ref_acc, abs=1e-6)
        assert float(ce.fitness[i]) == pytest.approx(-ref_ce, rel=1e-5)  # maximized: minus CE
        assert float(acc.info["cross_entropy"][i]) == pytest.approx(ref_ce, rel=1e-5)
        test_acc, _ = np_scores(w, b, acc_problem.x_test, acc_problem.y_test)
        assert float(test.fitness[i]) == pytest.approx(test_acc, abs=1e-6)
    assert acc_problem.maximize and ce_problem.maximize and acc_problem.kind == "policy"


def test_good_classifier_ranks_above_random(problem, weights):
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=500).fit(np.asarray(problem.x_train), np.asarray(problem.y_train))
    fitted = {"w": jnp.asarray(clf.coef_.T, jnp.float32), "b": jnp.asarray(clf.intercept_, jnp.float32)}
    pop = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b[:2]]), fitted, weights)
    test = problem.test_evaluate(pop, linear_apply).fitness
    assert float(test[0]) > 0.9 and float(test[0]) == pytest.approx(clf.score(problem.x_test, problem.y_test))
    assert np.all(np.asarray(test[1:]) < float(test[0]))


def test_minibatches(weights):
    full = DigitsClassification(seed=0)
    n_train = full.y_train.shape[0]
    batched = DigitsClassification(seed=0, batch_size=64)
    a = batched.evaluate(jax.random.key(1), weights, linear_apply).fitness
    b = batched.evaluate(jax.random.key(1), weights, linear_apply).fitness
    c = batched.evaluate(jax.random.key(2), weights, linear_apply).fitness
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    np.testing.assert_allclose(np.asarray(a) * 64, np.round(np.asarray(a) * 64), atol=1e-4)  # k / 64
    # The whole population sees the same batch: identical individuals score identically.
    twins = jax.tree.map(lambda x: jnp.stack([x[0], x[0]]), weights)
    twin_fit = batched.evaluate(jax.random.key(3), twins, linear_apply).fitness
    assert float(twin_fit[0]) == float(twin_fit[1])
    # A batch of every training example (without replacement) is the full evaluation.
    everything = DigitsClassification(seed=0, batch_size=n_train)
    np.testing.assert_allclose(
        np.asarray(everything.evaluate(jax.random.key(4), weights, linear_apply).fitness),
        np.asarray(full.evaluate(jax.random.key(0), weights, linear_apply).fitness),
        atol=1e-6,
    )


def test_images_for_cnn():
    problem = DigitsClassification(flatten=False, metric="neg_cross_entropy")
    assert problem.x_train.shape[1:] == (8, 8, 1) and problem.input_shape == (8, 8, 1)
    params = init_cnn(jax.random.key(0), (8, 8, 1), channels=(4,), dense_sizes=(10,))
    pop = jax.tree.map(lambda a: jnp.stack([a, -a]), params)
    ev = problem.evaluate(jax.random.key(0), pop, ParamsDecoder(cnn_apply).apply)
    assert ev.fitness.shape == (2,) and np.all(np.asarray(ev.fitness) < 0)
    np.testing.assert_allclose(np.asarray(ev.fitness), -np.asarray(ev.info["cross_entropy"]))


def test_bad_arguments(weights):
    with pytest.raises(ValueError, match="metric"):
        DigitsClassification(metric="f1")
    with pytest.raises(ValueError, match="test_fraction"):
        DigitsClassification(test_fraction=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        DigitsClassification(batch_size=0)
    with pytest.raises(ValueError, match="10 logits"):
        DigitsClassification().evaluate(jax.random.key(0), weights, lambda w, x: (x @ w["w"])[:3])
