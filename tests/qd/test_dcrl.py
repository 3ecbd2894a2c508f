"""DCRL-ME: the descriptor-conditioned TD3 step, the policy-gradient variation towards a target
descriptor and the actor injection against slow references; which descriptor every stored
transition is aimed at; the emitter inside MAP-Elites."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.qd.mesh_scenarios import PointMass
from tests.qd.td3_reference import RefAdam, assert_close, ref_q, soft

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.problems.networks import init_mlp
from evotensor.qd import DCRLEmitter, GridArchive, IsoLineEmitter, MAPElites, dcrl_me_emitters
from evotensor.qd.emitters.dcrl import DCTransitions

OBS, ACT, D = 3, 2, 2
RANGES = [(0.0, 1.0), (-2.0, 2.0)]


def emitter(**kw):
    policy = init_mlp(jax.random.key(1), (OBS, 4, ACT))
    options = dict(
        dcrl_batch_size=3,
        ai_batch_size=2,
        critic_hidden_layer_size=(8, 8),
        transitions_batch_size=16,
        num_pg_training_steps=3,
        num_critic_training_steps=4,
        replay_buffer_size=256,
    )
    return DCRLEmitter(policy, RANGES, **{**options, **kw})


def random_rows(key, n):
    k = jax.random.split(key, 8)
    return DCTransitions(
        obs=jax.random.normal(k[0], (n, OBS)),
        action=jax.random.uniform(k[1], (n, ACT), minval=-1, maxval=1),
        reward=jax.random.normal(k[2], (n,)),
        next_obs=jax.random.normal(k[3], (n, OBS)),
        done=(jax.random.uniform(k[4], (n,)) < 0.2).astype(jnp.float32),
        truncation=(jax.random.uniform(k[5], (n,)) < 0.2).astype(jnp.float32),
        valid=jnp.ones(n, bool),
        desc=jax.random.uniform(k[6], (n, D), minval=-1, maxval=1),
        desc_prime=jax.random.uniform(k[7], (n, D), minval=-1, maxval=1),
    )


def filled(em, n=200):
    state = em.init(jax.random.key(0), GridArchive(solution_dim=em.solution_dim, dims=(3, 3), ranges=RANGES))
    td3 = state.td3
    return state.replace(
        td3=td3.replace(buffer=em.learner.buffer.insert(td3.buffer, random_rows(jax.random.key(7), n)))
    )


def ref_mlp(params, x):
    """The policy / conditioned actor written out: tanh hidden layers, tanh of the output."""
    h = x
    for layer in params:
        h = h @ layer["w"] + layer["b"]
        h = jnp.tanh(h)  # hidden activation "tanh", and the action's tanh on the last layer
    return h


def test_the_injected_policy_is_the_conditioned_actor_at_that_descriptor():
    em = emitter()
    actor = em.init_actor(jax.random.key(3))
    assert actor[0]["w"].shape == (OBS + D, 4) and actor[-1]["w"].shape == (4, ACT)
    obs = jax.random.normal(jax.random.key(4), (20, OBS))
    for target in ([0.3, -0.7], [-1.0, 1.0]):
        target = jnp.asarray(target)
        flat = em.injected_policy(actor, target)
        assert flat.shape == (em.solution_dim,)
        conditioned = ref_mlp(actor, jnp.concatenate([obs, jnp.broadcast_to(target, (20, D))], axis=1))
        np.testing.assert_allclose(em.policy_action(flat, obs), conditioned, rtol=1e-5, atol=1e-6)
    # descriptors are normalised to [-1, 1] over the ranges
    np.testing.assert_allclose(em.normalize(jnp.array([[0.0, 2.0], [0.5, 0.0]])), [[-1, 1], [0, 0]])


def ref_critic_loss(em, critic, target_critic, target_actor, batch, key):
    cond = batch.desc_prime
    noise = np.clip(0.2 * np.asarray(jax.random.normal(key, batch.action.shape)), -0.5, 0.5)
    next_action = jnp.clip(ref_mlp(target_actor, jnp.concatenate([batch.next_obs, cond], 1)) + noise, -1, 1)
    next_v = jnp.min(ref_q(target_critic, batch.next_obs, jnp.concatenate([next_action, cond], 1)), axis=1)
    weight = jnp.exp(-jnp.linalg.norm(batch.desc - batch.desc_prime, axis=1) / 0.1)
    reward = jnp.maximum(batch.reward + 0.5, 0.0)  # reward_offset 0.5, clipped at 0
    y = jax.lax.stop_gradient(reward * weight + (1.0 - batch.done) * 0.99 * next_v)
    q = ref_q(critic, batch.obs, jnp.concatenate([batch.action, cond], 1))
    return sum(jnp.mean(((q[:, c] - y) * (1.0 - batch.truncation)) ** 2) for c in range(2))


def ref_actor_loss(actor, critic, batch):
    action = ref_mlp(actor, jnp.concatenate([batch.obs, batch.desc_prime], 1))
    return -jnp.mean(ref_q(critic, batch.obs, jnp.concatenate([action, batch.desc_prime], 1))[:, 0])


def test_conditioned_td3_iteration_equals_the_reference():
    """Rewards offset by 0.5, clipped at 0 and scaled by exp(-|d - d'| / 0.1); critic on [s, a, d'],
    the target actor and the actor on [s, d']; policy_delay = 2 critic steps then one actor step."""
    em = emitter(reward_offset=0.5)
    learner = em.learner
    td3 = filled(em).td3
    td3 = td3.replace(
        target_critic=jax.tree_util.tree_map(lambda a: a * 0.9, td3.critic),
        target_actor=jax.tree_util.tree_map(lambda a: a * 1.1, td3.actor),
    )
    key = jax.random.key(11)
    new = jax.jit(learner.iteration)(key, td3)
    sample_key, *noise_keys = jax.random.split(key, 3)
    batch = learner.buffer.sample(sample_key, td3.buffer, 48)
    parts = [jax.tree_util.tree_map(lambda a, i=i: a[16 * i : 16 * (i + 1)], batch) for i in range(3)]
    critic, target = td3.critic, td3.target_critic
    adam = RefAdam(critic, 3e-4)
    for part, k in zip(parts[:2], noise_keys, strict=True):
        grad = jax.grad(
            lambda c, part=part, k=k, target=target: ref_critic_loss(em, c, target, td3.target_actor, part, k)
        )(critic)
        critic = adam.step(critic, grad)
        target = soft(target, critic)
    actor = RefAdam(td3.actor, 3e-4).step(
        td3.actor, jax.grad(lambda a: ref_actor_loss(a, critic, parts[2]))(td3.actor)
    )
    assert_close(new.critic, critic)
    assert_close(new.target_critic, target)
    assert_close(new.actor, actor)
    assert_close(new.target_actor, soft(td3.target_actor, actor))


def test_policy_gradient_variation_aims_each_parent_at_its_target():
    em = emitter()
    td3 = filled(em).td3
    parents = em.x0[None] + 0.3 * jax.random.normal(jax.random.key(5), (3, em.solution_dim))
    targets = jnp.array([[0.5, -0.5], [-1.0, 1.0], [0.0, 0.0]])
    key = jax.random.key(6)
    out = jax.jit(em.improve)(key, td3, parents, targets)
    first = jax.tree_util.tree_map(lambda a: a[:1], td3.critic)
    for i in range(3):
        x = parents[i]
        adam = RefAdam(x, 1e-3)
        for k in jax.random.split(key, 3):
            batch = em.learner.buffer.sample(k, td3.buffer, 16)

            def loss(x, batch=batch, target=targets[i]):
                action = ref_mlp(em.unravel(x), batch.obs)
                cond = jnp.broadcast_to(target, (16, D))
                return -jnp.mean(ref_q(first, batch.obs, jnp.concatenate([action, cond], 1))[:, 0])

            x = adam.step(x, jax.grad(loss)(x))
        np.testing.assert_allclose(np.asarray(out[i]), x, rtol=2e-4, atol=2e-5)


def test_every_stored_transition_is_aimed_at_the_right_descriptor():
    """DCRL rows placed after an Iso+LineDD batch (offset 4): their transitions carry the targets
    the ask chose; the other rows' carry the descriptor they reached (QDax's rule); before the archive
    held an elite every row is aimed at its own descriptor."""
    problem = PointMass()
    dc = DCRLEmitter(
        (problem.template,),  # one layer: the same flat layout (b, then w) as the problem's
        [(0.0, 1.0), (0.0, 1.0)],
        activation="identity",
        dcrl_batch_size=3,
        ai_batch_size=2,
        critic_hidden_layer_size=(8,),
        transitions_batch_size=16,
        num_pg_training_steps=2,
        num_critic_training_steps=2,
        replay_buffer_size=1000,
    )
    ga = IsoLineEmitter(np.zeros(6), iso_sigma=0.3, line_sigma=0.2, batch_size=4)
    me = MAPElites(GridArchive(solution_dim=6, dims=(5, 5), ranges=[(0, 1), (0, 1)]), [ga, dc])
    state = me.init(jax.random.key(0))
    steps = problem.steps
    for g in range(2):
        x, asked = me.ask(jax.random.key(10 + g), state)
        ev = problem.evaluate(jax.random.key(20 + g), x)
        state, _ = me.tell(jax.random.key(30 + g), asked, x, Evaluation(-ev.fitness, ev.descriptor, ev.info))
        buffer = state.emitters[1].td3.buffer
        rows = slice(g * 9 * steps, (g + 1) * 9 * steps)
        desc = np.asarray(buffer.data.desc[rows]).reshape(9, steps, 2)
        prime = np.asarray(buffer.data.desc_prime[rows]).reshape(9, steps, 2)
        reached = 2.0 * np.asarray(ev.descriptor) - 1.0
        np.testing.assert_allclose(desc, np.broadcast_to(reached[:, None], desc.shape), atol=1e-6)
        aimed = asked.emitters[1]
        if g == 0:
            assert not bool(aimed.aimed)
            np.testing.assert_allclose(prime, desc, atol=1e-6)
        else:
            assert bool(aimed.aimed)
            np.testing.assert_allclose(prime[:4], desc[:4], atol=1e-6)  # Iso+LineDD rows: their own
            np.testing.assert_allclose(
                prime[4:], np.broadcast_to(np.asarray(aimed.intended)[:, None], (5, steps, 2))
            )
            assert not np.allclose(prime[4:], desc[4:])
        assert int(buffer.size) == (g + 1) * 9 * steps
    # the injected rows are the conditioned actor folded at the targets of the second ask
    np.testing.assert_allclose(
        np.asarray(x[7:]),
        np.asarray(
            jax.vmap(dc.injected_policy, in_axes=(None, 0))(asked.emitters[1].td3.actor, aimed.intended[3:])
        ),
        rtol=1e-6,
    )


def test_dcrl_me_emitters_and_bad_arguments():
    policy = init_mlp(jax.random.key(0), (OBS, 4, ACT))
    dc, ga = dcrl_me_emitters(policy, RANGES, replay_buffer_size=1000)
    assert (dc.dcrl_batch_size, dc.ai_batch_size, ga.batch_size) == (64, 64, 128) and dc.iterations == 1500
    assert (ga.iso_sigma, ga.line_sigma) == (0.005, 0.05) and dc.learner.batch_size == 100
    assert dc.learner.lengthscale == 0.1 and dc.num_pg_training_steps == 150
    assert dc.learner.reward_offset == 0.0
    with pytest.raises(ArgumentError, match="policy"):
        DCRLEmitter({"w": np.zeros((3, 2))}, RANGES)
    with pytest.raises(ArgumentError, match="descriptor_ranges"):
        DCRLEmitter(policy, [(1.0, 0.0)])
    with pytest.raises(ArgumentError, match="activation"):
        DCRLEmitter(policy, RANGES, activation="swishy")
    with pytest.raises(ArgumentError, match="dcrl_batch_size"):
        DCRLEmitter(policy, RANGES, dcrl_batch_size=0, ai_batch_size=0)
    with pytest.raises(ArgumentError, match="lengthscale"):
        DCRLEmitter(policy, RANGES, lengthscale=0.0)
    with pytest.raises(ArgumentError, match="initial_solutions"):
        dcrl_me_emitters(policy, RANGES, initial_solutions=np.zeros((5, dc.solution_dim)))
    with pytest.raises(ArgumentError, match="measures"):
        dc.init(jax.random.key(0), GridArchive(solution_dim=dc.solution_dim, dims=(4,), ranges=[(0, 1)]))


def test_elite_measures_are_the_sampled_elites_measures():
    """What DCRL-ME aims at: the measures of the elites ``sample_elites`` draws, for a grid archive
    and a MOME archive (a slot of a front)."""
    from evotensor.qd import MOMEArchive

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    m = rng.uniform(0, 1, (64, 2)).astype(np.float32)
    grid = GridArchive(solution_dim=3, dims=(4, 4), ranges=[(0, 1), (0, 1)])
    state, _ = grid.add(grid.init(), x, rng.normal(size=64).astype(np.float32), m)
    cells = grid.sample_elites(jax.random.key(0), state, 32)
    measures = np.asarray(grid.elite_measures(state, cells))
    assert np.all(np.asarray(state.occupied)[np.asarray(cells)])
    np.testing.assert_array_equal(np.asarray(grid.index_of(measures)), np.asarray(cells))
    mome = MOMEArchive(grid, num_objectives=2, front_size=4, reference_point=[-5.0, -5.0])
    state, _ = mome.add(mome.init(), x, rng.normal(size=(64, 2)).astype(np.float32), m)
    slots = mome.sample_elites(jax.random.key(1), state, 32)
    measures = np.asarray(mome.elite_measures(state, slots))
    solutions = np.asarray(mome.elite_solutions(state, slots))
    for solution, measure in zip(solutions, measures, strict=True):  # each slot's own candidate
        (row,) = np.nonzero(np.all(x == solution, axis=1))
        np.testing.assert_array_equal(m[row[0]], measure)
