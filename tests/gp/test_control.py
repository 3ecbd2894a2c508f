"""GP trees as control policies (evotensor.gp.control): the decoder against the reference
interpreter, the problems' action mappings on tree outputs, and the checks at construction."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, Forest, FunctionSet, reference_eval
from evotensor.gp.control import (
    CONTROL_FUNCTIONS,
    PolicyGP,
    TreePolicy,
    check_control_problem,
    choose_evaluator,
    control_function_set,
    gp_for_control,
    policy_expressions,
)
from evotensor.gp.native import AVAILABLE as NATIVE_AVAILABLE

from .tree_helpers import FS, N_VARS, forests

pytest.importorskip("gymnax")
from evotensor.problems.control import GymnaxProblem  # noqa: E402

POP, L = 6, 24


def _batched(policy):
    """apply as the rollout calls it: vmap over the population, each tree on its own observation."""
    return jax.jit(jax.vmap(policy.apply))


# the one-tree interpreter, and the native evaluator ("forest" on a CPU) where it is built
_POLICIES = {("tree", n): TreePolicy(FS, N_VARS, n, evaluator="tree") for n in (1, 3)}
if NATIVE_AVAILABLE:
    _POLICIES.update(
        {("native", n): TreePolicy(FS, N_VARS, n, evaluator="forest", backend="native") for n in (1, 3)}
    )
_APPLY = {k: _batched(p) for k, p in _POLICIES.items()}


@given(data=st.data(), n_outputs=st.sampled_from([1, 3]))
def test_apply_equals_reference_eval_per_tree_and_observation(data, n_outputs):
    forest, _ = data.draw(forests(POP, L, n_outputs))
    obs = np.asarray(
        data.draw(st.lists(st.floats(-3, 3, width=32), min_size=POP * N_VARS, max_size=POP * N_VARS)),
        np.float32,
    ).reshape(POP, N_VARS)
    want = np.stack([reference_eval(forest[t], obs[t : t + 1], FS, n_outputs)[0] for t in range(POP)])
    for (name, n), apply in _APPLY.items():
        if n != n_outputs:
            continue
        got = np.asarray(apply(forest, jnp.asarray(obs)))
        assert got.shape == (POP, n_outputs)
        # the native evaluator's sin is a polynomial within 4 float32 ulps of the true value
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True, err_msg=name)


def test_apply_equals_evaluate_on_a_gp_forest():
    fs = control_function_set()
    gp = GP(16, fs, n_vars=4, n_outputs=2, max_len=32)
    forest = gp.init(jax.random.key(3)).forest
    obs = jax.random.normal(jax.random.key(4), (16, 4))
    want = np.stack([reference_eval(forest[t], np.asarray(obs[t : t + 1]), fs, 2)[0] for t in range(16)])
    policy = TreePolicy.from_gp(gp)  # the "auto" evaluator
    got = _batched(policy)(policy.decode(forest), obs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6, err_msg=policy.evaluator)
    assert np.all(np.isfinite(want))  # protected division: no observation makes an output non-finite


# A classic CartPole controller: push toward the side the pole falls to (angle + angular velocity).
_LEAN = ("modi", 1, ("add", ("var", 2), ("var", 3)))


def _one(tree, fs, max_len=16):
    return Forest.from_tuples([tree], max_len, fs)


def test_discrete_actions_are_the_argmax_of_the_tree_outputs():
    fs = control_function_set()
    problem = GymnaxProblem("CartPole-v1", num_episodes=3, max_steps=200)
    gp, policy = gp_for_control(problem, 8)
    forest = _one(_LEAN, fs)

    def by_hand(_, obs):  # out[0] = 0 (no Modi node writes it), out[1] = x2 + x3
        return jnp.stack([jnp.float32(0.0), obs[2] + obs[3]])

    @jax.jit
    def both(key):
        by_tree = problem.evaluate(key, policy.decode(forest), policy.apply)
        return by_tree, problem.evaluate(key, jnp.zeros((1, 1)), by_hand)

    by_tree, by_fn = both(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(by_tree.fitness), np.asarray(by_fn.fitness))
    assert float(by_tree.fitness[0]) == 200.0  # the controller balances the pole every episode
    obs = jnp.array([0.0, 0.0, 0.05, -0.2])  # x2 + x3 < 0: out = [0, -0.15] -> action 0 (left)
    assert int(problem.action(policy.apply(forest[0], obs))) == 0
    assert int(problem.action(policy.apply(forest[0], -obs))) == 1


def test_continuous_actions_are_the_tanh_squashed_tree_outputs():
    problem = GymnaxProblem("Pendulum-v1", max_steps=50)
    # torque = 2 * tanh(-(3 x2 + x0)): the action box is [-2, 2]
    tree = ("neg", ("add", ("mul", ("const", 3.0), ("var", 2)), ("var", 0)))
    fs = FunctionSet((*CONTROL_FUNCTIONS, "neg"), protected=True)
    policy = TreePolicy(fs, 3, 1)
    forest = _one(tree, fs)
    obs = jnp.array([0.3, -0.8, 0.5])
    y = policy.apply(forest[0], obs)
    np.testing.assert_allclose(np.asarray(y), [-(3 * 0.5 + 0.3)], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(problem.action(y)), 2 * np.tanh([-1.8]), rtol=1e-5)

    @jax.jit
    def both(key):
        by_tree = problem.evaluate(key, policy.decode(forest), policy.apply)
        return by_tree, problem.evaluate(key, jnp.zeros((1, 1)), lambda _, o: -(3.0 * o[2:3] + o[0:1]))

    by_tree, by_fn = both(jax.random.key(1))
    np.testing.assert_allclose(np.asarray(by_tree.fitness), np.asarray(by_fn.fitness), rtol=1e-5)


def test_policy_expressions_one_per_output():
    fs = control_function_set()
    policy = TreePolicy(fs, 4, 2)
    assert policy_expressions(_one(_LEAN, fs)[0], policy) == ["0", "x2 + x3"]
    single = TreePolicy(fs, 4, 1)
    tree = ("mul", ("const", 0.5), ("sub", ("var", 0), ("var", 1)))
    assert policy_expressions(_one(tree, fs)[0], single) == ["0.5*x0 - 0.5*x1"]


def test_gp_for_control_takes_the_problem_sizes():
    problem = GymnaxProblem("Acrobot-v1")
    gp, policy = gp_for_control(problem, 10, tournament_size=3)
    assert (gp.n_vars, gp.n_outputs, gp.population_size, gp.tournament_size) == (6, 3, 10, 3)
    assert (policy.n_vars, policy.n_outputs) == (6, 3)
    assert isinstance(gp, PolicyGP) and gp.decoder is policy and isinstance(gp, GP)
    assert gp.function_set.names == CONTROL_FUNCTIONS and gp.function_set.protected
    assert gp.max_len == 64 and gp.modi_prob == 0.5


def test_sizes_that_do_not_match_the_environment_fail_at_construction():
    problem = GymnaxProblem("CartPole-v1")
    with pytest.raises(ArgumentError, match=r"n_vars=5 .*observations have 4 entries"):
        gp_for_control(problem, 8, n_vars=5)
    with pytest.raises(ArgumentError, match=r"n_outputs=1 .*2 actions"):
        gp_for_control(problem, 8, n_outputs=1)
    gp = GP(8, control_function_set(), n_vars=4, n_outputs=3)
    with pytest.raises(ArgumentError, match="n_outputs=3"):
        TreePolicy.from_gp(gp, problem)
    with pytest.raises(ArgumentError, match="policy problem"):
        check_control_problem(object(), 4, 2)
    unflat = GymnaxProblem("CartPole-v1", flatten_observation=False)
    with pytest.raises(ArgumentError, match="flatten_observation"):
        check_control_problem(unflat, 4, 2)
    with pytest.raises(ArgumentError, match="population_size"):
        gp_for_control(problem, 1)


def test_bad_policy_arguments():
    fs = control_function_set()
    with pytest.raises(ArgumentError, match="evaluator"):
        TreePolicy(fs, 4, 2, evaluator="fast")
    with pytest.raises(ArgumentError, match="backend"):
        TreePolicy(fs, 4, 2, backend="cuda")
    with pytest.raises(ArgumentError, match="n_vars"):
        TreePolicy(fs, 0, 2)
    with pytest.raises(ArgumentError, match="function_set"):
        TreePolicy(("add",), 4, 2)
    with pytest.raises(ArgumentError, match="gp must be"):
        TreePolicy.from_gp(object())
    policy = TreePolicy(fs, 4, 2)
    tree = _one(_LEAN, fs)[0]
    with pytest.raises(ArgumentError, match="n_vars mismatch.*n_vars=4.*of 3"):
        policy.apply(tree, jnp.zeros(3))
    with pytest.raises(ArgumentError, match="one tree"):
        policy.apply(_one(_LEAN, fs), jnp.zeros(4))


def test_a_custom_evaluator_is_used():
    fs = control_function_set()
    calls = []

    def twice(tree, X):
        calls.append(X.shape)
        return 2.0 * TreePolicy(fs, 4, 2, evaluator="tree").apply(tree, X[0])[None]

    policy = TreePolicy(fs, 4, 2, evaluator=twice)
    y = policy.apply(_one(_LEAN, fs)[0], jnp.array([0.0, 0.0, 1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(y), [0.0, 6.0])
    assert calls == [(1, 4)] and policy.evaluator == "twice"


def test_auto_evaluator_per_platform():
    fs = control_function_set()
    custom = FunctionSet(("add", "square"), custom={"square": (1, lambda a: a * a)})
    on_cpu = jax.default_backend() == "cpu"
    assert choose_evaluator(fs) == ("forest" if on_cpu and NATIVE_AVAILABLE else "tree")
    assert choose_evaluator(custom) == "tree"  # the native evaluator has built-in functions only
    assert TreePolicy(custom, 2, 1).evaluator == "tree"


def test_a_malformed_tree_is_refused_or_gives_nan_on_every_evaluator():
    fs = control_function_set()
    good = _one(("add", ("var", 0), ("var", 1)), fs, max_len=4)[0]
    # "add" with one child: the sizes and opcodes do not form a tree
    bad = Forest(
        opcode=good.opcode.at[2].set(0),
        value=good.value.at[2].set(0.0),
        size=good.size.at[0].set(2).at[2].set(0),
        output=good.output,
    )
    obs = jnp.array([1.0, 2.0, 0.0, 0.0])
    for evaluator in ("tree", "forest"):
        policy = TreePolicy(fs, 4, 1, evaluator=evaluator)
        with pytest.raises(ArgumentError, match="tree 0"):
            policy.apply(bad, obs)
        out = jax.jit(policy.apply)(bad, obs)
        assert np.all(np.isnan(np.asarray(out))), evaluator
        np.testing.assert_allclose(np.asarray(jax.jit(policy.apply)(good, obs)), [3.0])
