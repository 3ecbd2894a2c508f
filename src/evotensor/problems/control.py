"""Control problems: gymnax and brax rollouts as policy problems (maximize the episode return).

A whole population's rollouts are one XLA program::

    vmap(population) ∘ vmap(episodes) ∘ lax.scan(steps)

Every episode runs for the full ``max_steps`` with a done-mask: once an episode ends (terminated
or truncated) its later rewards are masked out, so there is no early exit and no host loop (and
gymnax's auto-reset, which nothing would see, is skipped: :func:`_step_without_reset`). The
fitness of an individual is its mean return over ``num_episodes`` episodes, each with its own
reset key.

``GymnaxProblem(..., chunk=K)`` runs the same episodes with an early exit instead: individuals are
stepped ``K`` at a time, and every few steps those whose episodes have all ended are moved behind
the others and no longer stepped, so a generation costs about the steps actually lived (a
population whose policies fail in 20 steps no longer pays for 500). Returns and lengths are those
of the plain scan: each individual's episodes take the same steps with the same keys.

Policies map one observation to a raw output ``y = apply(phenotype, obs)``. A *stateful* policy (a
recurrent network, a CTRNN) is an object with ``init_state(phenotype) -> state`` and
``step(phenotype, state, obs) -> (state, y)`` (:class:`StatefulPolicy`); pass it as ``apply`` and
its state is carried through the rollout, reset by ``init_state`` at the start of every episode.
The problem turns ``y`` into an action:

* discrete action spaces (``output_size = n`` actions): ``argmax(y)``;
* continuous ``Box`` spaces (``output_size = prod(shape)``): ``low + (tanh(y) + 1) / 2 (high - low)``
  (brax actions are in ``[-1, 1]``, i.e. ``tanh(y)``).

gymnax and brax are optional dependencies (``pip install "evotensor[control]"``; gymnax needs
``six``, which it does not declare). They are imported when a problem is built.

Example::

    problem = GymnaxProblem("CartPole-v1", num_episodes=4)
    params = init_mlp(key, (problem.observation_size, 32, problem.output_size))
    strategy = OpenES(256, solution=params)
    decoder = ParamsDecoder(mlp_apply)
    evaluation = problem.evaluate(key, population, decoder.apply)   # fitness [pop]: mean return
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation

Apply = Callable[[Any, jax.Array], jax.Array]


@runtime_checkable
class StatefulPolicy(Protocol):
    """A policy with memory, usable wherever an ``apply`` is expected.

    ``init_state(phenotype)`` gives the state at the start of an episode (a pytree of arrays,
    e.g. a recurrent network's node values) and ``step(phenotype, state, obs)`` maps the previous
    state and one observation to ``(new state, raw output y)``. The rollout carries the state in
    its scan; the state's structure and shapes must not change between steps.
    """

    def init_state(self, phenotype: Any) -> Any: ...

    def step(self, phenotype: Any, state: Any, obs: jax.Array) -> tuple[Any, jax.Array]: ...


def is_batched(apply: Any) -> bool:
    """Whether a stateless ``apply`` also has ``batch_paths(phenotypes [K, ...]) -> (index [K],
    paths)``: ways to run ``K`` phenotypes at once, each ``path(phenotypes, obs [B, K, ...]) -> y
    [B, K, ...]`` (``B`` observations per phenotype, the phenotypes on the second axis) with the
    outputs of ``vmap(vmap(apply, (None, 0)))`` (to float32 rounding), and for each phenotype the
    first path that runs it (every later path runs it too). The chunked
    rollout orders the running individuals by that index and gives each chunk, once per run of
    steps, the path of its largest index (e.g. NEAT's
    :meth:`~evotensor.neat.network.FeedForwardPolicy.batch_paths`: a narrow dense form when every
    network of the chunk is small)."""
    return not is_stateful(apply) and callable(getattr(apply, "batch_paths", None))


def is_stateful(apply: Any) -> bool:
    """Whether ``apply`` follows :class:`StatefulPolicy` (has ``init_state`` and ``step``)."""
    return callable(getattr(apply, "init_state", None)) and callable(getattr(apply, "step", None))


def _policy(apply: Any, phenotype: Any) -> tuple[Any, Callable[[Any, jax.Array], tuple[Any, jax.Array]]]:
    """``(initial policy state, step(state, obs) -> (state, y))`` for a stateless ``apply`` (the
    state is ``()``) or a :class:`StatefulPolicy`."""
    if is_stateful(apply):
        return apply.init_state(phenotype), lambda s, obs: apply.step(phenotype, s, obs)
    return (), lambda s, obs: (s, apply(phenotype, obs))


def population_size_of(phenotypes: Any) -> int:
    """The common leading (population) axis of a batch of phenotypes (a pytree of arrays)."""
    leaves = jax.tree_util.tree_leaves(phenotypes)
    if not leaves:
        raise ArgumentError("phenotypes has no array leaves")
    sizes = {leaf.shape[0] if getattr(leaf, "ndim", 0) else None for leaf in leaves}
    if len(sizes) != 1 or None in sizes:
        raise ArgumentError(f"every phenotype leaf needs the same leading population axis, got sizes {sizes}")
    return sizes.pop()


def vmap_episodes(episode: Callable[[Any, jax.Array], Any], phenotypes: Any, keys: jax.Array) -> Any:
    """``episode(phenotype, key) -> outputs`` for every individual and episode: ``phenotypes [pop,
    ...]``, ``keys [pop, E]`` -> outputs ``[pop, E, ...]``.

    ``vmap(population) ∘ vmap(episodes)``; with one episode per individual a single vmap whose
    outputs gain the episode axis after the fact (XLA:CPU ran brax rollouts with contacts slower
    under the nested vmap's size-1 axis: ``benchmarks/results_qd.md``, section 18).
    """
    if keys.shape[1] == 1:
        outputs = jax.vmap(episode)(phenotypes, keys[:, 0])
        return jax.tree_util.tree_map(lambda x: x[:, None], outputs)
    return jax.vmap(jax.vmap(episode, in_axes=(None, 0)))(phenotypes, keys)


def _masked_return(step: Callable, init_carry: Any, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Scan ``step(carry, key) -> (carry, reward, done)`` over ``keys`` with a done-mask.

    Returns ``(return, length)``: the sum of rewards up to and including the first ``done``, and
    the number of steps taken until then.
    """

    def body(carry, key):
        inner, ret, length, alive = carry
        inner, reward, done = step(inner, key)
        # where(), not multiplication: a finished episode's state may hold NaN/inf rewards.
        ret = ret + jnp.where(alive, reward, 0.0)
        length = length + alive.astype(jnp.int32)
        alive = alive & ~done
        return (inner, ret, length, alive), None

    carry = (init_carry, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32), jnp.ones((), bool))
    (_, ret, length, _), _ = jax.lax.scan(body, carry, keys)
    return ret, length


Episode = Callable[[Any, jax.Array], tuple[jax.Array, jax.Array]]


def _batched_evaluate(key: jax.Array, phenotypes: Any, episode: Episode, num_episodes: int) -> Evaluation:
    """vmap(population) ∘ vmap(episodes) of ``episode(phenotype, key) -> (return, length)``."""
    pop = population_size_of(phenotypes)
    keys = jax.random.split(key, pop * num_episodes).reshape((pop, num_episodes))
    returns, lengths = vmap_episodes(episode, phenotypes, keys)  # [pop, episodes]
    info = {
        "return_std": jnp.std(returns, axis=1),
        "episode_length": jnp.mean(lengths.astype(jnp.float32), axis=1),
    }
    return Evaluation(fitness=jnp.mean(returns, axis=1), info=info)


# steps between two compactions of :func:`_compacted_evaluate`: a compaction reorders the population
# and each chunk then gathers its networks and transposes its episodes, so compacting every 8 steps
# cost more than the steps it saved (CartPole at pop 1000: benchmarks/results_neat.md, session 21)
_COMPACT_EVERY = 32

Start = Callable[[Any, jax.Array], tuple[Any, jax.Array]]
Advance = Callable[[Any, Any, jax.Array], tuple[Any, jax.Array, jax.Array]]
AdvanceBatch = Callable[[Any, Any, jax.Array], tuple[Any, jax.Array, jax.Array]]
Plan = Callable[[Any], tuple[jax.Array, tuple[AdvanceBatch, ...]]]


def _stable_order(key: jax.Array, num_values: int) -> jax.Array:
    """``jnp.argsort(key, stable=True)`` for ``key int32 [n]`` with values in ``[0, num_values)``:
    a counting sort (one prefix sum per value and a scatter), several times cheaper than XLA:CPU's
    sort for the few values of a compaction."""
    n = key.shape[0]
    onehot = (key[:, None] == jnp.arange(num_values, dtype=key.dtype)).astype(jnp.int32)  # [n, V]
    rank = jnp.cumsum(onehot, axis=0)  # [n, V]: inclusive count of each value so far
    count = rank[-1]
    start = jnp.cumsum(count) - count
    within = jnp.sum(onehot * rank, axis=1) - 1  # i's rank among the entries equal to key[i]
    position = start[key] + within
    return jnp.zeros((n,), jnp.int32).at[position].set(jnp.arange(n, dtype=jnp.int32), unique_indices=True)


def _compacted_evaluate(
    key: jax.Array,
    phenotypes: Any,
    start: Start,
    advance: Advance,
    num_episodes: int,
    max_steps: int,
    chunk: int,
    plan: Plan | None = None,
) -> Evaluation:
    """:func:`_batched_evaluate` of the masked episodes ``start`` / ``advance`` describe, with an early
    exit: the same keys, returns and lengths, but individuals whose episodes have all ended stop
    costing.

    Args:
        key: split into ``pop * num_episodes`` episode keys exactly as :func:`_batched_evaluate` does.
        phenotypes: a pytree with a leading population axis ``[pop, ...]``.
        start: ``(phenotype, episode key) -> (carry, step keys [max_steps])``: the episode's reset.
        advance: ``(phenotype, carry, step key) -> (carry, reward [], done [])``: one step.
        num_episodes, max_steps: ``E`` episodes of at most ``T`` steps per individual.
        chunk: ``K`` individuals (each with its ``E`` episodes) are stepped at a time.
        plan: optional ``plan(phenotypes [K]) -> (index [K], steppers)``, each stepper
            ``(phenotypes [K], carry [E, K], step keys [E, K]) -> (carry, reward [E, K], done [E,
            K])`` one step of a chunk in place of ``advance`` vmapped over episodes and
            individuals (the same steps); ``index[i]``: the first stepper that runs individual ``i``
            (later ones run it too). The running individuals are ordered by it, and a chunk's run
            of steps takes ``steppers[max(index)]``.

    The individuals' episode arrays are kept in a slot order that every ``_COMPACT_EVERY`` steps is
    re-sorted with the individuals that still have a running episode first (the phenotypes stay put;
    a chunk gathers its own); a step then runs only the first
    ``ceil(running / K)`` chunks of ``K`` slots. A finished episode in a running individual is still
    stepped and masked, as in the scan. Each chunk evaluates ``K`` individuals' policies with the
    same per-individual shapes as the whole-population vmap, so their outputs are the same (with a
    ``plan``, those of the chosen batch path: the same to float32 rounding).
    """
    pop = population_size_of(phenotypes)
    E, T = num_episodes, max_steps
    K = min(chunk, pop)
    n_chunks = -(-pop // K)
    slots = n_chunks * K
    keys = jax.random.split(key, pop * E).reshape((pop, E))
    carry, step_keys = jax.vmap(jax.vmap(start, in_axes=(None, 0)))(phenotypes, keys)  # [P, E, ...]
    # [T, P, E], padded along T to whole blocks (the padding is never used: a block stops at T)
    step_keys = jnp.moveaxis(step_keys, 2, 0)
    blocks = -(-T // _COMPACT_EVERY)
    if blocks * _COMPACT_EVERY > T:
        tail = jnp.repeat(step_keys[-1:], blocks * _COMPACT_EVERY - T, axis=0)
        step_keys = jnp.concatenate([step_keys, tail])

    def pad(x):  # slots past the population copy individual 0 and never run
        if slots == pop:
            return x
        return jnp.concatenate([x, jnp.repeat(x[:1], slots - pop, axis=0)])

    nets, carry = jax.tree_util.tree_map(pad, (phenotypes, carry))
    slot_id = jnp.arange(slots, dtype=jnp.int32)  # slot -> individual (>= pop: padding)
    ret = jnp.zeros((slots, E), jnp.float32)
    length = jnp.zeros((slots, E), jnp.int32)
    alive = jnp.broadcast_to((slot_id < pop)[:, None], (slots, E))
    # a chunk steps episode-major ([E, K]): the individuals on the minor axis, so that per-individual
    # values broadcast along contiguous lanes (XLA:CPU vectorizes that; a minor axis of E it did not)
    step_all = jax.vmap(jax.vmap(advance, in_axes=(0, 0, 0)), in_axes=(None, 0, 0))

    def episode_major(tree):  # [K, E, ...] <-> [E, K, ...]
        return jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), tree)

    def run_chunk(t0, steps, c, state):
        """``steps`` steps from time ``t0`` of the ``K`` slots of chunk ``c``."""
        carry, ret, length, alive, slot_id = state
        at = c * K

        def take(x):
            return lax.dynamic_slice_in_dim(x, at, K, axis=0)

        def put(x, part):
            return lax.dynamic_update_slice_in_dim(x, part, at, axis=0)

        c_ids = take(slot_id)

        def chunk_nets():
            # the phenotypes stay in individual order (padded): a chunk gathers its K rows, instead
            # of every compaction moving the whole population's
            return jax.tree_util.tree_map(lambda x: x[c_ids], nets)

        window = lax.dynamic_slice_in_dim(step_keys, t0, _COMPACT_EVERY, axis=0)  # [R, P, E]
        c_keys = jnp.swapaxes(window[:, jnp.minimum(c_ids, pop - 1)], 1, 2)  # [R, E, K]

        def run_steps(stepper, part):
            # gathered inside the chosen path: each path reads only its own tables of the networks
            c_nets = chunk_nets()

            def one_step(j, part):
                c_carry, r, n, a = part
                k = c_keys[j]  # [E, K]
                c_carry, reward, done = stepper(c_nets, c_carry, k)
                # where(), not multiplication: a finished episode's state may hold NaN/inf rewards.
                return c_carry, r + jnp.where(a, reward, 0.0), n + a.astype(jnp.int32), a & ~done

            return lax.fori_loop(0, steps, one_step, part)

        part = episode_major((jax.tree_util.tree_map(take, carry), take(ret), take(length), take(alive)))
        if plan is None:
            c_carry, r, n, a = run_steps(step_all, part)
        else:
            # the chunk's path is chosen around its run of steps, not inside every step
            index, steppers = plan(chunk_nets())
            branches = [functools.partial(run_steps, s) for s in steppers]
            if len(branches) > 1:
                c_carry, r, n, a = lax.switch(jnp.max(index), branches, part)
            else:
                c_carry, r, n, a = branches[0](part)
        c_carry, r, n, a = episode_major((c_carry, r, n, a))
        carry = jax.tree_util.tree_map(put, carry, c_carry)
        return carry, put(ret, r), put(length, n), put(alive, a), slot_id

    # with a plan, running individuals are ordered by the first path that runs them, so that a
    # chunk's largest index (its path) is that of most of its members
    if plan is None:
        tier, tiers = jnp.zeros((slots,), jnp.int32), 1
    else:
        index, steppers = plan(nets)
        tiers = len(steppers)
        tier = jnp.clip(index.astype(jnp.int32), 0, tiers - 1)  # [slots], individual order

    def block(outer):
        t0, state = outer
        running = jnp.any(state[3], axis=1)
        # running individuals first, by tier, each group in slot order; then the finished ones
        order = _stable_order(jnp.where(running, tier[state[4]], tiers), tiers + 1)
        state = jax.tree_util.tree_map(lambda x: x[order], state)
        active = (jnp.sum(running, dtype=jnp.int32) + K - 1) // K
        steps = jnp.minimum(_COMPACT_EVERY, T - t0)
        state = lax.fori_loop(0, active, lambda c, s: run_chunk(t0, steps, c, s), state)
        return t0 + _COMPACT_EVERY, state

    def more(outer):
        t0, state = outer
        return (t0 < T) & jnp.any(state[3])

    state = (carry, ret, length, alive, slot_id)
    _, (_, ret, length, _, slot_id) = lax.while_loop(more, block, (jnp.zeros((), jnp.int32), state))
    returns = jnp.zeros((pop, E), jnp.float32).at[slot_id].set(ret, mode="drop")
    lengths = jnp.zeros((pop, E), jnp.int32).at[slot_id].set(length, mode="drop")
    info = {
        "return_std": jnp.std(returns, axis=1),
        "episode_length": jnp.mean(lengths.astype(jnp.float32), axis=1),
    }
    return Evaluation(fitness=jnp.mean(returns, axis=1), info=info)


def _split_step_output(out: tuple) -> tuple[Any, Any, jax.Array, jax.Array]:
    """``(obs, state, reward, done)`` from a gymnax ``step`` tuple of any length.

    gymnax returned ``(obs, state, reward, done, info)`` and returns, since 1.0,
    ``(obs, state, reward, terminated, truncated, info)``: every entry between the reward and the
    trailing info dict is a done flag, and the episode ends when any of them is set.
    """
    obs, state, reward, *rest = out
    if rest and isinstance(rest[-1], dict):
        rest = rest[:-1]
    if not rest:
        raise ArgumentError("gymnax step() returned no done flag")
    done = jnp.zeros((), bool)
    for flag in rest:
        done = done | jnp.asarray(flag, bool)
    return obs, state, jnp.asarray(reward, jnp.float32), done


def _first_argmax(y: jax.Array) -> jax.Array:
    """``jnp.argmax(y, axis=-1)`` (the first largest entry; the first NaN if there is one) as a
    chain of elementwise selects over the (few) entries of the last axis: ``int32 [...]``."""
    best, index = y[..., 0], jnp.zeros(y.shape[:-1], jnp.int32)
    for o in range(1, y.shape[-1]):
        v = y[..., o]
        better = (v > best) | (jnp.isnan(v) & ~jnp.isnan(best))
        best, index = jnp.where(better, v, best), jnp.where(better, o, index)
    return index


def _skips_reset(env: Any) -> bool:
    """Whether ``env`` keeps gymnax's base ``Environment.step`` (and has ``is_truncated``, gymnax >=
    1.0), so that the rollout may step it with :func:`_step_without_reset`."""
    from gymnax.environments.environment import Environment

    return getattr(type(env), "step", None) is Environment.step and hasattr(env, "is_truncated")


@functools.partial(jax.jit, static_argnums=0)  # as gymnax's step: XLA then rounds the dynamics alike
def _step_without_reset(env: Any, key: jax.Array, state: Any, action: Any, params: Any) -> tuple:
    """gymnax's ``Environment.step`` minus its auto-reset (for an env where :func:`_skips_reset`).

    The base ``step`` splits ``key`` into a step key and a reset key, steps with the first and, where
    the episode ended, swaps in a fresh reset drawn with the second. The rollout masks everything
    after the end, so that reset is never seen, yet it cost random draws and a key split on every
    step: for CartPole several times the step itself (and the policy's forward pass), see
    benchmarks/results_neat.md, session 15. The step itself gets the same key, so trajectories,
    returns and lengths are those of ``env.step`` (bit for bit under this ``jit``: inlined into the
    rollout, XLA rounded CartPole's dynamics an ulp differently).
    """
    key_step, _ = jax.random.split(key)
    obs, state, reward, terminated, info = env.step_env(key_step, state, action, params)
    return obs, state, reward, terminated, env.is_truncated(state, params), info


class GymnaxProblem:
    """A gymnax environment as a policy problem (fitness: mean episode return, maximized).

    Args:
        env_name: a gymnax id: ``"CartPole-v1"``, ``"Acrobot-v1"``, ``"Pendulum-v1"``,
            ``"MountainCar-v0"``, ``"MountainCarContinuous-v0"``…
        num_episodes: episodes per individual (fitness is their mean return).
        max_steps: scan length; default the environment's ``max_steps_in_episode``.
        env_params: optional gymnax ``EnvParams`` replacing the defaults.
        flatten_observation: give policies ``ravel(obs)`` (default) or the observation in its own
            shape ``observation_shape`` (e.g. MinAtar images for a CNN).
        chunk: ``None`` (default): every episode runs all ``max_steps`` steps, the whole population
            in one scan. An int ``K``: the early exit of the module docstring, ``K`` individuals
            stepped at a time; the same returns, faster when most episodes end well before
            ``max_steps`` (32-64 suit NEAT networks at pop 1000: a chunk small enough to stay in
            cache; no slower than the scan when every episode lasts). It moves the phenotypes'
            arrays every few steps, so it suits small policies (NEAT networks) better than large
            ones. A stateless ``apply`` with ``batch_paths`` (:func:`is_batched`, e.g. NEAT's
            feedforward policy) runs each chunk on the batch path it names.

    Attributes:
        observation_size: flat observation size (policy input).
        output_size: policy output size (number of actions, or action dimension).
        discrete: whether the action space is discrete.
    """

    kind = "policy"
    maximize = True

    def __init__(
        self,
        env_name: str,
        num_episodes: int = 1,
        max_steps: int | None = None,
        env_params: Any = None,
        flatten_observation: bool = True,
        chunk: int | None = None,
    ):
        import gymnax  # optional dependency
        from gymnax.environments import spaces

        if not isinstance(env_name, str) or env_name not in gymnax.registered_envs:
            known = ", ".join(gymnax.registered_envs)
            raise ArgumentError(f"unknown gymnax env_name {env_name!r}; known: {known}")
        self.env_name = env_name
        self.env, default_params = gymnax.make(env_name)
        self._skip_reset = _skips_reset(self.env)
        self.env_params = default_params if env_params is None else env_params
        self.num_episodes = check_int(num_episodes, "num_episodes")
        default_steps = int(self.env_params.max_steps_in_episode)
        self.max_steps = default_steps if max_steps is None else check_int(max_steps, "max_steps")
        self.flatten_observation = bool(flatten_observation)
        self.chunk = None if chunk is None else check_int(chunk, "chunk")
        self.observation_shape = tuple(self.env.observation_space(self.env_params).shape)
        self.observation_size = int(math.prod(self.observation_shape))
        space = self.env.action_space(self.env_params)
        if isinstance(space, spaces.Discrete):
            self.discrete = True
            self.output_size = int(space.n)
            self._action_shape: tuple[int, ...] = ()
        elif isinstance(space, spaces.Box):
            self.discrete = False
            self._action_shape = tuple(space.shape)
            self.output_size = int(math.prod(self._action_shape))
            self._low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), self._action_shape)
            self._high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), self._action_shape)
        else:
            raise ArgumentError(f"{env_name}: unsupported action space {type(space).__name__}")

    def action(self, y: jax.Array) -> jax.Array:
        """Policy output ``[output_size]`` -> environment action."""
        y = jnp.ravel(y)
        if self.discrete:
            return jnp.argmax(y)
        squashed = (jnp.tanh(y.reshape(self._action_shape)) + 1.0) / 2.0
        return self._low + squashed * (self._high - self._low)

    def _env_step(self, key: jax.Array, state: Any, action: Any, params: Any) -> tuple:
        """``env.step``, without the auto-reset where gymnax's base ``step`` is used."""
        if self._skip_reset:
            return _step_without_reset(self.env, key, state, action, params)
        return self.env.step(key, state, action, params)

    def _start(self, apply: Apply | StatefulPolicy, phenotype: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        """An episode's reset: ``(carry, step keys [max_steps])``."""
        k_reset, k_steps = jax.random.split(key)
        obs, state = self.env.reset(k_reset, self.env_params)
        policy_state, _ = _policy(apply, phenotype)
        return (obs, state, policy_state), jax.random.split(k_steps, self.max_steps)

    def _advance(
        self, apply: Apply | StatefulPolicy, phenotype: Any, carry: Any, key: jax.Array
    ) -> tuple[Any, jax.Array, jax.Array]:
        """One step of an episode: ``(carry, reward [], done [])``."""
        obs, state, policy_state = carry
        policy_input = (jnp.ravel(obs) if self.flatten_observation else obs).astype(jnp.float32)
        if is_stateful(apply):
            policy_state, y = apply.step(phenotype, policy_state, policy_input)
        else:
            y = apply(phenotype, policy_input)
        return self._env_advance(y, state, policy_state, key)

    def _env_advance(self, y: jax.Array, state: Any, policy_state: Any, key: jax.Array) -> tuple:
        """The environment's half of :meth:`_advance`: action from ``y``, one env step."""
        act = self.action(y)
        return self._env_act(act, state, policy_state, key)

    def _env_act(self, act: Any, state: Any, policy_state: Any, key: jax.Array) -> tuple:
        obs, state, reward, done = _split_step_output(self._env_step(key, state, act, self.env_params))
        return (obs, state, policy_state), reward, done

    def _plan(self, apply: Any, phenotypes: Any) -> tuple[jax.Array, tuple]:
        """``(index, steppers)`` for a chunk of phenotypes: one per path of ``apply.batch_paths``
        (:func:`is_batched`)."""
        index, paths = apply.batch_paths(phenotypes)
        return index, tuple(functools.partial(self._advance_batch, path) for path in paths)

    def _advance_batch(self, path: Callable, phenotypes: Any, carry: Any, keys: jax.Array) -> tuple:
        """:meth:`_advance` of ``E`` episodes x ``K`` phenotypes (carry ``[E, K, ...]``) with one
        call of a batch ``path`` for the policy."""
        obs, state, policy_state = carry
        lead = keys.shape[:2]
        if self.flatten_observation:
            obs = obs.reshape(lead + (-1,))
        y = path(phenotypes, obs.astype(jnp.float32))  # [E, K, ...]
        if self.discrete and type(self).action is GymnaxProblem.action:
            # jnp.argmax as selects: a reduce fused the whole batch path into itself and evaluated
            # it once per output, without vectorizing across the lanes
            y = y.reshape(lead + (-1,))
            act = _first_argmax(y)
            env = jax.vmap(jax.vmap(self._env_act, in_axes=(0, 0, None, 0)), in_axes=(0, 0, None, 0))
            return env(act, state, policy_state, keys)
        env = jax.vmap(jax.vmap(self._env_advance, in_axes=(0, 0, None, 0)), in_axes=(0, 0, None, 0))
        return env(y, state, policy_state, keys)

    def episode(
        self, phenotype: Any, apply: Apply | StatefulPolicy, key: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """One masked episode: ``(return [], length [])``."""
        carry, step_keys = self._start(apply, phenotype, key)
        return _masked_return(lambda c, k: self._advance(apply, phenotype, c, k), carry, step_keys)

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply | StatefulPolicy) -> Evaluation:
        """Mean return over ``num_episodes`` episodes per individual: ``fitness [pop]``.

        ``info``: ``return_std [pop]`` (across episodes) and ``episode_length [pop]`` (mean steps).
        """
        if self.chunk is not None:
            return _compacted_evaluate(
                key,
                phenotypes,
                lambda p, k: self._start(apply, p, k),
                lambda p, c, k: self._advance(apply, p, c, k),
                self.num_episodes,
                self.max_steps,
                self.chunk,
                functools.partial(self._plan, apply) if is_batched(apply) else None,
            )
        return _batched_evaluate(key, phenotypes, lambda p, k: self.episode(p, apply, k), self.num_episodes)

    def __repr__(self) -> str:
        return (
            f"GymnaxProblem({self.env_name!r}, num_episodes={self.num_episodes}, max_steps={self.max_steps}"
            + ("" if self.chunk is None else f", chunk={self.chunk}")
            + ")"
        )


def _check_fluid_supported(env: Any, env_name: str) -> None:
    """Refuse, at construction, a brax env whose fluid model cannot run with the installed jax:
    brax's own pipelines compute the drag of a fluid (swimmer's) with ``jnp.clip(..., a_min=...)``,
    a keyword jax has removed, so the first step would fail with a ``TypeError`` deep in brax."""
    import inspect

    import brax

    fluid = bool(getattr(getattr(env, "sys", None), "enable_fluid", False))
    brax_physics = getattr(env, "backend", None) != "mjx"
    if fluid and brax_physics and "a_min" not in inspect.signature(jnp.clip).parameters:
        raise ArgumentError(
            f"brax env {env_name!r} moves through a fluid, which brax {brax.__version__} simulates with "
            f"jnp.clip(a_min=...), removed in jax {jax.__version__}: it cannot run with these versions "
            "(choose another env)"
        )


class BraxProblem:
    """A brax environment as a policy problem (fitness: mean episode return, maximized).

    Args:
        env_name: a brax environment (``"ant"``, ``"halfcheetah"``, ``"hopper"``, ``"walker2d"``,
            ``"humanoid"``, ``"inverted_pendulum"``, ``"reacher"``, ``"swimmer"``…).
        episode_length: steps per episode (brax truncates with ``done`` at this length).
        num_episodes: episodes per individual (fitness is their mean return).
        backend: brax physics backend (``"generalized"``, ``"positional"``, ``"spring"``, ``"mjx"``);
            None keeps the environment's default.
        **env_kwargs: further arguments of the environment's constructor.

    Actions are ``tanh(apply(phenotype, obs))``, in brax's ``[-1, 1]`` range.
    """

    kind = "policy"
    maximize = True

    def __init__(
        self,
        env_name: str,
        episode_length: int = 1000,
        num_episodes: int = 1,
        backend: str | None = None,
        **env_kwargs: Any,
    ):
        from brax import envs  # optional dependency

        known = sorted(envs._envs) if hasattr(envs, "_envs") else None
        if not isinstance(env_name, str) or (known is not None and env_name not in known):
            raise ArgumentError(f"unknown brax env_name {env_name!r}; known: {', '.join(known or ())}")
        self.env_name = env_name
        self.episode_length = check_int(episode_length, "episode_length")
        self.num_episodes = check_int(num_episodes, "num_episodes")
        if backend is not None:
            env_kwargs["backend"] = backend
        # auto_reset=False: the done-mask handles the end of an episode; resetting mid-scan would
        # only waste work.
        self.env = envs.create(env_name, episode_length=self.episode_length, auto_reset=False, **env_kwargs)
        self.observation_size = int(self.env.observation_size)
        self.output_size = int(self.env.action_size)
        _check_fluid_supported(self.env, env_name)

    def episode(
        self, phenotype: Any, apply: Apply | StatefulPolicy, key: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """One masked episode: ``(return [], length [])``."""
        env = self.env
        state = env.reset(key)
        policy_state, policy_step = _policy(apply, phenotype)

        def step(carry, _):
            state, policy_state = carry
            policy_state, y = policy_step(policy_state, state.obs)
            state = env.step(state, jnp.tanh(jnp.ravel(y)))
            return (state, policy_state), jnp.asarray(state.reward, jnp.float32), state.done > 0

        # Brax steps are deterministic: the scan keys only fix the length.
        return _masked_return(step, (state, policy_state), jnp.zeros((self.episode_length,), jnp.uint32))

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply | StatefulPolicy) -> Evaluation:
        """Mean return over ``num_episodes`` episodes per individual: ``fitness [pop]``."""
        return _batched_evaluate(key, phenotypes, lambda p, k: self.episode(p, apply, k), self.num_episodes)

    def __repr__(self) -> str:
        return (
            f"BraxProblem({self.env_name!r}, episode_length={self.episode_length}, "
            f"num_episodes={self.num_episodes})"
        )
