"""Hall of fame, Pareto front, PySR's score/model selection and NSGA-II (gp/front.py), each fast
kernel against an obviously correct NumPy/Python implementation; GP with survival="nsga2"."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.gp import GP, FunctionSet, front
from evotensor.gp.encoding import Forest
from evotensor.gp.generate import generate
from evotensor.gp.regression import Pagie1

N, MAX_SIZE = 24, 6
LOSSES = [0.0, 0.5, 1.0, 1.0, 2.0, 3.5, np.inf, np.nan, -np.inf]

points = st.tuples(
    st.lists(st.sampled_from(LOSSES), min_size=N, max_size=N),
    st.lists(st.integers(1, MAX_SIZE), min_size=N, max_size=N),
)

rank_jit = jax.jit(functools.partial(front.nondominated_rank, max_size=MAX_SIZE))
crowd_jit = jax.jit(front.crowding_distance)
order_jit = jax.jit(front.nsga2_order, static_argnums=(2, 3))
pareto_jit = jax.jit(front.pareto_front)


# -- slow, obviously correct references ---------------------------------------------------------------------


def _dominates(a, b):
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def ref_rank(loss, size):
    """Deb's peeling with explicit domination tests; non-finite losses last, in one front."""
    n = len(loss)
    feasible = [bool(np.isfinite(x)) for x in loss]
    pts = [(float(loss[i]), int(size[i])) for i in range(n)]
    rank = [-1] * n
    left, r = [i for i in range(n) if feasible[i]], 0
    while left:
        now = [i for i in left if not any(_dominates(pts[j], pts[i]) for j in left if j != i)]
        for i in now:
            rank[i] = r
        left = [i for i in left if i not in now]
        r += 1
    last = max([x for x in rank if x >= 0], default=-1) + 1
    return np.array([rank[i] if feasible[i] else last for i in range(n)])


def ref_crowding(loss, size, rank):
    n = len(loss)
    dist = np.zeros(n)
    for r in set(rank.tolist()):
        members = [i for i in range(n) if rank[i] == r and np.isfinite(loss[i])]
        if not members:  # the infeasible front: 0
            continue
        for f in (np.asarray(loss, float), np.asarray(size, float)):
            srt = sorted(members, key=lambda i: (f[i], i))
            dist[srt[0]] = dist[srt[-1]] = np.inf
            span = f[srt[-1]] - f[srt[0]]
            for k in range(1, len(srt) - 1):
                if span > 0:
                    dist[srt[k]] += (f[srt[k + 1]] - f[srt[k - 1]]) / span
    return np.where(np.isfinite(loss), dist, 0.0)


def ref_front(loss, size):
    n = len(loss)
    ok = [i for i in range(n) if np.isfinite(loss[i])]
    nd = [i for i in ok if not any(_dominates((loss[j], size[j]), (loss[i], size[i])) for j in ok)]
    first = {}
    for i in nd:  # equal points: the lowest index
        first.setdefault((float(loss[i]), int(size[i])), i)
    return sorted(first.values(), key=lambda i: size[i])


def ref_hof_update(loss_h, rows, forest, loss, length):
    loss_h, rows = loss_h.copy(), list(rows)
    for i in range(len(loss)):
        c = int(length[i])
        if np.isfinite(loss[i]) and 1 <= c <= len(loss_h) and loss[i] < loss_h[c - 1]:
            loss_h[c - 1], rows[c - 1] = loss[i], i
    return loss_h, rows


# -- NSGA-II ------------------------------------------------------------------------------------------


@given(points)
def test_nondominated_rank_and_crowding_equal_the_quadratic_reference(data):
    loss, size = np.array(data[0], np.float32), np.array(data[1], np.int32)
    rank = np.asarray(rank_jit(loss, size))
    np.testing.assert_array_equal(rank, ref_rank(loss, size))
    crowd = np.asarray(crowd_jit(loss, size, rank))
    np.testing.assert_allclose(crowd, ref_crowding(loss, size, rank), rtol=1e-6)


@given(points, st.booleans())
def test_nsga2_order_is_the_crowded_comparison(data, unique):
    loss, size = np.array(data[0], np.float32), np.array(data[1], np.int32)
    got = np.asarray(order_jit(loss, size, MAX_SIZE, unique))
    feasible = np.isfinite(loss)
    dup = np.zeros(N, bool)
    if unique:
        seen = set()
        for i in range(N):
            key = (float(loss[i]), int(size[i]))
            dup[i] = feasible[i] and key in seen
            seen.add(key)
    ranked = np.where(dup, np.inf, loss)
    rank = ref_rank(ranked, size)
    crowd = ref_crowding(ranked, size, rank)
    group = np.where(feasible, np.where(dup, 1, 0), 2)
    want = sorted(range(N), key=lambda i: (rank[i], group[i], loss[i] if dup[i] else 0.0, -crowd[i], i))
    np.testing.assert_array_equal(got, want)
    assert sorted(got.tolist()) == list(range(N))


def test_rank_of_a_long_chain_and_equal_points():
    loss = np.array([5.0, 4.0, 3.0, 3.0, 2.0, 1.0, 1.0], np.float32)
    size = np.array([1, 1, 1, 1, 1, 1, 2], np.int32)  # one size: every distinct loss its own front
    np.testing.assert_array_equal(front.nondominated_rank(loss, size, 2), [4, 3, 2, 2, 1, 0, 1])
    with pytest.raises(ArgumentError, match="max_size"):
        front.nondominated_rank(loss, size, 0)


# -- Pareto front --------------------------------------------------------------------------------------------


@given(points)
def test_pareto_front_is_nondominated_ordered_and_complete(data):
    loss, size = np.array(data[0], np.float32), np.array(data[1], np.int32)
    index, valid = (np.asarray(a) for a in pareto_jit(loss, size))
    k = int(valid.sum())
    assert valid[:k].all() and not valid[k:].any() and (index[k:] == -1).all()
    got = index[:k]
    assert got.tolist() == ref_front(loss, size)
    assert np.all(np.diff(size[got]) > 0) and np.all(np.diff(loss[got]) < 0)
    np.testing.assert_array_equal(front.pareto_front_indices(loss, size), got)


# -- hall of fame --------------------------------------------------------------------------------------------

FS = FunctionSet(("add", "mul", "sin"))
HOF_L = 12
POOL = generate(jax.random.key(0), 64, FS, 2, HOF_L, min_depth=0, max_depth=4)
hof_update = jax.jit(front.update)


@given(
    st.lists(st.tuples(st.integers(0, 63), st.sampled_from(LOSSES[:-1] + [0.25])), min_size=16, max_size=16)
)
def test_hall_of_fame_update_equals_the_sequential_reference(draws):
    picks = np.array([d[0] for d in draws])
    loss = np.array([d[1] for d in draws], np.float32)
    forest = POOL[picks]
    length = np.asarray(forest.length)
    hof = front.HallOfFame.empty(HOF_L)
    want_loss, want_rows = np.full(HOF_L, np.inf, np.float32), [None] * HOF_L
    for step in range(2):  # twice: the second pass only replaces on a strictly better loss
        hof = hof_update(hof, forest, loss - step * 0.25, None)
        want_loss, want_rows = ref_hof_update(want_loss, want_rows, forest, loss - step * 0.25, length)
        np.testing.assert_array_equal(np.asarray(hof.loss), want_loss)
        for c, row in enumerate(want_rows):
            expect = POOL.opcode[picks[row]] if row is not None else jnp.zeros(HOF_L, jnp.int32)
            np.testing.assert_array_equal(np.asarray(hof.forest.opcode[c]), np.asarray(expect))
            if row is not None:
                assert int(hof.forest.length[c]) == c + 1
    mask = np.asarray(hof.front_mask())
    pref = np.minimum.accumulate(np.concatenate([[np.inf], want_loss[:-1]]))
    np.testing.assert_array_equal(mask, np.isfinite(want_loss) & (want_loss < pref))
    assert int(hof.front_size()) == mask.sum()


def test_hall_of_fame_refuses_a_forest_of_another_max_len():
    with pytest.raises(ArgumentError, match=r"forest must be \[pop, 12\]"):
        front.update(front.HallOfFame.empty(HOF_L), Forest.empty(3, 8), jnp.zeros(3))


# -- PySR's score and model selection -----------------------------------------------------------------------


def test_front_scores_follow_pysr():
    loss = np.array([1.0, 0.5, 0.1, 0.0])
    c = np.array([1, 3, 4, 9])
    score = np.asarray(front.front_scores(loss, c))
    np.testing.assert_allclose(score[:3], [0.0, np.log(2) / 2, np.log(5)], rtol=1e-6)
    assert score[3] == np.inf  # PySR: a member of loss 0 scores +inf
    masked = np.asarray(front.front_scores([1.0, 9.0, 0.5], [1, 2, 3], valid=[True, False, True]))
    np.testing.assert_allclose(masked[[0, 2]], [0.0, np.log(2) / 2], rtol=1e-6)
    assert np.isnan(masked[1])


def test_select_model_rules_on_hand_made_fronts():
    # scores: 0, log(2)/1 = 0.69, log(1.2)/1 = 0.18, log(10)/10 = 0.23
    loss, c = np.array([1.0, 0.5, 0.5 / 1.2, 0.5 / 12]), np.array([1, 2, 3, 13])
    assert int(front.select_model(loss, c, "accuracy")) == 3
    assert int(front.select_model(loss, c, "score")) == 1
    # "best": only members with loss <= 1.5 * min: the last one alone
    assert int(front.select_model(loss, c, "best")) == 3
    loss2 = np.array([1.0, 0.5, 0.2, 0.19])  # 0.2 <= 1.5 * 0.19: member 2 (score log 2.5) beats 3
    assert int(front.select_model(loss2, np.array([1, 2, 3, 10]), "best")) == 2
    loss3 = np.array([1.0, 0.3, 0.0])  # a loss of 0: the threshold is 0, that member is chosen
    assert int(front.select_model(loss3, np.array([1, 2, 7]), "best")) == 2
    assert int(front.select_model(loss, c, lambda lo, s, cx: jnp.argmax(cx))) == 3
    with pytest.raises(ArgumentError, match="rule"):
        front.select_model(loss, c, "pareto")
    with pytest.raises(ArgumentError, match="losses >= 0"):
        front.select_model(np.array([-0.5, -0.9]), np.array([1, 2]))


# -- the table, its CSV --------------------------------------------------------------------------------------


def test_front_table_rows_csv_round_trip_and_scaling(tmp_path):
    trees = [
        ("var", 0),
        ("sin", ("var", 0)),
        ("add", ("var", 0), ("const", 1.5)),
        ("mul", ("var", 0), ("var", 1)),
    ]
    forest = Forest.from_tuples(trees, HOF_L, FS)
    hof = front.update(front.HallOfFame.empty(HOF_L), forest, jnp.array([0.8, 0.4, 0.5, 0.1]))
    rows = front.front_table(hof, FS)
    assert [r["complexity"] for r in rows] == [1, 2, 3]  # of the two 3-node trees, 0.1 stays
    assert [r["expression"] for r in rows] == ["x0", "sin(x0)", "x0 * x1"]
    assert [r["loss"] for r in rows] == pytest.approx([0.8, 0.4, 0.1])
    assert sum(r["chosen"] for r in rows) == 1 and rows[2]["chosen"]  # 0.1 is the only one <= 1.5 * min
    path = front.write_front_csv(tmp_path / "front.csv", rows)
    back = front.read_front_csv(path)
    assert back == rows
    scaled = front.front_table(
        hof, FS, scaling=lambda f: (jnp.full((len(f), 1), 2.0), jnp.full((len(f), 1), -1.0))
    )
    assert scaled[0]["expression"] == "2*(x0) - 1"
    (tmp_path / "bad.csv").write_text("complexity,loss\n1,2\n")
    with pytest.raises(ArgumentError, match="header"):
        front.read_front_csv(tmp_path / "bad.csv")


# -- GP integration ------------------------------------------------------------------------------------------

PAGIE = Pagie1(backend="jax")


def test_survival_is_checked_at_construction():
    fs = PAGIE.function_set
    with pytest.raises(ArgumentError, match="survival must be one of"):
        GP(16, fs, 2, 16, survival="steady_state")
    with pytest.raises(ArgumentError, match="parsimony_coefficient must be 0 with survival='nsga2'"):
        GP(16, fs, 2, 16, survival="nsga2", parsimony_coefficient=0.01)
    with pytest.raises(ArgumentError, match="selection='lexicase'"):
        GP(16, fs, 2, 16, survival="nsga2", selection="lexicase")
    gp = GP(16, fs, 2, 16, survival="nsga2")
    assert gp.survival == "nsga2" and gp.tournament_size == 2 and GP(16, fs, 2, 16).tournament_size == 7
    assert GP(16, fs, 2, 16, survival=lambda f, n, k, L: jnp.arange(k)).config.survivor.keeps_parents


def test_nsga2_gp_runs_jitted_keeps_the_best_and_survives_as_deb():
    """A few jitted generations on Pagie-1: the survivors' best never worsens, and every tell keeps
    exactly nsga2_order's first pop of [offspring, parents] (a NaN fitness among them)."""
    pop, L = 48, 24
    # crossover only: a much smaller program to compile; survival does not depend on the operators
    gp = GP(pop, PAGIE.function_set, 2, L, survival="nsga2", const_range=(-5.0, 5.0), mutation_rate=0.0)

    @jax.jit
    def step(key, state):
        forest, asked = gp.ask(jax.random.fold_in(key, 0), state)
        fit = PAGIE.evaluate(None, forest).fitness.at[0].set(jnp.nan)
        told, metrics = gp.tell(jax.random.fold_in(key, 1), asked, forest, Evaluation(fitness=fit))
        return told, forest, fit, metrics

    state = gp.init(jax.random.key(3))
    bests = []
    for g in range(5):
        told, forest, fit, metrics = step(jax.random.key(g), state)
        prev = np.where(np.asarray(state.generation) > 0, np.asarray(state.fitness), np.inf)
        both_loss = np.concatenate([np.where(np.isfinite(fit), fit, np.inf), prev])
        both_len = np.concatenate([np.asarray(forest.length), np.asarray(state.forest.length)])
        want = np.asarray(front.nsga2_order(both_loss, both_len, L))[:pop]
        both_op = np.concatenate([np.asarray(forest.opcode), np.asarray(state.forest.opcode)])
        np.testing.assert_array_equal(np.asarray(told.forest.opcode), both_op[want])
        assert int(metrics["front_size"]) == int(told.hall_of_fame.front_size()) >= 1
        bests.append(float(jnp.min(told.fitness)))
        state = told
    assert np.all(np.diff(bests) <= 0) and np.isfinite(bests[-1])
    assert float(np.min(state.hall_of_fame.loss)) == bests[-1]
    state.forest.check(PAGIE.function_set, n_vars=2)
    np.testing.assert_array_equal(np.asarray(gp.selection_fitness(state)), np.arange(pop))


def test_generational_tell_is_unchanged_and_fills_the_hall_of_fame():
    """The default survival keeps today's state bit for bit (NaN handed over raw, as the run loop now
    does, gives the state the stand-ins the run loop used to make), and the hall of fame equals the
    sequential reference on the told population."""
    from evotensor.core.evaluation import to_minimization

    pop, L = 32, 16
    gp = GP(pop, FS, 2, L)
    assert gp.accepts_nonfinite and gp.survival == "generational"
    state = gp.init(jax.random.key(0))
    fit = jnp.linspace(1.0, 2.0, pop).at[3].set(jnp.nan).at[5].set(jnp.inf)
    tell = jax.jit(gp.tell)
    raw, _ = tell(jax.random.key(1), state, state.forest, Evaluation(fitness=fit))
    old = to_minimization(Evaluation(fitness=fit), maximize=False)  # what the loop handed over before
    stand, _ = tell(jax.random.key(1), state, state.forest, old)
    np.testing.assert_array_equal(np.asarray(raw.fitness), np.asarray(stand.fitness))
    np.testing.assert_array_equal(np.asarray(raw.forest.opcode), np.asarray(state.forest.opcode))
    want_loss, _ = ref_hof_update(
        np.full(L, np.inf, np.float32), [None] * L, None, np.asarray(fit), np.asarray(state.forest.length)
    )
    np.testing.assert_array_equal(np.asarray(raw.hall_of_fame.loss), want_loss)
    # the stand-ins of NaN/inf are finite: they enter a hall of fame, the raw non-finite never do
    assert np.isfinite(np.asarray(stand.hall_of_fame.loss)).sum() >= np.isfinite(want_loss).sum()
