"""Supervised classification on scikit-learn's bundled ``load_digits`` as a policy problem.

The data ship with scikit-learn (1,797 8x8 grey-level images of digits 0-9), so nothing is
downloaded. Pixels are scaled to ``[0, 1]``; a stratified train/test split is fixed by ``seed``.

Fitness is in natural orientation and **maximized** for both metrics:

* ``"accuracy"`` — fraction of correctly classified training examples, in ``[0, 1]``;
* ``"neg_cross_entropy"`` — minus the mean softmax cross-entropy (in nats), ``<= 0``; smooth,
  so better suited to gradient-estimating strategies than the piecewise-constant accuracy.

Policies map one input (``[64]``, or ``[8, 8, 1]`` with ``flatten=False``) to 10 logits.

Example::

    problem = DigitsClassification(metric="neg_cross_entropy", batch_size=256)
    params = init_mlp(key, (64, 32, 10))
    ev = problem.evaluate(key, population, ParamsDecoder(mlp_apply).apply)    # fitness [pop]
    problem.test_evaluate(population, ParamsDecoder(mlp_apply).apply)          # on held-out data
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_real
from evotensor.core.evaluation import Evaluation

METRICS = ("accuracy", "neg_cross_entropy")
NUM_CLASSES = 10
Apply = Callable[[Any, jax.Array], jax.Array]


def _population_size(phenotypes: Any) -> int:
    leaves = jax.tree_util.tree_leaves(phenotypes)
    if not leaves:
        raise ArgumentError("phenotypes has no array leaves")
    return int(leaves[0].shape[0])


def scores(logits: jax.Array, labels: jax.Array) -> dict[str, jax.Array]:
    """Accuracy and mean cross-entropy of ``logits [n, classes]`` against ``labels [n]`` (int)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    ce = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0])
    acc = jnp.mean((jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32))
    return {"accuracy": acc, "cross_entropy": ce}


class DigitsClassification:
    """Digits classification (10 classes) as a policy problem.

    Args:
        metric: ``"accuracy"`` or ``"neg_cross_entropy"`` (both maximized).
        test_fraction: fraction of the data held out for :meth:`test_evaluate`, in (0, 1).
        seed: seed of the stratified split.
        batch_size: if given, each :meth:`evaluate` scores a random training minibatch of this
            size, drawn from the evaluation key and shared by the whole population (common random
            numbers: individuals are compared on the same examples). None uses all training data.
        flatten: inputs as ``[64]`` vectors (True) or ``[8, 8, 1]`` images (False, for CNNs).

    Attributes:
        x_train ``[n_train, 64]`` or ``[n_train, 8, 8, 1]``, y_train ``[n_train]`` (int32),
        x_test, y_test: the split, as float32 / int32 device arrays.
        input_shape, output_size: what a policy consumes and returns.
    """

    kind = "policy"
    maximize = True

    def __init__(
        self,
        metric: str = "accuracy",
        test_fraction: float = 0.25,
        seed: int = 0,
        batch_size: int | None = None,
        flatten: bool = True,
    ):
        if not isinstance(metric, str) or metric not in METRICS:
            raise ArgumentError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        check_real(test_fraction, "test_fraction", 0.0, 1.0, low_open=True, high_open=True)
        seed = check_int(seed, "seed", minimum=0, maximum=2**32 - 1)
        if not isinstance(flatten, bool):
            raise ArgumentError(f"flatten must be a bool, got {flatten!r}")
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        data = load_digits()
        x = (data.data / 16.0).astype(np.float32)
        y = data.target.astype(np.int32)
        x_tr, x_te, y_tr, y_te = train_test_split(
            x, y, test_size=test_fraction, random_state=seed, stratify=y
        )
        is_int = isinstance(batch_size, int) and not isinstance(batch_size, bool)
        valid_batch = is_int and 1 <= batch_size <= len(y_tr)
        if batch_size is not None and not valid_batch:
            raise ArgumentError(f"batch_size must be an int in 1..{len(y_tr)} or None, got {batch_size!r}")
        self.metric = metric
        self.batch_size = batch_size
        self.input_shape = (64,) if flatten else (8, 8, 1)
        self.output_size = NUM_CLASSES
        shape = (-1, *self.input_shape)
        self.x_train, self.y_train = jnp.asarray(x_tr.reshape(shape)), jnp.asarray(y_tr)
        self.x_test, self.y_test = jnp.asarray(x_te.reshape(shape)), jnp.asarray(y_te)

    def _score(self, phenotypes: Any, apply: Callable, x: jax.Array, y: jax.Array) -> Evaluation:
        _population_size(phenotypes)
        # vmap over examples: works for per-example and batch-capable apply functions alike.
        logits = jax.vmap(lambda p: jax.vmap(lambda xi: apply(p, xi))(x))(phenotypes)  # [pop, n, 10]
        if logits.shape[-1] != NUM_CLASSES:
            got = logits.shape[2:]
            raise ArgumentError(f"apply must return {NUM_CLASSES} logits per example, got shape {got}")
        info = jax.vmap(scores, in_axes=(0, None))(logits, y)
        fitness = info["accuracy"] if self.metric == "accuracy" else -info["cross_entropy"]
        return Evaluation(fitness=fitness, info=info)

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply) -> Evaluation:
        """Training-set score: ``fitness [pop]``.

        ``info`` holds ``accuracy [pop]`` and ``cross_entropy [pop]`` whatever the metric.
        """
        x, y = self.x_train, self.y_train
        if self.batch_size is not None:
            idx = rng.choice(key, y.shape[0], (self.batch_size,), replace=False)
            x, y = x[idx], y[idx]
        return self._score(phenotypes, apply, x, y)

    def test_evaluate(self, phenotypes: Any, apply: Apply) -> Evaluation:
        """The same score on the held-out test split."""
        return self._score(phenotypes, apply, self.x_test, self.y_test)

    def __repr__(self) -> str:
        return f"DigitsClassification(metric={self.metric!r}, batch_size={self.batch_size})"
