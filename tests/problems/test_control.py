"""Control rollouts: the compiled, masked, batched rollout equals a plain host loop."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.problems.control import GymnaxProblem, _split_step_output, _stable_order, vmap_episodes
from evotensor.problems.networks import ParamsDecoder, init_mlp, mlp_apply

DECODER = ParamsDecoder(mlp_apply)


def population(problem, size, seed=0, scale=1.0):
    params = init_mlp(jax.random.key(seed), (problem.observation_size, 8, problem.output_size))
    noise = jax.random.split(jax.random.key(seed + 1), len(jax.tree_util.tree_leaves(params)))
    leaves, treedef = jax.tree_util.tree_flatten(params)
    pop = [a[None] + scale * jax.random.normal(k, (size, *a.shape)) for a, k in zip(leaves, noise)]
    return jax.tree_util.tree_unflatten(treedef, pop)


def host_loop_returns(problem, pop, key):
    """Reference: one Python loop per episode, stopping at the first done (no masking needed)."""
    size = jax.tree_util.tree_leaves(pop)[0].shape[0]
    keys = jax.random.split(key, size * problem.num_episodes).reshape((size, problem.num_episodes))
    out = np.zeros((size, problem.num_episodes))
    lengths = np.zeros((size, problem.num_episodes), int)
    for i in range(size):
        params = jax.tree.map(lambda a, i=i: a[i], pop)
        for e in range(problem.num_episodes):
            k_reset, k_steps = jax.random.split(keys[i, e])
            obs, state = problem.env.reset(k_reset, problem.env_params)
            total = 0.0
            for t, k in enumerate(jax.random.split(k_steps, problem.max_steps)):
                action = problem.action(mlp_apply(params, jnp.ravel(obs)))
                stepped = problem.env.step(k, state, action, problem.env_params)
                obs, state, reward, done = _split_step_output(stepped)
                total += float(reward)
                lengths[i, e] = t + 1
                if bool(done):
                    break
            out[i, e] = total
    return out, lengths


def test_step_tuple_of_any_length():
    obs, state = jnp.zeros(3), {"s": jnp.ones(2)}
    five = (obs, state, 1.5, jnp.array(True), {"x": 0})
    six = (obs, state, 2.0, jnp.array(False), jnp.array(True), {"x": 0})
    six_none = (obs, state, 2.0, jnp.array(False), jnp.array(False), {})
    assert bool(_split_step_output(five)[3]) and float(_split_step_output(five)[2]) == 1.5
    assert bool(_split_step_output(six)[3])  # truncated counts as done
    assert not bool(_split_step_output(six_none)[3])
    with pytest.raises(ValueError, match="done"):
        _split_step_output((obs, state, 1.0, {}))


@pytest.mark.parametrize(
    "name, obs, out, discrete",
    [
        ("CartPole-v1", 4, 2, True),
        ("Acrobot-v1", 6, 3, True),
        ("Pendulum-v1", 3, 1, False),
        ("MountainCar-v0", 2, 3, True),
    ],
)
def test_gymnax_spaces(name, obs, out, discrete):
    p = GymnaxProblem(name)
    assert (p.observation_size, p.output_size, p.discrete) == (obs, out, discrete)
    assert p.maximize is True and p.kind == "policy"
    assert p.max_steps == int(p.env_params.max_steps_in_episode)


def test_continuous_action_range():
    p = GymnaxProblem("Pendulum-v1")
    acts = np.array([float(p.action(jnp.array([v]))[0]) for v in (-1e6, -1.0, 0.0, 1.0, 1e6)])
    np.testing.assert_allclose(acts[[0, 2, 4]], [-2.0, 0.0, 2.0], atol=1e-5)
    assert np.all(np.diff(acts) > 0) and np.all(np.abs(acts) <= 2.0)
    cart = GymnaxProblem("CartPole-v1")
    assert int(cart.action(jnp.array([0.1, 0.7]))) == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="env_name"):
        GymnaxProblem("CartPole-v9")
    with pytest.raises(ValueError, match="num_episodes"):
        GymnaxProblem("CartPole-v1", num_episodes=0)
    with pytest.raises(ValueError, match="max_steps"):
        GymnaxProblem("CartPole-v1", max_steps=-3)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-episode", "2-episodes"])
def cartpole(request):
    problem = GymnaxProblem("CartPole-v1", num_episodes=request.param, max_steps=120)
    pop = population(problem, 5, scale=0.7)
    key = jax.random.key(42)
    ev = jax.jit(lambda k, ph: problem.evaluate(k, ph, DECODER.apply))(key, pop)
    return problem, pop, key, ev


def test_cartpole_matches_host_loop(cartpole):
    problem, pop, key, ev = cartpole
    returns, lengths = host_loop_returns(problem, pop, key)
    np.testing.assert_allclose(np.asarray(ev.fitness), returns.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ev.info["episode_length"]), lengths.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ev.info["return_std"]), returns.std(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("episodes", [1, 3])
def test_vmap_episodes_runs_every_individual_and_episode(episodes):
    """Outputs ``[pop, E, ...]``: entry ``[i, e]`` is ``episode(phenotype i, key [i, e])``, for a
    pytree of outputs (the single-vmap path at E = 1 included)."""
    phenotypes = {"w": jnp.arange(4 * 3, dtype=jnp.float32).reshape(4, 3), "b": jnp.arange(4.0)}
    keys = jax.random.split(jax.random.key(3), 4 * episodes).reshape(4, episodes)

    def episode(p, k):
        noise = jax.random.normal(k, (3,))
        return {"value": p["w"] @ noise + p["b"], "pair": (noise, p["b"])}

    got = jax.jit(lambda p, k: vmap_episodes(episode, p, k))(phenotypes, keys)
    assert got["value"].shape == (4, episodes) and got["pair"][0].shape == (4, episodes, 3)
    for i in range(4):
        for e in range(episodes):
            want = episode(jax.tree.map(lambda a, i=i: a[i], phenotypes), keys[i, e])
            np.testing.assert_allclose(got["value"][i, e], want["value"], rtol=1e-6)
            # jitted and vmapped against eager: the normal draws round alike only to float32 precision
            np.testing.assert_allclose(got["pair"][0][i, e], want["pair"][0], rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(got["pair"][1][i, e], want["pair"][1])


def test_cartpole_done_mask(cartpole):
    problem, _, _, ev = cartpole
    fitness = np.asarray(ev.fitness)
    # Reward is 1 per step, so with the mask the return is exactly the episode length, never more
    # than the scan length even though gymnax auto-resets and keeps stepping after termination.
    np.testing.assert_array_equal(fitness, np.asarray(ev.info["episode_length"]))
    assert np.all((fitness >= 1) & (fitness <= problem.max_steps))
    assert fitness.shape == (5,)
    assert len(set(fitness.tolist())) > 1  # different policies, different returns


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Acrobot-v1", "Pendulum-v1", "MountainCar-v0"])
def test_other_gymnax_envs_match_host_loop(name):
    problem = GymnaxProblem(name, num_episodes=2, max_steps=60)
    pop = population(problem, 3)
    key = jax.random.key(7)
    ev = jax.jit(lambda k, ph: problem.evaluate(k, ph, DECODER.apply))(key, pop)
    returns, lengths = host_loop_returns(problem, pop, key)
    np.testing.assert_allclose(np.asarray(ev.fitness), returns.mean(axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(ev.info["episode_length"]), lengths.mean(axis=1))


@pytest.mark.slow
def test_brax_rollout_matches_host_loop():
    from evotensor.problems.control import BraxProblem

    with pytest.raises(ValueError, match="env_name"):
        BraxProblem("no_such_robot")
    problem = BraxProblem("inverted_pendulum", episode_length=15, num_episodes=2)
    assert (problem.observation_size, problem.output_size) == (4, 1)
    pop = population(problem, 3, scale=2.0)
    key = jax.random.key(3)
    ev = jax.jit(lambda k, ph: problem.evaluate(k, ph, DECODER.apply))(key, pop)
    keys = jax.random.split(key, 3 * 2).reshape((3, 2))
    reset, step = jax.jit(problem.env.reset), jax.jit(problem.env.step)
    expected = np.zeros((3, 2))
    for i in range(3):
        params = jax.tree.map(lambda a, i=i: a[i], pop)
        for e in range(2):
            state = reset(keys[i, e])
            for _ in range(problem.episode_length):
                state = step(state, jnp.tanh(mlp_apply(params, state.obs)))
                expected[i, e] += float(state.reward)
                if float(state.done) > 0:
                    break
    np.testing.assert_allclose(np.asarray(ev.fitness), expected.mean(axis=1), rtol=1e-4, atol=1e-4)


class CountingPolicy:
    """A tiny stateful policy: its state counts the steps of the episode; the action is
    ``(count // period) % 2`` with the period from the phenotype, so it depends on the carried state."""

    def init_state(self, phenotype):
        return jnp.zeros((), jnp.int32)

    def step(self, phenotype, state, obs):
        period = phenotype["period"]
        right = (state // period) % 2
        y = jnp.stack([1.0 - right, right]).astype(jnp.float32) + 0.0 * jnp.sum(obs)
        return state + 1, y


def test_stateful_policy_carries_state_and_resets_per_episode():
    from evotensor.problems.control import StatefulPolicy, is_stateful

    policy = CountingPolicy()
    assert is_stateful(policy) and isinstance(policy, StatefulPolicy)
    assert not is_stateful(DECODER.apply)
    problem = GymnaxProblem("CartPole-v1", num_episodes=2, max_steps=80)
    pop = {"period": jnp.asarray([1, 2, 3, 50], jnp.int32)}
    key = jax.random.key(5)
    ev = jax.jit(lambda k, ph: problem.evaluate(k, ph, policy))(key, pop)
    keys = jax.random.split(key, 4 * 2).reshape((4, 2))
    expected = np.zeros((4, 2))
    reset, env_step = jax.jit(problem.env.reset), jax.jit(problem.env.step)
    for i, period in enumerate([1, 2, 3, 50]):
        for e in range(2):
            k_reset, k_steps = jax.random.split(keys[i, e])
            obs, state = reset(k_reset, problem.env_params)
            for t, k in enumerate(jax.random.split(k_steps, problem.max_steps)):
                action = (t // period) % 2  # the counter restarts at 0 in every episode
                stepped = env_step(k, state, jnp.int32(action), problem.env_params)
                obs, state, reward, done = _split_step_output(stepped)
                expected[i, e] += float(reward)
                if bool(done):
                    break
    np.testing.assert_allclose(np.asarray(ev.fitness), expected.mean(axis=1))
    assert len(set(np.asarray(ev.fitness).tolist())) > 1  # the carried count changes the actions


def test_chunked_rollout_is_the_scan_bit_for_bit(cartpole):
    """The early-exit rollout (GymnaxProblem(chunk=K)) gives the scan's returns, lengths and
    spreads exactly: every individual's episodes take the same steps with the same keys (5
    individuals in chunks of 2: one padding slot)."""
    problem, pop, key, a = cartpole
    early = GymnaxProblem(
        "CartPole-v1", num_episodes=problem.num_episodes, max_steps=problem.max_steps, chunk=2
    )
    b = jax.jit(lambda k, ph: early.evaluate(k, ph, DECODER.apply))(key, pop)
    for got, want in ((b.fitness, a.fitness), *((b.info[k], a.info[k]) for k in a.info)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    lengths = np.asarray(a.info["episode_length"])
    assert len(set(lengths.tolist())) > 1 and lengths.min() < problem.max_steps  # some end early


_stable_order_jit = jax.jit(_stable_order, static_argnums=1)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda v: st.tuples(st.just(v), st.lists(st.integers(0, v - 1), min_size=48, max_size=48))
    )
)
def test_compaction_order_is_a_stable_argsort(case):
    """The rollout's compaction order (a counting sort over a few key values) is NumPy's stable
    argsort: running individuals first by tier, each group in slot order."""
    values, key = case
    got = _stable_order_jit(jnp.asarray(key, jnp.int32), values)
    np.testing.assert_array_equal(np.asarray(got), np.argsort(np.asarray(key), kind="stable"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, size, episodes, max_steps, chunk",
    [
        ("CartPole-v1", 7, 2, 61, 3),  # padding slots, a last block shorter than the others
        ("Pendulum-v1", 3, 1, 20, 2),  # no episode ends early: every chunk runs to the end
    ],
)
def test_chunked_rollout_other_shapes(name, size, episodes, max_steps, chunk):
    scan = GymnaxProblem(name, num_episodes=episodes, max_steps=max_steps)
    early = GymnaxProblem(name, num_episodes=episodes, max_steps=max_steps, chunk=chunk)
    pop = population(scan, size, seed=3, scale=0.7)
    key = jax.random.key(11)
    a = jax.jit(lambda k, ph: scan.evaluate(k, ph, DECODER.apply))(key, pop)
    b = jax.jit(lambda k, ph: early.evaluate(k, ph, DECODER.apply))(key, pop)
    for got, want in ((b.fitness, a.fitness), *((b.info[k], a.info[k]) for k in a.info)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", ["CartPole-v1", pytest.param("Acrobot-v1", marks=pytest.mark.slow)])
@pytest.mark.fusion_emitters
def test_step_without_auto_reset_is_env_step_bit_for_bit(name):
    """The rollout steps gymnax envs without their auto-reset (never seen behind the done-mask): up to
    each episode's end, observations, rewards and done flags are ``env.step``'s bit for bit (500
    episodes of 40 steps; inlined without a jit boundary, XLA rounded CartPole's dynamics an ulp
    differently and episodes drifted apart)."""
    problem = GymnaxProblem(name)
    env, params = problem.env, problem.env_params
    assert problem._skip_reset

    def rollout(step, key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = env.reset(k_reset, params)

        def body(carry, k):
            obs, state = carry
            action = problem.action(
                jnp.stack([obs[1] + 0.3 * obs[2], 0.01 * obs[0], obs[3]])[: problem.output_size]
            )
            obs, state, reward, done = _split_step_output(step(k, state, action, params))
            return (obs, state), (obs, reward, done)

        return jax.lax.scan(body, (obs, state), jax.random.split(k_steps, 40))[1]

    keys = jax.random.split(jax.random.key(0), 500)
    lean = jax.jit(jax.vmap(lambda k: rollout(problem._env_step, k)))(keys)
    full = jax.jit(jax.vmap(lambda k: rollout(env.step, k)))(keys)
    done = np.asarray(full[2])
    before = np.cumsum(done, axis=1) == 0  # steps before the first done
    upto = np.cumsum(done, axis=1) - done == 0  # ... and the first done (env.step's obs is a reset)
    assert before.sum() > 2500 and (done.any() or name != "CartPole-v1")
    np.testing.assert_array_equal(np.asarray(lean[0])[before], np.asarray(full[0])[before])
    for a, b in zip(lean[1:], full[1:]):
        np.testing.assert_array_equal(np.asarray(a)[upto], np.asarray(b)[upto])


def test_env_with_its_own_step_keeps_it():
    import gymnax

    from evotensor.problems.control import _skips_reset

    env, _ = gymnax.make("DeepSea-bsuite")  # overrides Environment.step
    assert not _skips_reset(env) and not GymnaxProblem("DeepSea-bsuite")._skip_reset
    problem = pickle.loads(pickle.dumps(GymnaxProblem("CartPole-v1", chunk=4)))  # still picklable
    assert problem._skip_reset and problem.chunk == 4


def test_chunk_argument():
    with pytest.raises(ValueError, match="chunk"):
        GymnaxProblem("CartPole-v1", chunk=0)
    assert "chunk=64" in repr(GymnaxProblem("CartPole-v1", chunk=64))
    assert "chunk" not in repr(GymnaxProblem("CartPole-v1"))


@pytest.mark.slow
def test_chunked_rollout_carries_policy_state():
    """A stateful policy's state moves with its individual through the early exit's compactions."""
    policy = CountingPolicy()
    pop = {"period": jnp.asarray([1, 2, 3, 50, 7], jnp.int32)}
    key = jax.random.key(5)
    scan = GymnaxProblem("CartPole-v1", num_episodes=2, max_steps=80)
    early = GymnaxProblem("CartPole-v1", num_episodes=2, max_steps=80, chunk=2)
    a = jax.jit(lambda k, ph: scan.evaluate(k, ph, policy))(key, pop)
    b = jax.jit(lambda k, ph: early.evaluate(k, ph, policy))(key, pop)
    np.testing.assert_array_equal(np.asarray(b.fitness), np.asarray(a.fitness))
    assert len(set(np.asarray(a.fitness).tolist())) > 1


def test_first_argmax_is_jnp_argmax():
    """The select-chain argmax of the batched rollout: ties give the first, NaN wins (the first)."""
    from evotensor.problems.control import _first_argmax

    values = np.asarray([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3):
        y = jnp.asarray(rng.choice(values, size=(4000, n)))
        np.testing.assert_array_equal(np.asarray(_first_argmax(y)), np.asarray(jnp.argmax(y, axis=-1)))


class _Planned:
    """mlp_apply with batch paths: path 0 gives zeros (action 0 always), path 1 the real outputs;
    ``index`` says which the rollout is told to take (the same for every individual)."""

    def __init__(self, index):
        self.index = index

    def __call__(self, params, obs):
        return mlp_apply(params, obs)

    def batch_paths(self, params):
        def real(p, obs):
            # obs [B, K, ...]: the phenotypes on the second axis
            one = jax.vmap(lambda q, xs: jax.vmap(lambda o: mlp_apply(q, o))(xs), in_axes=(0, 1), out_axes=1)
            return one(p, obs)

        def zeros(p, obs):
            return jnp.zeros(obs.shape[:2] + (2,), jnp.float32)

        size = jax.tree_util.tree_leaves(params)[0].shape[:1]
        return jnp.full(size, self.index, jnp.int32), (zeros, real)


def test_chunked_rollout_takes_the_planned_batch_path(cartpole):
    """A policy with batch_paths: the chunked rollout steps with the path it names (index 1, the
    real outputs: the scan's returns bit for bit; path 0 would always push left)."""
    from evotensor.problems.control import is_batched

    problem, pop, key, a = cartpole
    early = GymnaxProblem(
        "CartPole-v1", num_episodes=problem.num_episodes, max_steps=problem.max_steps, chunk=2
    )
    assert is_batched(_Planned(1)) and not is_batched(DECODER.apply)
    b = jax.jit(lambda k, ph: early.evaluate(k, ph, _Planned(1)))(key, pop)
    for got, want in ((b.fitness, a.fitness), *((b.info[k], a.info[k]) for k in a.info)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.slow
def test_chunked_rollout_of_neat_networks_is_the_scan():
    """NEAT feedforward networks (batch_paths: compact rows on a CPU) in the chunked rollout give
    the returns of the plain scan, which runs each network's own forward pass. The genomes are
    mutated first (eight rounds of frequent node and connection additions), so the population spans
    every width tier of the compact path (no hidden node up to wider than the widest tier)."""
    from evotensor.neat import NEAT
    from evotensor.neat.mutation import mutate
    from evotensor.neat.network import COMPACT_WIDTHS

    strategy = NEAT.from_mode("neat-python", 4, 2, population_size=16, max_nodes=24, max_conns=64)
    grow = dataclasses.replace(
        strategy.config.mutation, node_add_prob=0.6, node_delete_prob=0.0, conn_add_prob=0.6
    )
    state = strategy.init(jax.random.key(3))
    genomes, nk, ni = state.population, state.next_node_key, state.next_innov
    step = jax.jit(mutate, static_argnums=(1, 2))
    for g in range(8):
        genomes, nk, ni, _ = step(jax.random.key(100 + g), strategy.spec, grow, genomes, nk, ni)
    non_input = np.sum(np.asarray(genomes.node_key) >= 0, axis=1)  # outputs + hidden nodes
    assert non_input.min() <= COMPACT_WIDTHS[0] and non_input.max() > COMPACT_WIDTHS[-1], non_input
    assert len(set(non_input.tolist())) >= 4, non_input
    scan = GymnaxProblem("CartPole-v1", num_episodes=2, max_steps=100)
    early = GymnaxProblem("CartPole-v1", num_episodes=2, max_steps=100, chunk=4)
    dec, key = strategy.decoder, jax.random.key(5)
    a = jax.jit(lambda k, g: scan.evaluate(k, dec.decode(g), dec.apply))(key, genomes)
    b = jax.jit(lambda k, g: early.evaluate(k, dec.decode(g), dec.apply))(key, genomes)
    np.testing.assert_array_equal(np.asarray(b.fitness), np.asarray(a.fitness))
    np.testing.assert_array_equal(np.asarray(b.info["episode_length"]), np.asarray(a.info["episode_length"]))
    assert len(set(np.asarray(a.fitness).tolist())) > 1
