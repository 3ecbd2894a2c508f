"""PGA-ME: the TD3 learner and the policy-gradient emitter against slow, per-critic, per-policy
references (hand-written Adam in float64), what they learn, and PGA-ME on QDax's hopper_uni."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from tests.qd.td3_reference import RefAdam, assert_close, ref_q, soft

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.core.replay import Transitions
from evotensor.problems.networks import init_mlp, mlp_apply
from evotensor.qd import (
    BanditMAPElites,
    EmitterGroup,
    GridArchive,
    IsoLineEmitter,
    MAPElites,
    PolicyGradientEmitter,
    pga_me_emitters,
)
from evotensor.qd.emitters.td3 import critic_apply

OBS, ACT = 3, 2


def emitter(**kw):
    policy = init_mlp(jax.random.key(1), (OBS, 4, ACT))
    options = dict(
        batch_size=4,
        critic_hidden_layer_size=(8, 8),
        transitions_batch_size=16,
        num_pg_training_steps=3,
        num_critic_training_steps=4,
        replay_buffer_size=256,
    )
    return PolicyGradientEmitter(policy, mlp_apply, OBS, **{**options, **kw})


def random_transitions(key, n, learnable=False):
    """Random steps; with ``learnable`` the reward is a function of the state and action."""
    k = jax.random.split(key, 6)
    obs = jax.random.normal(k[0], (n, OBS))
    action = jax.random.uniform(k[1], (n, ACT), minval=-1, maxval=1)
    return Transitions(
        obs=obs,
        action=action,
        reward=obs[:, 0] - action[:, 1] if learnable else jax.random.normal(k[2], (n,)),
        next_obs=jax.random.normal(k[3], (n, OBS)),
        done=(jax.random.uniform(k[4], (n,)) < 0.2).astype(jnp.float32),
        truncation=(jax.random.uniform(k[5], (n,)) < 0.2).astype(jnp.float32),
        valid=jnp.ones(n, bool),
    )


def filled_state(em, n=200, seed=0, learnable=False):
    state = em.learner.init(jax.random.key(seed), em.x0)
    steps = random_transitions(jax.random.key(seed + 7), n, learnable)
    return state.replace(buffer=em.learner.buffer.insert(state.buffer, steps))


# -- slow references ------------------------------------------------------------------------------
def ref_actor(em, x, obs):
    return jnp.tanh(mlp_apply(em.unravel(x), obs))


def ref_critic_loss(em, critic, target_critic, target_actor, batch, key):
    noise = np.clip(0.2 * np.asarray(jax.random.normal(key, batch.action.shape)), -0.5, 0.5)
    next_action = jnp.clip(ref_actor(em, target_actor, batch.next_obs) + noise, -1.0, 1.0)
    next_v = jnp.min(ref_q(target_critic, batch.next_obs, next_action), axis=1)
    y = jax.lax.stop_gradient(batch.reward + (1.0 - batch.done) * 0.99 * next_v)
    total = 0.0
    for c in range(2):
        err = (ref_q(critic, batch.obs, batch.action)[:, c] - y) * (1.0 - batch.truncation)
        total = total + jnp.mean(err**2)
    return total


def ref_actor_loss(em, x, critic, batch):
    return -jnp.mean(ref_q(critic, batch.obs, ref_actor(em, x, batch.obs))[:, 0])


# -- tests --------------------------------------------------------------------------------------
def test_twin_critic_equals_two_separate_mlps():
    em = emitter()
    state = em.learner.init(jax.random.key(3), em.x0)
    batch = random_transitions(jax.random.key(4), 10)
    np.testing.assert_allclose(
        critic_apply(state.critic, batch.obs, batch.action),
        ref_q(state.critic, batch.obs, batch.action),
        rtol=1e-5,
    )
    # LeCun-uniform weights within sqrt(3 / fan_in), zero biases, two different critics
    first = np.asarray(state.critic[0]["w"])
    assert np.all(np.abs(first) <= np.sqrt(3 / (OBS + ACT))) and not np.allclose(first[0], first[1])
    assert all(np.all(np.asarray(layer["b"]) == 0) for layer in state.critic)


def test_td3_iteration_equals_the_reference():
    """One iteration: policy_delay = 2 critic steps (each with a soft target-critic update), then a
    greedy-actor step and a soft target-actor update, every step on its own mini-batch."""
    em = emitter()
    learner = em.learner
    state = filled_state(em)
    # make the targets differ from the online networks, as they do after the first iteration
    state = state.replace(
        target_critic=jax.tree_util.tree_map(lambda a: a * 0.9, state.critic), target_actor=state.actor * 1.1
    )
    key = jax.random.key(11)
    new = jax.jit(learner.iteration)(key, state)

    sample_key, *noise_keys = jax.random.split(key, 3)
    batch = learner.buffer.sample(sample_key, state.buffer, 16 * 3)
    parts = [jax.tree_util.tree_map(lambda a, i=i: a[16 * i : 16 * (i + 1)], batch) for i in range(3)]
    critic, target = state.critic, state.target_critic
    adam = RefAdam(critic, 3e-4)
    for part, k in zip(parts[:2], noise_keys, strict=True):
        grad = jax.grad(
            lambda c, part=part, k=k, target=target: ref_critic_loss(
                em, c, target, state.target_actor, part, k
            )
        )(critic)
        critic = adam.step(critic, grad)
        target = soft(target, critic)
    actor_grad = jax.grad(lambda x: ref_actor_loss(em, x, critic, parts[2]))(state.actor)
    actor = RefAdam(state.actor, 3e-4).step(state.actor, actor_grad)
    assert_close(new.critic, critic)
    assert_close(new.target_critic, target)
    assert_close(new.actor, actor)
    assert_close(new.target_actor, soft(state.target_actor, actor))
    assert not np.allclose(np.asarray(new.actor), np.asarray(state.actor))


def test_policy_gradient_variation_equals_per_policy_adam():
    """Each parent takes num_pg_training_steps Adam steps (lr 1e-3, fresh state) on the actor loss
    against the fixed critic; all parents share each step's mini-batch."""
    em = emitter()
    td3 = filled_state(em)
    from evotensor.qd.emitters.policy_gradient import PolicyGradientState

    state = PolicyGradientState(td3=td3)
    parents = em.x0[None] + 0.3 * jax.random.normal(jax.random.key(5), (3, em.solution_dim))
    key = jax.random.key(6)
    out = jax.jit(em.improve)(key, state, parents)
    for i in range(3):
        x = parents[i]
        adam = RefAdam(x, 1e-3)
        for k in jax.random.split(key, 3):
            batch = em.learner.buffer.sample(k, td3.buffer, 16)
            x = adam.step(x, jax.grad(lambda x, batch=batch: ref_actor_loss(em, x, td3.critic, batch))(x))
        np.testing.assert_allclose(np.asarray(out[i]), x, rtol=2e-4, atol=2e-5)
    # an empty buffer leaves the parents unchanged
    empty = PolicyGradientState(td3=em.learner.init(jax.random.key(0), em.x0))
    np.testing.assert_array_equal(em.improve(key, empty, parents), parents)


def test_td3_learns_and_the_variation_climbs_the_critic():
    """On a fixed buffer whose reward depends on state and action, training lowers the critic
    loss; the PG steps raise Q_1 of the policies."""
    em = emitter(num_pg_training_steps=50, transitions_batch_size=64, critic_learning_rate=3e-3)
    learner = em.learner
    state = filled_state(em, n=256, learnable=True)
    everything = jax.tree_util.tree_map(lambda a: a[:256], state.buffer.data)
    key = jax.random.key(0)

    def loss(s):
        return float(learner.critic_loss(s.critic, s.target_critic, s.target_actor, everything, key))

    trained = jax.jit(learner.train, static_argnums=2)(jax.random.key(1), state, 300)
    assert loss(trained) < 0.5 * loss(state)
    from evotensor.qd.emitters.policy_gradient import PolicyGradientState

    parents = em.x0[None] + 0.3 * jax.random.normal(jax.random.key(2), (4, em.solution_dim))
    better = jax.jit(em.improve)(jax.random.key(3), PolicyGradientState(td3=trained), parents)
    before = jax.vmap(lambda x: learner.actor_loss(x, trained.critic, everything))(parents)
    after = jax.vmap(lambda x: learner.actor_loss(x, trained.critic, everything))(better)
    assert np.all(np.asarray(after) < np.asarray(before))


def test_tell_without_transitions_and_misplaced_emitters_are_refused():
    em = emitter()
    archive = GridArchive(solution_dim=em.solution_dim, dims=(4,), ranges=[(0, 1)])
    me = MAPElites(archive, [em])
    state = me.init(jax.random.key(0))
    x, state = me.ask(jax.random.key(1), state)
    evaluation = Evaluation(
        fitness=jnp.zeros(4), descriptor=jnp.full((4, 1), 0.5), info={"return_std": jnp.zeros(4)}
    )
    with pytest.raises(ArgumentError, match="transitions=True"):
        me.tell(jax.random.key(2), state, x, evaluation)
    with pytest.raises(ArgumentError, match="EmitterGroup"):
        EmitterGroup(em, 2)
    with pytest.raises(ArgumentError, match="MAPElites"):
        BanditMAPElites(archive, [em, emitter()], num_active=1)


def test_pga_me_emitters_split_the_batch_as_qdax():
    policy = init_mlp(jax.random.key(0), (OBS, 4, ACT))
    pg, ga = pga_me_emitters(policy, mlp_apply, OBS, replay_buffer_size=1000)
    assert isinstance(ga, IsoLineEmitter) and (pg.batch_size, ga.batch_size) == (50, 50)
    assert (ga.iso_sigma, ga.line_sigma) == (0.005, 0.05) and pg.iterations == 150
    np.testing.assert_array_equal(ga.x0, ravel_pytree(policy)[0])
    pg, ga = pga_me_emitters(policy, mlp_apply, OBS, env_batch_size=7, proportion_mutation_ga=0.3)
    assert (pg.batch_size, ga.batch_size) == (5, 2)


# -- PGA-ME on a brax task ----------------------------------------------------------------------
def test_pga_me_on_hopper_stores_every_valid_transition_and_injects_the_actor():
    pytest.importorskip("brax")
    from evotensor.problems.networks import ParamsDecoder
    from evotensor.problems.qd_control import BraxQDProblem

    T = 20
    problem = BraxQDProblem("hopper_uni", episode_length=T, transitions=True)
    params = init_mlp(jax.random.key(0), (problem.observation_size, 4, problem.output_size))
    decoder = ParamsDecoder(mlp_apply)
    emitters = pga_me_emitters(
        params,
        decoder.apply,
        problem.observation_size,
        env_batch_size=8,
        num_pg_training_steps=4,
        num_critic_training_steps=6,
        critic_hidden_layer_size=(16,),
        transitions_batch_size=32,
        replay_buffer_size=10_000,
    )
    x0 = emitters[0].x0
    archive = GridArchive(solution_dim=x0.size, dims=(8,), ranges=problem.descriptor_ranges)
    me = MAPElites(archive, emitters, solution=params)

    @jax.jit
    def generation(key, state):
        k1, k2, k3 = jax.random.split(key, 3)
        genotypes, state = me.ask(k1, state)
        ev = problem.evaluate(k2, genotypes, decoder.apply)
        before = state
        state, _ = me.tell(k3, state, genotypes, Evaluation(-ev.fitness, ev.descriptor, ev.info))
        return genotypes, ev, before, state

    state = me.init(jax.random.key(0))
    stored = 0
    for g in range(3):
        genotypes, ev, before, state = generation(jax.random.key(10 + g), state)
        t = ev.info["transitions"]
        assert t.obs.shape == (8, 1, T, problem.observation_size) and t.action.shape == (8, 1, T, 3)
        valid = np.asarray(t.valid)[:, 0]
        lengths = valid.sum(axis=1)
        np.testing.assert_array_equal(lengths, np.asarray(ev.info["episode_length"]))
        # the valid steps are a prefix; rewards sum to the fitness; steps chain obs -> next_obs
        assert np.all(valid == (np.arange(T)[None] < lengths[:, None]))
        rewards = np.where(valid, np.asarray(t.reward)[:, 0], 0.0).sum(axis=1)
        np.testing.assert_allclose(rewards, np.asarray(ev.fitness), rtol=1e-5, atol=1e-5)
        obs, nxt = np.asarray(t.obs)[:, 0], np.asarray(t.next_obs)[:, 0]
        both = valid[:, 1:]
        np.testing.assert_array_equal(obs[:, 1:][both], nxt[:, :-1][both])
        done = np.asarray(t.done)[:, 0]
        last = lengths - 1
        assert np.all(done[np.arange(8), last] == 1)  # a fall, or the time limit (truncation)
        # truncation: only at the time limit (a hopper falling at that very step is terminal)
        trunc = np.asarray(t.truncation)[:, 0]
        assert np.all(trunc[np.arange(T)[None] != last[:, None]] == 0)
        assert np.all(trunc[np.arange(8), last] <= (lengths == T))
        # QDax's use_all_data: the buffer holds every valid step of all 8 rows (both emitters)
        stored += int(lengths.sum())
        assert int(state.emitters[0].td3.buffer.size) == stored
        if g > 0:  # actor injection: the PG batch's last row is the greedy actor
            pg_rows = np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: a[3], genotypes))[0])
            np.testing.assert_array_equal(pg_rows, np.asarray(before.emitters[0].td3.actor))
    td3 = state.emitters[0].td3
    assert not np.allclose(np.asarray(td3.actor), np.asarray(x0))  # the greedy actor was trained
    assert int(state.archive.occupied.sum()) >= 1


def test_a_fresh_state_can_be_donated():
    """No two leaves of the initial state share a buffer (nor with the emitter's x0): the run loop
    and the GPU check donate the state to each generation."""
    em = emitter()
    me = MAPElites(GridArchive(solution_dim=em.solution_dim, dims=(4,), ranges=[(0, 1)]), [em])
    for init in (me.init, jax.jit(me.init)):
        state = init(jax.random.key(0))
        jax.block_until_ready(jax.jit(lambda s: s, donate_argnums=0)(state))
        assert np.all(np.isfinite(np.asarray(em.x0)))  # x0 was not donated with the state


def test_a_diverging_critic_never_makes_the_state_non_finite():
    """Rewards of 1e30 (finite in float32) overflow the squared TD error: those training steps are
    skipped and the policy-gradient variation returns such parents unchanged."""
    em = emitter()
    learner = em.learner
    state = em.learner.init(jax.random.key(0), em.x0)
    steps = random_transitions(jax.random.key(1), 64)
    steps = steps.replace(reward=jnp.full(64, 1e30, jnp.float32))
    state = state.replace(buffer=learner.buffer.insert(state.buffer, steps))
    assert int(state.buffer.size) == 64  # finite rows are stored
    trained = jax.jit(learner.train, static_argnums=2)(jax.random.key(2), state, 5)
    for leaf in jax.tree_util.tree_leaves(trained):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf)))
    from evotensor.qd.emitters.policy_gradient import PolicyGradientState

    parents = em.x0[None] + jax.random.normal(jax.random.key(3), (3, em.solution_dim))
    out = em.improve(jax.random.key(4), PolicyGradientState(td3=trained), parents)
    assert np.all(np.isfinite(np.asarray(out)))
