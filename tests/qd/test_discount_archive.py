"""Discount Model Search (evotensor.qd.discount_archive, .discount_model): the compiled minibatch
regression against an eager loop, the MLP against PyTorch's layout, empty-cell sampling and cell
centres, the training targets, MAP-Elites with a discount search archive, bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core import rng
from evotensor.problems.qd import LinearProjection
from evotensor.qd import (
    NEW,
    NOT_ADDED,
    CMAESEmitter,
    CVTArchive,
    DiscountArchive,
    DiscountMLP,
    EmitterGroup,
    GaussianEmitter,
    GridArchive,
    MAPElites,
    ProximityArchive,
    fit_discount_model,
    grid_centroids,
)
from evotensor.qd import discount_archive as discount_module
from evotensor.qd.discount_archive import sample_empty_cells

KEY = jax.random.key(0)


def leaves_equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---------------------------------------------------------------------------------------------
# the regression


def reference_fit(apply, optimizer, params, opt_state, key, x, y, valid, epochs, batch_size, cutoff):
    """pyribs' ``training_loop`` one minibatch at a time, eagerly: the permutation of each epoch is
    the documented one (the valid rows ordered by ``uniform(fold_in(key, epoch))`` keys)."""
    x, y, valid = np.asarray(x), np.asarray(y), np.asarray(valid)
    n = int(valid.sum())
    padded = -(-len(x) // batch_size) * batch_size
    losses = []
    if n == 0:
        return params, opt_state, losses

    def mse(p, xb, yb):
        return jnp.mean((apply(p, xb) - yb) ** 2)

    for e in range(epochs):
        u = np.asarray(rng.uniform(jax.random.fold_in(key, e), (padded,)))[: len(x)]
        rows = [i for i in sorted(range(len(x)), key=lambda i: (u[i], i)) if valid[i]]
        total = 0.0
        for start in range(0, n, batch_size):
            b = rows[start : start + batch_size]
            loss, g = jax.value_and_grad(mse)(params, x[b], y[b])
            updates, opt_state = optimizer.update(g, opt_state, params)
            params = optax.apply_updates(params, updates)
            total += float(loss) * len(b)
        losses.append(total / n)
        if losses[-1] <= cutoff:
            break
    return params, opt_state, losses


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 9),
    st.integers(1, 3),
    st.sampled_from([0.0, 0.3, 1e9]),
    st.integers(0, 2**31 - 1),
)
def test_fit_is_the_eager_minibatch_loop(rows, batch_size, epochs, cutoff, seed):
    r = np.random.default_rng(seed)
    model = DiscountMLP((5,), "tanh")
    params = model.init(jax.random.key(seed % 1000), 2)
    optimizer = optax.adam(0.05)
    x = r.normal(size=(rows, 2)).astype(np.float32)
    y = r.normal(size=rows).astype(np.float32)
    valid = r.random(rows) < 0.7
    key = jax.random.key(seed % 997)
    got = jax.jit(
        lambda p, o: fit_discount_model(
            model.apply,
            optimizer,
            p,
            o,
            key,
            x,
            y,
            valid,
            epochs=epochs,
            batch_size=batch_size,
            cutoff_loss=cutoff,
        )
    )(params, optimizer.init(params))
    want_params, want_opt, want_losses = reference_fit(
        model.apply, optimizer, params, optimizer.init(params), key, x, y, valid, epochs, batch_size, cutoff
    )
    p, o, losses, run = got
    assert int(run) == len(want_losses)
    np.testing.assert_allclose(np.asarray(losses)[: len(want_losses)], want_losses, rtol=2e-4, atol=1e-6)
    assert np.all(np.isnan(np.asarray(losses)[len(want_losses) :]))
    for a, b in zip(
        jax.tree_util.tree_leaves((p, o)), jax.tree_util.tree_leaves((want_params, want_opt)), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-5)


def test_fit_without_valid_rows_takes_no_step():
    model = DiscountMLP((4,))
    params = model.init(KEY, 3)
    optimizer = optax.adam(0.1)
    state = optimizer.init(params)
    out = fit_discount_model(
        model.apply,
        optimizer,
        params,
        state,
        KEY,
        jnp.ones((5, 3)),
        jnp.ones(5),
        jnp.zeros(5, bool),
        epochs=3,
        batch_size=2,
        cutoff_loss=0.0,
    )
    leaves_equal(out[:2], (params, state))
    assert int(out[3]) == 0 and np.all(np.isnan(np.asarray(out[2])))


def test_fit_regresses_a_smooth_function():
    """Enough epochs fit a bump in two dimensions (the loss falls by two orders of magnitude)."""
    model = DiscountMLP((64, 64))
    x = np.random.default_rng(0).uniform(-1, 1, size=(512, 2)).astype(np.float32)
    y = np.exp(-4 * (x**2).sum(1)).astype(np.float32)
    params = model.init(KEY, 2)
    optimizer = optax.adam(3e-3)
    fit = jax.jit(
        lambda p, o, k: fit_discount_model(
            model.apply,
            optimizer,
            p,
            o,
            k,
            x,
            y,
            jnp.ones(512, bool),
            epochs=40,
            batch_size=32,
            cutoff_loss=0.0,
        )
    )
    p, _, losses, run = fit(params, optimizer.init(params), KEY)
    assert int(run) == 40 and float(losses[-1]) < 0.01 * float(losses[0])


# ---------------------------------------------------------------------------------------------
# the model, empty cells, cell centres


def test_mlp_is_pytorch_linear_layers():
    model = DiscountMLP((128, 128), "relu")
    params = model.init(KEY, 3)
    assert [(layer["w"].shape, layer["b"].shape) for layer in params] == [
        ((3, 128), (128,)),
        ((128, 128), (128,)),
        ((128, 1), (1,)),
    ]
    for layer in params:  # nn.Linear's default: uniform in +-1/sqrt(fan_in), weights and biases
        bound = 1 / math.sqrt(layer["w"].shape[0])
        for a in (layer["w"], layer["b"]):
            a = np.asarray(a)
            assert np.abs(a).max() <= bound
            if a.size >= 100:  # and fills it
                assert np.abs(a).max() > 0.9 * bound and abs(a.mean()) < 0.2 * bound
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    h = x
    for i, layer in enumerate(params):
        h = h.astype(np.float64) @ np.asarray(layer["w"], np.float64) + np.asarray(layer["b"], np.float64)
        h = h if i == 2 else np.maximum(h, 0)
    np.testing.assert_allclose(np.asarray(model.apply(params, x)), h[:, 0], rtol=1e-5, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 45), st.integers(0, 2**31 - 1))
def test_empty_cells_are_distinct_empty_and_as_many_as_there_are(cells, n, seed):
    occupied = np.random.default_rng(seed).random(cells) < 0.5
    drawn_cells, drawn = sample_empty_cells(jax.random.key(seed), jnp.asarray(occupied), n)
    drawn_cells, drawn = np.asarray(drawn_cells), np.asarray(drawn)
    assert drawn_cells.shape == drawn.shape == (n,)
    assert int(drawn.sum()) == min(n, int((~occupied).sum()))
    picked = drawn_cells[drawn]
    assert len(set(picked.tolist())) == len(picked) and not occupied[picked].any()


def test_empty_cells_are_drawn_uniformly():
    occupied = jnp.asarray([True, False, False, True, False, False, False, True])
    counts = np.zeros(8)
    for s in range(3000):
        cells, drawn = sample_empty_cells(jax.random.key(s), occupied, 2)
        counts[np.asarray(cells)[np.asarray(drawn)]] += 1
    empty = counts[~np.asarray(occupied)]
    assert counts[np.asarray(occupied)].sum() == 0
    expected = 3000 * 2 / 5
    chi2 = float(((empty - expected) ** 2 / expected).sum())
    assert chi2 < 18.5, (empty, chi2)  # 4 degrees of freedom: p ~ 0.001


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=3), st.integers(0, 2**31 - 1))
def test_grid_cell_centres_are_the_grid_centroids_and_lie_in_their_cells(dims, seed):
    r = np.random.default_rng(seed)
    low = r.uniform(-5, 5, len(dims))
    ranges = [(float(a), float(a + r.uniform(0.1, 9))) for a in low]
    grid = GridArchive(solution_dim=1, dims=dims, ranges=ranges)
    cells = jnp.arange(grid.num_cells)
    centres = grid.cell_centers(cells)
    np.testing.assert_array_equal(np.asarray(centres), np.asarray(grid_centroids(dims, ranges)))
    np.testing.assert_array_equal(np.asarray(grid.index_of(centres)), np.asarray(cells))


def test_cvt_cell_centres_are_its_centroids():
    cvt = CVTArchive(solution_dim=1, centroids=20, ranges=[(0, 1), (0, 2)], samples=500)
    np.testing.assert_array_equal(
        np.asarray(cvt.cell_centers(jnp.asarray([3, 0, 19]))), np.asarray(cvt.centroids)[[3, 0, 19]]
    )


# ---------------------------------------------------------------------------------------------
# the archive


def grid(dims=(4, 4), solution_dim=3):
    return GridArchive(solution_dim=solution_dim, dims=dims, ranges=[(-2.0, 2.0), (0.0, 8.0)])


def discount(**kw):
    args = {"result_archive": grid(), "learning_rate": 0.5, "threshold_min": -1.0, "model": DiscountMLP((8,))}
    args.update(kw)
    return DiscountArchive(**args)


def test_add_reports_the_model_discount_and_improvement():
    archive = discount()
    state = archive.init(KEY)
    measures = jnp.asarray([[0.0, 4.0], [-2.0, 0.0], [1.0, 1.0], [np.nan, 1.0], [0.5, 0.5]])
    objective = jnp.asarray([5.0, -50.0, np.nan, 1.0, 0.0])
    solutions = jnp.zeros((5, 3)).at[4, 1].set(np.inf)
    new_state, info = archive.add(state, solutions, objective, measures)
    leaves_equal(new_state, state)  # add only reports
    scaled = np.asarray(measures) * [0.5, 0.25] + [0.0, -1.0]  # [-2, 2] x [0, 8] -> [-1, 1]^2
    model = archive.model.apply(state.params, jnp.asarray(np.nan_to_num(scaled)))
    d = np.asarray(info.discount)
    np.testing.assert_allclose(d[[0, 1, 2, 4]], np.asarray(model)[[0, 1, 2, 4]], rtol=1e-6)
    assert np.isnan(d[3])
    assert np.asarray(info.status).tolist() == [NEW, NOT_ADDED, NOT_ADDED, NOT_ADDED, NOT_ADDED]
    value = np.asarray(info.value)
    np.testing.assert_allclose(value[:2], np.asarray(objective)[:2] - d[:2], rtol=1e-6)
    assert np.isneginf(value[2:]).all()  # NaN objective, NaN measures, inf solution
    assert np.asarray(info.index).tolist() == [-1] * 5


def test_init_fits_the_model_to_threshold_min_everywhere():
    archive = discount(
        threshold_min=3.0,
        model=DiscountMLP((32, 32)),
        optimizer=optax.adam(0.03),
        train_epochs=60,
        init_train_points=16,
    )
    state = archive.init(KEY)
    assert int(state.empty) == 16 and int(state.epochs) == 60
    centres = archive.result_archive.cell_centers(jnp.arange(16))
    np.testing.assert_allclose(np.asarray(archive.discount(state, centres)), 3.0, atol=0.2)  # fresh: ~0
    # a different key, a different model (the run's key reaches it through MAPElites)
    assert not np.array_equal(
        np.asarray(archive.init(jax.random.key(1)).params[0]["w"]), np.asarray(state.params[0]["w"])
    )
    leaves_equal(archive.init(), archive.init(jax.random.key(archive.seed)))


def test_refit_trains_on_cma_mae_targets_and_empty_cell_centres(monkeypatch):
    """The regression receives the batch's valid candidates with CMA-MAE's threshold update as
    targets and the centres of the result archive's empty cells with ``threshold_min``."""
    archive = discount(empty_points=20)
    state = archive.init(KEY)
    result = archive.result_archive
    occupied = jnp.zeros(16, bool).at[jnp.asarray([0, 5, 6, 15])].set(True)
    result_state = result.init().replace(occupied=occupied)
    measures = jnp.asarray([[0.0, 4.0], [1.0, 1.0], [1.5, 7.0], [0.2, 0.2]])
    objective = jnp.asarray([5.0, -50.0, 2.0, np.nan])
    _, info = archive.add(state, jnp.zeros((4, 3)), objective, measures)
    seen = {}

    def record(apply, optimizer, params, opt_state, key, x, y, valid, **kw):
        # refit trains inside a lax.cond: the arrays are traced, a callback sees their values
        jax.debug.callback(lambda *a: seen.update(zip(("x", "y", "valid"), map(np.asarray, a))), x, y, valid)
        seen["kw"] = kw
        return params, opt_state, jnp.zeros(kw["epochs"]), jnp.int32(1)

    monkeypatch.setattr(discount_module, "fit_discount_model", record)
    after = archive.refit(state, jnp.zeros((4, 3)), objective, measures, info, result_state)
    d = np.asarray(info.discount)
    lr = 0.5
    want = [(1 - lr) * d[0] + lr * 5.0, d[1], (1 - lr) * d[2] + lr * 2.0 if 2.0 > d[2] else d[2]]
    np.testing.assert_allclose(seen["y"][:3], want, rtol=1e-6)
    assert seen["valid"][:4].tolist() == [True, True, True, False]
    # 12 empty cells, all drawn (20 asked), each once, their centres scaled like the measures
    empty_rows = seen["valid"][4:]
    assert int(empty_rows.sum()) == 12 and len(empty_rows) == 20
    np.testing.assert_array_equal(seen["y"][4:][empty_rows], -1.0)
    centres = (seen["x"][4:][empty_rows] - [0.0, -1.0]) / [0.5, 0.25]
    cells = np.asarray(result.index_of(jnp.asarray(centres, jnp.float32)))
    assert sorted(cells.tolist()) == sorted(set(range(16)) - {0, 5, 6, 15})
    assert seen["kw"] == {"epochs": 5, "batch_size": 32, "cutoff_loss": 0.0}
    assert int(after.step) == 1 and int(after.empty) == 12


def test_refit_trains_every_train_every_calls_and_keeps_state_finite():
    archive = discount(train_every=2)
    state = archive.init(KEY)
    result_state = archive.result_archive.init()
    measures = jnp.asarray([[0.0, 4.0], [np.inf, 1.0], [1.0, 1.0]])
    objective = jnp.asarray([5.0, 1.0, np.nan])
    refit = jax.jit(archive.refit)
    params = [state.params]
    for _ in range(4):
        _, info = archive.add(state, jnp.zeros((3, 3)), objective, measures)
        state = refit(state, jnp.zeros((3, 3)), objective, measures, info, result_state)
        params.append(state.params)
    same = [
        all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(q)))
        for p, q in zip(params, params[1:])
    ]
    assert same == [True, False, True, False] and int(state.step) == 4
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(state.params))


def test_a_diverging_training_is_discarded():
    """An optimizer that blows the parameters up (SGD with an infinite step) never leaves the model
    non-finite: each such training is undone and counted."""
    archive = discount(optimizer=optax.sgd(np.inf))
    state = archive.init(KEY)
    assert int(state.diverged) == 1  # init's fit already diverged
    assert all(np.isfinite(np.asarray(a)).all() for a in jax.tree_util.tree_leaves(state.params))
    fresh = archive.model.init(jax.random.fold_in(KEY, 0), 2)  # the init key fold 0
    leaves_equal(state.params, fresh)
    objective, measures = jnp.asarray([5.0, 1.0]), jnp.asarray([[0.0, 4.0], [1.0, 1.0]])
    _, info = archive.add(state, jnp.zeros((2, 3)), objective, measures)
    after = archive.refit(state, jnp.zeros((2, 3)), objective, measures, info, archive.result_archive.init())
    leaves_equal(after.params, state.params)
    assert int(after.diverged) == 2 and np.isfinite(np.asarray(archive.discount(after, measures))).all()


def test_discount_range_scales_targets_and_outputs():
    archive = discount(
        discount_range=(0.0, 100.0),
        threshold_min=0.0,
        model=DiscountMLP((16,)),
        optimizer=optax.adam(0.03),
        train_epochs=60,
    )
    state = archive.init(KEY)
    raw = archive.model.apply(state.params, jnp.zeros((1, 2)))
    np.testing.assert_allclose(
        np.asarray(archive.discount(state, jnp.asarray([[0.0, 4.0]]))), (np.asarray(raw) + 1) * 50, rtol=1e-5
    )
    centres = archive.result_archive.cell_centers(jnp.arange(16))
    np.testing.assert_allclose(np.asarray(archive.discount(state, centres)), 0.0, atol=8.0)  # fresh: ~50


# ---------------------------------------------------------------------------------------------
# Discount Model Search


def dms(dims=10, emitters=3, batch=12, cells=(20, 20), **kw):
    problem = LinearProjection(num_dims=dims, function="sphere", scale=1.0)
    result = GridArchive(solution_dim=dims, dims=cells, ranges=problem.descriptor_ranges)
    search = DiscountArchive(
        result_archive=result, learning_rate=0.1, threshold_min=0.0, train_cutoff_loss=0.05, **kw
    )
    emitter = CMAESEmitter(
        np.zeros(dims), 0.5, ranker="imp", selection_rule="mu", restart_rule="basic", batch_size=batch
    )
    return problem, MAPElites(search, [EmitterGroup(emitter, emitters)], result_archive=result)


def test_dms_learns_the_explored_region_and_spreads_wider_than_objective_ranking():
    problem, strategy = dms()
    assert strategy.elites is strategy.result_archive
    result = evotensor.run(strategy, problem, 150, KEY, progress=False)
    assert {"discount_loss", "discount_epochs"} <= set(result.history)
    assert np.all(result.history["discount_epochs"] >= 1)
    state = result.state
    archive = strategy.result_archive
    found = np.asarray(state.result.occupied)
    centres = archive.cell_centers(jnp.arange(archive.num_cells))
    d = np.asarray(strategy.archive.discount(state.archive, centres))
    # the model rises where elites are and stays near threshold_min where nothing was found
    assert d[found].mean() > 0.3 and abs(d[~found].mean()) < 0.5 * d[found].mean()
    coverage = float(archive.stats(state.result)["coverage"])
    greedy_grid = GridArchive(solution_dim=10, dims=(20, 20), ranges=problem.descriptor_ranges)
    emitter = CMAESEmitter(
        np.zeros(10), 0.5, ranker="obj", selection_rule="mu", restart_rule="basic", batch_size=12
    )
    greedy = evotensor.run(
        MAPElites(greedy_grid, [EmitterGroup(emitter, 3)]), problem, 150, KEY, progress=False
    )
    assert coverage > 2 * float(greedy_grid.stats(greedy.state.archive)["coverage"])


def test_a_run_on_a_mesh_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    """On a (one-device) mesh the model is laid out whole, written to the checkpoint and laid out
    again on resume (``pad``): the resumed run equals the uninterrupted mesh run bit for bit. (The
    mesh program is compiled otherwise than the plain one, whose model it follows to float32
    rounding only: the 4-device scenario in test_sharded_archive.py.)"""
    problem, strategy = dms(
        emitters=2, batch=4, init_train_points=50, empty_points=10, model=DiscountMLP((16,))
    )
    mesh = jax.make_mesh((1,), ("pop",))
    options = dict(progress=False, chunk_size=3, mesh=mesh)
    whole = evotensor.run(strategy, problem, 6, KEY, **options)
    evotensor.run(strategy, problem, 3, KEY, run_dir=tmp_path, **options)
    resumed = evotensor.run(strategy, problem, 6, KEY, run_dir=tmp_path, resume=True, **options)
    assert int(resumed.state.archive.step) == 6
    leaves_equal(resumed.state, whole.state)


def test_the_dms_task_runs_reports_and_resumes_bit_identically(tmp_path):
    from tests.qd.test_tasks_and_plots import run_and_resume

    from evotensor.tasks import get_task

    task = get_task("qd-dms").build({"dims": 8, "cells": 10, "emitters": 2, "pop": 8})
    assert task.problem.fitness_range == (0.0, 1.0) and task.strategy.archive.train_cutoff_loss == 0.05
    first, resumed = run_and_resume(task, tmp_path, 5, 10, 5)
    assert first.history["coverage"][-1] > 0
    text = task.report(resumed, tmp_path)
    assert "discount model: last training" in text and "of 100 cells" in text
    with pytest.raises(ValueError, match="option learning_rate"):
        get_task("qd-dms").build({"learning_rate": -1})


# ---------------------------------------------------------------------------------------------
# bad input


def me(**kw):
    archive = kw.pop("archive", None) or discount()
    args = {
        "emitters": [GaussianEmitter(x0=jnp.zeros(3), sigma=0.1, batch_size=2)],
        "result_archive": archive.result_archive,
    }
    args.update(kw)
    return MAPElites(archive, args.pop("emitters"), **args)


def refit(**kw):
    archive = discount()
    state = archive.init(KEY)
    args = dict(
        state=state,
        solutions=jnp.zeros((2, 3)),
        objective=jnp.zeros(2),
        measures=jnp.zeros((2, 2)),
        info=archive.add(state, jnp.zeros((2, 3)), jnp.zeros(2), jnp.zeros((2, 2)))[1],
        result_state=archive.result_archive.init(),
    )
    args.update(kw)
    return archive.refit(**args)


CASES = [
    (
        "discount",
        discount,
        "result_archive",
        {
            "result_archive": ProximityArchive(
                solution_dim=3, measure_dim=2, capacity=5, k_neighbors=2, novelty_threshold=0.1
            )
        },
    ),
    ("discount", discount, "learning_rate", {"learning_rate": 1.5}),
    ("discount", discount, "learning_rate", {"learning_rate": math.nan}),
    ("discount", discount, "threshold_min", {"threshold_min": -math.inf}),
    ("discount", discount, "model", {"model": object()}),
    ("discount", discount, "model", {"model": "mlp"}),
    ("discount", discount, "optimizer", {"optimizer": "adam"}),
    ("discount", discount, "train_epochs", {"train_epochs": 0}),
    ("discount", discount, "train_cutoff_loss", {"train_cutoff_loss": -1.0}),
    ("discount", discount, "train_batch_size", {"train_batch_size": 0}),
    ("discount", discount, "init_train_points", {"init_train_points": 0}),
    ("discount", discount, "empty_points", {"empty_points": -1}),
    ("discount", discount, "train_every", {"train_every": 0}),
    ("discount", discount, "normalize_measures", {"normalize_measures": "yes"}),
    ("discount", discount, "discount_range", {"discount_range": (1.0, 1.0)}),
    ("discount", discount, "discount_range", {"discount_range": 5.0}),
    ("discount", discount, "seed", {"seed": -1}),
    ("mlp", DiscountMLP, "hidden", {"hidden": (0,)}),
    ("mlp", DiscountMLP, "activation", {"activation": "swish-ish"}),
    (
        "add",
        lambda **kw: discount().add(discount().init(KEY), None, jnp.zeros(3), jnp.zeros((3, 3))),
        "measures",
        {},
    ),
    ("refit", refit, "objective", {"objective": jnp.zeros((2, 2))}),
    ("map-elites", me, "result_archive", {"result_archive": grid()}),
    ("map-elites", me, "result_archive", {"result_archive": None}),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
