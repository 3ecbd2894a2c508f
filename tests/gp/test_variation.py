"""The operator registry, the checked configuration and the selection argument of GP."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.checks import ArgumentError
from evotensor.gp import selection as sel
from evotensor.gp.config import GPConfig, ParentSelection
from evotensor.gp.encoding import CONST
from evotensor.gp.functions import FunctionSet
from evotensor.gp.strategy import DEFAULT_MUTATION_PROBS, GP, MUTATIONS, mutation_probs
from evotensor.gp.variation import (
    FusedPass,
    GPOperator,
    OperatorRegistry,
    default_registry,
)

FS = FunctionSet(("add", "sub", "mul", "div"))
POP, L = 64, 32


def _negate_constants(draws, forest, ctx, params):
    """A user's mutation: each constant of the tree flips its sign with probability 1/2."""
    (u,) = draws  # [n, max_len] uniforms
    hit = (forest.opcode == CONST) & (u < 0.5)
    return forest.replace(value=jnp.where(hit, -forest.value, forest.value)), jnp.any(hit, axis=-1)


NEGATE = GPOperator(
    name="negate",
    kind="mutation",
    draw_shapes=lambda n, ctx: ((n, ctx.max_len),),
    apply=_negate_constants,
    grows=False,
    weight=0.0,
)


def _take(forest, lo, hi):
    return jax.tree_util.tree_map(lambda a: a[lo:hi], forest)


def _told_state(gp, seed=0):
    """An initial forest told a fitness (its lengths), so that ask varies it."""
    state = gp.init(jax.random.key(seed))
    return state.replace(generation=jnp.int32(1), fitness=state.forest.length.astype(jnp.float32))


def test_default_registry_is_the_built_in_operators_in_gp_order():
    registry = default_registry()
    assert registry.names("mutation") == MUTATIONS
    assert registry.names("crossover") == ("one_point", "leaf_biased")
    assert tuple(op.weight for op in registry.mutations) == DEFAULT_MUTATION_PROBS
    assert [op.name for op in registry.mutations if op.grows] == ["subtree", "insert"]
    assert [p.name for p in registry.passes] == ["structural", "inplace"]
    assert all(registry[m].fused == p.name for p in registry.passes for m in p.members)
    assert default_registry() is not registry  # a fresh copy each call


def test_a_user_registered_mutation_runs_on_its_own_block_of_children():
    registry = default_registry()
    assert registry.register(NEGATE) is NEGATE
    gp = GP(
        POP, FS, 2, L, operators=registry, mutation_rate=0.5, mutation_probs={"subtree": 1.0, "negate": 1.0}
    )
    registry.register(dataclasses.replace(NEGATE, name="later"))  # GP holds a copy: no effect on it
    assert "negate" not in default_registry() and "later" not in gp.config.operators
    names = gp.config.operators.names("mutation")
    assert names == (*MUTATIONS, "negate")
    counts = dict(zip(names, gp.mutation_counts))
    n_sub, n_neg = counts["subtree"], counts["negate"]
    assert n_sub + n_neg == round(0.5 * (POP - gp.n_elite)) and n_sub and n_neg
    assert sum(gp.mutation_counts) == n_sub + n_neg
    # its draw comes after the built-ins' (theirs are unchanged), its children after the passes'
    layout = gp._layout()
    assert layout[-1] == ("mutation/negate/0", (n_neg, L), False)
    assert [b.name for b in gp.mutation_blocks] == ["structural", "negate"]

    state, params, key = _told_state(gp), gp.default_params(), jax.random.key(3)

    def pieces(key, state):
        u = gp._draw(key)
        pair = jax.tree_util.tree_map(lambda a: a[gp._parents(u, state, params, key)], state.forest)
        children, _ = gp._crossover(u, pair, params)
        return u, children, gp._mutations(u, children, params)[0]

    u, children, (structural, negated, rest) = jax.jit(pieces)(key, state)
    block = _take(children, n_sub, n_sub + n_neg)
    want, ok = _negate_constants((u["mutation/negate/0"],), block, gp.context, params)
    for f in ("opcode", "value", "size", "output"):
        np.testing.assert_array_equal(np.asarray(getattr(negated, f)), np.asarray(getattr(want, f)))
    assert bool(jnp.any(ok))  # it did change trees
    np.testing.assert_array_equal(np.asarray(negated.opcode), np.asarray(block.opcode))  # shapes kept
    assert structural.opcode.shape[0] == n_sub and rest.opcode.shape[0] == POP - gp.n_elite - n_sub - n_neg
    forest, _ = jax.jit(gp.ask)(key, state)
    forest.check(FS, n_vars=2)


def test_a_user_registered_crossover_is_chosen_by_name():
    def swap(draws, pair, crossing, ctx, params):
        """Whole-tree crossover: a crossing pair's child is its donor."""
        C = crossing.shape[0]
        rec, don = _take(pair, 0, C), _take(pair, C, 2 * C)
        child = jax.tree_util.tree_map(lambda r, d: jnp.where(crossing[:, None], d, r), rec, don)
        return child, jnp.ones(C, bool)

    registry = default_registry()
    registry.register(GPOperator("swap", "crossover", lambda n, ctx: (), swap, grows=False))
    with pytest.raises(ValueError, match="crossover must be one of"):
        GP(POP, FS, 2, L, crossover="swap")  # not in the default registry
    gp = GP(POP, FS, 2, L, operators=registry, crossover="swap", mutation_rate=0.0)
    assert [name for name, _, _ in gp._layout()] == ["select", "do_cross"]
    state, params = _told_state(gp), gp.default_params()
    u = gp._draw(jax.random.key(1))
    parents = gp._parents(u, state, params)
    pair = jax.tree_util.tree_map(lambda a: a[parents], state.forest)
    children, rejected = gp._crossover(u, pair, params)
    C = POP - gp.n_elite
    crossing = np.asarray(u["do_cross"] < params.crossover_rate)
    expected = np.where(crossing[:, None], np.asarray(pair.opcode[C:]), np.asarray(pair.opcode[:C]))
    np.testing.assert_array_equal(np.asarray(children.opcode), expected)
    assert int(rejected) == 0  # a crossover that cannot grow a tree has nothing rejected


def test_registry_rejects_bad_operators():
    registry = default_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(dataclasses.replace(NEGATE, name="hoist"))
    with pytest.raises(ValueError, match="fused pass 'structural'"):
        registry.register(dataclasses.replace(NEGATE, fused="structural"))  # the pass does not list it
    with pytest.raises(ValueError, match="kind"):
        GPOperator("x", "selection", NEGATE.draw_shapes, NEGATE.apply, grows=False)
    with pytest.raises(ValueError, match="weight"):
        GPOperator("x", "mutation", NEGATE.draw_shapes, NEGATE.apply, grows=False, weight=-1.0)
    with pytest.raises(ValueError, match="identifier"):
        GPOperator("two words", "mutation", NEGATE.draw_shapes, NEGATE.apply, grows=False)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_pass(FusedPass("inplace", (), lambda c, x: (), lambda *a: None))
    with pytest.raises(ValueError, match="already registered"):  # draw keys are per name
        registry.register(dataclasses.replace(NEGATE, name="structural"))
    with pytest.raises(ValueError, match="mutation_probs names unknown"):
        GP(POP, FS, 2, L, mutation_probs={"negate": 1.0})
    assert len(OperatorRegistry()) == 0


def test_selection_takes_a_name_a_parent_selection_or_a_keyed_selector():
    def four_best(key, fitness, n):
        """Ignores its key: the four lowest fitness values, in turn."""
        return jnp.argsort(fitness)[jnp.arange(n) % 4].astype(jnp.int32)

    gp = GP(POP, FS, 2, L, selection=four_best)
    assert gp.selection == "four_best" and "select" not in [name for name, _, _ in gp._layout()]
    state, params, key = _told_state(gp), gp.default_params(), jax.random.key(2)
    parents = np.asarray(gp._parents(gp._draw(key), state, params, key))
    np.testing.assert_array_equal(parents, np.asarray(four_best(None, state.fitness, 2 * (POP - gp.n_elite))))

    # the keyed selectors of evotensor.gp.selection fit as they are
    k = GP(POP, FS, 2, L, selection=lambda key, f, n: sel.tournament(key, f, n, size=3))
    drawn = np.asarray(k._parents(k._draw(key), state, params, key))
    assert drawn.shape == parents.shape and drawn.min() >= 0 and drawn.max() < POP
    assert not np.array_equal(drawn, np.asarray(k._parents(k._draw(key), state, params, jax.random.key(9))))

    custom = ParentSelection("first", lambda n: None, lambda d, f, n, p, k: jnp.zeros(n, jnp.int32))
    assert GP(POP, FS, 2, L, selection=custom).config.selector is custom
    with pytest.raises(ValueError, match="or a callable"):
        GP(POP, FS, 2, L, selection=3)


def test_config_is_checked_once_and_frozen():
    config = GPConfig(POP, FS, 2, L, mutation_probs={"subtree": 3.0, "hoist": 1.0}, elite_rate=0.05)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_len = 7
    gp = GP.from_config(config)
    same = GP(POP, FS, 2, L, mutation_probs=mutation_probs(subtree=3.0, hoist=1.0), elite_rate=0.05)
    assert gp.mutation_counts == same.mutation_counts and gp.n_elite == same.n_elite == 4
    assert gp.mutation_probs == same.mutation_probs == (0.75, 0.25, 0, 0, 0, 0, 0, 0)
    assert gp.max_len == L and gp.tournament_size == 7 and gp.config is config
    for bad in (
        dict(tournament_size=0),
        dict(survival_rate=0.0),
        dict(elite_rate=-0.1),
        dict(mutation_rate=2.0),
        dict(init_depth=(2,)),
        dict(operators=[]),
    ):
        with pytest.raises(ArgumentError) as err:
            GPConfig(POP, FS, 2, L, **bad)
        assert isinstance(err.value, ValueError) and isinstance(err.value, TypeError)
    with pytest.raises(ValueError, match="max_len"):
        GPConfig(POP, FS, 2, 0)
    with pytest.raises(ValueError, match="function_set"):
        GP(POP, ("add",), 2, L)
