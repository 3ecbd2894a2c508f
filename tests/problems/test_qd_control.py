"""QD-RL brax tasks: the compiled, masked rollout equals a host loop; descriptors follow QDax.

The default tier uses hopper_uni (the cheapest robot) with short episodes and compiles the batched
evaluation once; everything that builds an ant or a humanoid is marked slow.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import evotensor
from evotensor.problems.networks import ParamsDecoder, init_mlp, mlp_apply
from evotensor.problems.qd_control import TASKS, BraxQDProblem, _feet_link_indices
from evotensor.qd import GaussianEmitter, GridArchive, MAPElites

pytest.importorskip("brax")

DECODER = ParamsDecoder(mlp_apply)
HIDDEN = 8


def population(problem, size, seed=0, scale=1.0, still=False):
    """``size`` random MLPs around one init; with ``still`` the first one outputs zeros."""
    params = init_mlp(jax.random.key(seed), (problem.observation_size, HIDDEN, problem.output_size))
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    pop = [a[None] + scale * jax.random.normal(k, (size, *a.shape)) for a, k in zip(leaves, keys)]
    if still:  # zero weights and biases: tanh(0) = 0, no torque
        pop = [p.at[0].set(0.0) for p in pop]
    return jax.tree_util.tree_unflatten(treedef, pop)


# The compiled rollout and the host loop run the same float32 matmuls (policy and brax physics) in
# differently batched programs. A GPU computes those at TF32 by default, and not always in both
# programs alike: a 1e-3 difference in an action moved the hopper's return by ~7e-3 and a foot
# contact within 12 steps (TF32 emulated on one side only, on a CPU). Both sides therefore run at
# full float32 precision, which changes nothing on a CPU.
FULL_PRECISION = "highest"


def evaluator(problem):
    def evaluate(key, phenotypes):
        with jax.default_matmul_precision(FULL_PRECISION):
            return problem.evaluate(key, phenotypes, DECODER.apply)

    return jax.jit(evaluate)


def host_loop(problem, pop, key, feet=(), forward_metric=None):
    """Reference: a Python loop per episode over jitted ``env.step``, stopping at the first done
    (at full float32 matmul precision, as :func:`evaluator`).

    Returns ``(fitness [pop], descriptor [pop, d], lengths [pop, episodes])`` with the descriptor
    computed by hand from each pre-step state: the fraction of states with a contact of second link
    ``foot`` (a link index) at distance <= 0 (feet tasks, ``feet`` given), or the clipped torso
    (x, y) of the last pre-step state.
    """
    with jax.default_matmul_precision(FULL_PRECISION):
        return _host_loop(problem, pop, key, feet, forward_metric)


def _host_loop(problem, pop, key, feet, forward_metric):
    env = problem.env
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    cog = list(env.sys.link_names).index("torso")
    size = jax.tree_util.tree_leaves(pop)[0].shape[0]
    episodes = problem.num_episodes
    keys = jax.random.split(key, size * episodes).reshape((size, episodes))
    returns = np.zeros((size, episodes))
    descs = np.zeros((size, episodes, problem.num_descriptors))
    lengths = np.zeros((size, episodes), int)
    for i in range(size):
        params = jax.tree.map(lambda a, i=i: a[i], pop)
        for e in range(episodes):
            state = reset(keys[i, e])
            contacts, xy = [], None
            for t in range(problem.episode_length):
                if feet:
                    c = state.pipeline_state.contact
                    second, dist = np.asarray(c.link_idx[1]), np.asarray(c.dist)
                    contacts.append([float(np.any((second == f) & (dist <= 0))) for f in feet])
                else:
                    xy = np.clip(np.asarray(state.pipeline_state.x.pos[cog, :2]), -30.0, 30.0)
                state = step(state, jnp.tanh(mlp_apply(params, state.obs)))
                reward = float(state.reward)
                if forward_metric is not None:
                    reward -= float(state.metrics[forward_metric])
                returns[i, e] += reward
                lengths[i, e] = t + 1
                if float(state.done) > 0:
                    break
            descs[i, e] = np.mean(contacts, axis=0) if feet else xy
    return returns.mean(axis=1), descs.mean(axis=1), lengths


# --------------------------------------------------------------------------------------------
# cheap checks: arguments, the task table


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"task 'ant_nope'.*hopper_uni.*ant_omni"):
        BraxQDProblem("ant_nope")
    with pytest.raises(ValueError, match="task"):
        BraxQDProblem(3)
    with pytest.raises(ValueError, match="episode_length"):
        BraxQDProblem("hopper_uni", episode_length=0)
    with pytest.raises(ValueError, match="num_episodes"):
        BraxQDProblem("hopper_uni", num_episodes=1.5)
    with pytest.raises(ValueError, match="backend"):
        BraxQDProblem("hopper_uni", backend="mjx")


def test_task_table_matches_qdax():
    assert set(TASKS) == {
        "hopper_uni",
        "walker2d_uni",
        "halfcheetah_uni",
        "ant_uni",
        "humanoid_uni",
        "ant_omni",
        "humanoid_omni",
    }
    dims = {name: spec.num_descriptors for name, spec in TASKS.items()}
    assert dims == {
        "hopper_uni": 1,
        "walker2d_uni": 2,
        "halfcheetah_uni": 2,
        "ant_uni": 4,
        "humanoid_uni": 2,
        "ant_omni": 2,
        "humanoid_omni": 2,
    }
    assert TASKS["ant_omni"].descriptor_ranges == ((-30.0, 30.0), (-30.0, 30.0))
    assert TASKS["walker2d_uni"].descriptor_ranges == ((0.0, 1.0), (0.0, 1.0))
    assert TASKS["ant_omni"].forward_reward == "reward_forward"
    assert TASKS["humanoid_omni"].forward_reward == "reward_linvel"
    assert all(TASKS[n].forward_reward is None for n in TASKS if n.endswith("_uni"))


def _system(xml):
    from brax.io import mjcf
    from etils import epath

    return mjcf.load(epath.resource_path("brax") / "envs" / "assets" / xml)


@pytest.mark.parametrize(
    "task, xml, names",
    [
        ("hopper_uni", "hopper.xml", ["foot"]),
        ("walker2d_uni", "walker2d.xml", ["foot", "foot_left"]),
        ("halfcheetah_uni", "half_cheetah.xml", ["bfoot", "ffoot"]),
        ("humanoid_uni", "humanoid.xml", ["left_shin", "right_shin"]),
    ],
)
def test_feet_are_qdax_links(task, xml, names):
    sys = _system(xml)
    feet = _feet_link_indices(sys, TASKS[task], task)
    assert [sys.link_names[i] for i in feet] == names


def test_ant_feet_are_the_lower_legs():
    # QDax names brax v1's lower-leg bodies "$ Body 4/7/10/13"; in brax v2 they are the unnamed
    # children of aux_1..aux_4 that hold the foot spheres.
    sys = _system("ant.xml")
    feet = _feet_link_indices(sys, TASKS["ant_uni"], "ant_uni")
    parents = np.asarray(sys.link_parents)
    assert len(set(feet)) == 4
    assert [sys.link_names[i] for i in feet] == [""] * 4
    assert [sys.link_names[parents[i]] for i in feet] == ["aux_1", "aux_2", "aux_3", "aux_4"]


# --------------------------------------------------------------------------------------------
# hopper_uni: one compiled evaluation shared by the default tier

SIZE = 4


@pytest.fixture(scope="module")
def hopper():
    problem = BraxQDProblem("hopper_uni", episode_length=12, num_episodes=2)
    pop = population(problem, SIZE, scale=5.0, still=True)
    key = jax.random.key(5)
    evaluate = evaluator(problem)
    return problem, pop, key, evaluate, evaluate(key, pop)


def test_hopper_attributes(hopper):
    problem, *_ = hopper
    assert problem.kind == "policy" and problem.maximize is True and problem.task == "hopper_uni"
    assert (problem.observation_size, problem.output_size) == (11, 3)
    assert problem.num_descriptors == 1 and problem.descriptor_ranges == ((0.0, 1.0),)
    assert problem.backend == "spring"  # QDax's default
    assert problem.feet == (list(problem.env.sys.link_names).index("foot"),)
    assert problem.qd_score_offset == pytest.approx(-0.9 * 12)


def test_hopper_matches_host_loop(hopper):
    problem, pop, key, _, ev = hopper
    foot = list(problem.env.sys.link_names).index("foot")
    fitness, descriptor, lengths = host_loop(problem, pop, key, feet=[foot])
    assert ev.fitness.shape == (SIZE,) and ev.descriptor.shape == (SIZE, 1)
    np.testing.assert_allclose(np.asarray(ev.fitness), fitness, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ev.descriptor), descriptor, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ev.info["episode_length"]), lengths.mean(axis=1))
    assert lengths.min() < problem.episode_length  # some episode ended early: the mask mattered


def test_hopper_descriptors_in_range_and_policy_dependent(hopper):
    problem, _, _, _, ev = hopper
    desc = np.asarray(ev.descriptor)
    ((low, high),) = problem.descriptor_ranges
    assert np.all(np.isfinite(desc)) and np.all((desc >= low) & (desc <= high))
    lengths = np.asarray(ev.info["episode_length"])
    assert np.all(np.isfinite(np.asarray(ev.fitness)))
    # the still policy (index 0) and the moving ones do not all share one descriptor
    assert len(np.unique(desc[:, 0])) > 1
    assert np.any(np.abs(desc[1:, 0] - desc[0, 0]) > 1e-6)
    assert lengths[0] == problem.episode_length  # standing still does not fall over in 12 steps


def test_offset_rewards_are_qdax_offset_and_clip(hopper):
    """QDax's DCRL-ME environment: every step's reward ``max(r + reward_offset, 0)``; the fitness
    sums those (the host loop's rewards transformed the same way, step by step)."""
    problem, pop, key, _, _ = hopper
    shifted = BraxQDProblem("hopper_uni", episode_length=12, num_episodes=2, offset_rewards=True)
    assert "offset_rewards=True" in repr(shifted)
    rewards = jnp.array([-2.0, -0.5, 0.3], jnp.float32)
    state = type("State", (), {"reward": rewards, "metrics": {}})()  # what reward() reads
    np.testing.assert_allclose(shifted.reward(state), [0.0, 0.4, 1.2], rtol=1e-6)
    np.testing.assert_array_equal(problem.reward(state), rewards)
    ev = evaluator(shifted)(key, pop)
    plain = evaluator(problem)(key, pop)
    np.testing.assert_array_equal(np.asarray(ev.descriptor), np.asarray(plain.descriptor))
    assert np.all(np.asarray(ev.fitness) >= 0)
    # hopper's rewards are above -0.9 while it stands: the offset adds 0.9 per step alive
    lengths = np.asarray(plain.info["episode_length"])
    np.testing.assert_allclose(np.asarray(ev.fitness), np.asarray(plain.fitness) + 0.9 * lengths, rtol=1e-4)


def test_hopper_same_key_same_result(hopper):
    _, pop, key, evaluate, ev = hopper
    again = evaluate(key, pop)
    np.testing.assert_array_equal(np.asarray(again.fitness), np.asarray(ev.fitness))
    np.testing.assert_array_equal(np.asarray(again.descriptor), np.asarray(ev.descriptor))
    other = evaluate(jax.random.key(6), pop)  # other reset noise
    assert not np.array_equal(np.asarray(other.fitness), np.asarray(ev.fitness))


# a second compilation of a hopper rollout, inside a MAP-Elites run; the default tier runs the same
# path (MAPElites on BraxQDProblem('hopper_uni') through evotensor.run with a ParamsDecoder) with these
# assertions in tests/qd/test_tasks_and_plots.py::test_qd_brax_task_runs_a_short_hopper_search
@pytest.mark.slow
def test_hopper_map_elites_end_to_end(hopper):
    problem, *_ = hopper
    template = init_mlp(jax.random.key(0), (problem.observation_size, HIDDEN, problem.output_size))
    flat, _ = ravel_pytree(template)
    archive = GridArchive(
        solution_dim=flat.size,
        dims=(10,),
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    me = MAPElites(archive, [GaussianEmitter(sigma=0.3, x0=flat, batch_size=SIZE)], solution=template)
    result = evotensor.run(me, problem, 3, jax.random.key(1), decoder=DECODER, chunk_size=3, progress=False)
    state = result.state.archive
    occupied = np.asarray(state.occupied)
    assert occupied.sum() >= 1
    assert np.all(np.isfinite(np.asarray(state.objective)[occupied]))
    measures = np.asarray(state.measures)[occupied]
    assert np.all((measures >= 0.0) & (measures <= 1.0))
    assert np.isfinite(result.best_fitness)


# --------------------------------------------------------------------------------------------
# slow: walker2d against BraxProblem, ant and humanoid


@pytest.mark.slow
def test_walker2d_uni_matches_host_loop_and_brax_problem():
    from evotensor.problems.control import BraxProblem

    problem = BraxQDProblem("walker2d_uni", episode_length=15, num_episodes=2)
    assert (problem.num_descriptors, problem.output_size) == (2, 6)
    pop = population(problem, 3, scale=2.0)
    key = jax.random.key(2)
    ev = evaluator(problem)(key, pop)
    links = list(problem.env.sys.link_names)
    feet = [links.index("foot"), links.index("foot_left")]
    fitness, descriptor, _ = host_loop(problem, pop, key, feet=feet)
    np.testing.assert_allclose(np.asarray(ev.fitness), fitness, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ev.descriptor), descriptor, atol=1e-6)
    # uni tasks keep brax's reward: the fitness is BraxProblem's on the same backend and keys
    plain = BraxProblem("walker2d", episode_length=15, num_episodes=2, backend="spring")
    reference = evaluator(plain)(key, pop)
    np.testing.assert_allclose(np.asarray(ev.fitness), np.asarray(reference.fitness), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # building and compiling the ant or the humanoid takes ~30 s or more on 2 cores
@pytest.mark.parametrize("task, dims", [("halfcheetah_uni", 2), ("ant_uni", 4), ("humanoid_uni", 2)])
def test_uni_matches_host_loop(task, dims):
    problem = BraxQDProblem(task, episode_length=8)
    # which links are the feet is checked by test_feet_are_qdax_links / test_ant_feet_are_the_lower_legs
    assert problem.num_descriptors == len(problem.feet) == dims
    pop = population(problem, 2, scale=1.0)
    key = jax.random.key(3)
    ev = evaluator(problem)(key, pop)
    fitness, descriptor, _ = host_loop(problem, pop, key, feet=problem.feet)
    np.testing.assert_allclose(np.asarray(ev.fitness), fitness, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ev.descriptor), descriptor, atol=1e-6)
    assert ev.descriptor.shape == (2, dims)
    assert np.all((np.asarray(ev.descriptor) >= 0) & (np.asarray(ev.descriptor) <= 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, forward", [("ant_omni", "reward_forward"), ("humanoid_omni", "reward_linvel")]
)
def test_omni_matches_host_loop(task, forward):
    problem = BraxQDProblem(task, episode_length=8, num_episodes=2)
    assert problem.descriptor_ranges == ((-30.0, 30.0), (-30.0, 30.0)) and problem.feet == ()
    pop = population(problem, 2, scale=1.0)
    key = jax.random.key(4)
    ev = evaluator(problem)(key, pop)
    fitness, descriptor, _ = host_loop(problem, pop, key, forward_metric=forward)
    np.testing.assert_allclose(np.asarray(ev.fitness), fitness, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ev.descriptor), descriptor, rtol=1e-5, atol=1e-5)
    # the forward term is really gone: brax's own reward differs from the task's
    state = problem.env.step(problem.env.reset(key), jnp.full((problem.output_size,), 0.5))
    assert float(problem.reward(state)) == pytest.approx(float(state.reward - state.metrics[forward]))
    assert float(state.metrics[forward]) != 0.0
    # far from the origin the torso position is clipped to the bounds
    torso = list(problem.env.sys.link_names).index("torso")
    pos = state.pipeline_state.x.pos.at[torso, :2].set(jnp.array([100.0, -45.0]))
    far = state.replace(
        pipeline_state=state.pipeline_state.replace(x=state.pipeline_state.x.replace(pos=pos))
    )
    np.testing.assert_array_equal(np.asarray(problem.state_descriptor(far)), [30.0, -30.0])
