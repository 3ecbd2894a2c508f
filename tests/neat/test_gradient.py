"""Gradients through NEAT networks (:mod:`evotensor.neat.gradient` and the reverse-mode rule of
:func:`~evotensor.neat.network.forward`) against central finite differences of the slow float64
dict-based references of neat-python's networks (tests/neat/reference_network.py), and the tuner
and the Lamarckian problem on grown populations and in a run."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.neat.genome_strategies import grow
from tests.neat.reference_network import CTRNN, Recurrent, feedforward, genome_dicts

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    NEAT,
    ChoiceAttribute,
    GenomeSpec,
    GradientFit,
    GradientTuner,
    NodeGene,
    OutputMode,
    forward,
    genome_from_dict,
    loss_and_grad,
    neat_policy,
    transform,
)
from evotensor.problems.function_fit import FunctionFit, xor_cases

# differentiable everywhere (finite differences need no kinks near the drawn values)
SMOOTH_ACTS = ("sigmoid", "tanh", "gauss", "softplus", "identity", "sin")
SMOOTH_AGGS = ("sum", "mean", "product")
XS = np.asarray([[0.5, -1.0, 0.25], [-0.3, 0.8, 1.5], [1.0, 0.2, -0.7]], np.float64)
COEF = np.asarray([0.7, -1.3])  # loss = sum over samples of COEF . y


def make_spec(feed_forward=True, ctrnn=False):
    gene = NodeGene(
        activation=ChoiceAttribute("activation", SMOOTH_ACTS, "random"),
        aggregation=ChoiceAttribute("aggregation", SMOOTH_AGGS, "random"),
        ctrnn=ctrnn,
    )
    return GenomeSpec(3, 2, 12, 30, feed_forward=feed_forward, node_gene=gene)


FF, REC, CT = make_spec(), make_spec(False), make_spec(False, True)


def loss_of_outputs(y):
    return jnp.sum(y @ jnp.asarray(COEF, jnp.float32))


@functools.cache
def grad_program(policy):
    return jax.jit(lambda g, x: loss_and_grad(policy, g, x, loss_of_outputs))


def reference_loss(run, gdict) -> float:
    """``sum_samples COEF . y`` of the float64 reference ``run(gdict, x) -> y``."""
    return float(sum(np.dot(COEF, run(gdict, x)) for x in XS))


def finite_difference_check(spec, policy, gdict, run, h=1e-5):
    """Our gradient of every enabled weight, bias and response (response also of nodes without
    inputs) against central differences of the reference, in float64."""
    genome = genome_from_dict(spec, gdict)
    loss, (node_grad, conn_grad) = grad_program(policy)(genome, jnp.asarray(XS, jnp.float32))
    assert np.isclose(float(loss), reference_loss(run, gdict), rtol=1e-4, atol=1e-4)
    keys, conn_in, conn_out = (np.asarray(a) for a in (genome.node_key, genome.conn_in, genome.conn_out))
    checked = 0
    for (a, b), conn in gdict["connections"].items():
        row = int(np.flatnonzero((conn_in == a) & (conn_out == b))[0])
        if not conn["enabled"]:
            assert conn_grad[row, 0] == 0.0  # a disabled connection computes nothing
            continue
        d = _central(run, gdict, ("connections", (a, b), "weight"), h)
        np.testing.assert_allclose(conn_grad[row, 0], d, rtol=5e-3, atol=5e-4, err_msg=f"weight {(a, b)}")
        checked += 1
    for key in gdict["nodes"]:
        row = int(np.flatnonzero(keys == key)[0])
        for col, name in enumerate(spec.node_gene.float_names):
            d = _central(run, gdict, ("nodes", key, name), h)
            np.testing.assert_allclose(node_grad[row, col], d, rtol=5e-3, atol=5e-4, err_msg=f"{name} {key}")
            checked += 1
    return checked


def _central(run, gdict, path, h):
    section, key, name = path

    def at(delta):
        d = {"nodes": dict(gdict["nodes"]), "connections": dict(gdict["connections"])}
        d[section][key] = {**d[section][key], name: d[section][key][name] + delta}
        return reference_loss(run, d)

    return (at(h) - at(-h)) / (2 * h)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_feedforward_gradient_equals_finite_differences_of_the_reference(data):
    """The level loop's reverse-mode rule (the fixed point's nilpotent Jacobian) on random
    feedforward genomes, sparse and dense paths."""
    gdict = data.draw(genome_dicts(FF, activations=SMOOTH_ACTS, aggregations=SMOOTH_AGGS))
    method = data.draw(st.sampled_from(["sparse", "dense"]))
    policy = neat_policy(FF, "feedforward", method=method)
    finite_difference_check(FF, policy, gdict, lambda d, x: feedforward(FF, d, x))
    # and with respect to the inputs (reaching them takes one more round of the rule than any gene)
    x_grad = input_grad_program(method)(genome_from_dict(FF, gdict), jnp.asarray(XS[0], jnp.float32))
    for i in range(FF.num_inputs):
        step = np.eye(FF.num_inputs)[i] * 1e-5
        d = (
            np.dot(COEF, feedforward(FF, gdict, XS[0] + step))
            - np.dot(COEF, feedforward(FF, gdict, XS[0] - step))
        ) / 2e-5
        np.testing.assert_allclose(x_grad[i], d, rtol=5e-3, atol=5e-4, err_msg=f"input {i}")


@functools.cache
def input_grad_program(method):
    def loss(genome, x):
        return jnp.dot(jnp.asarray(COEF, jnp.float32), forward(FF, transform(FF, genome, method), x))

    return jax.jit(jax.grad(loss, argnums=1))


def test_tensorneat_outputs_are_differentiated_through_the_transform():
    """Outputs without activation, then ``tanh`` of the output vector (TensorNEAT's mode)."""
    gdict = {
        "nodes": {
            0: {"bias": 0.2, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            1: {"bias": -0.1, "response": 0.5, "activation": "tanh", "aggregation": "sum"},
            5: {"bias": 0.3, "response": -1.0, "activation": "gauss", "aggregation": "product"},
        },
        "connections": {
            (-1, 5): {"innovation": 1, "enabled": True, "weight": 0.8},
            (-2, 5): {"innovation": 2, "enabled": True, "weight": -0.4},
            (5, 0): {"innovation": 3, "enabled": True, "weight": 1.2},
            (-3, 1): {"innovation": 4, "enabled": True, "weight": 0.6},
            (5, 1): {"innovation": 5, "enabled": False, "weight": 0.9},
        },
    }
    policy = neat_policy(FF, "feedforward", outputs=OutputMode.tensorneat(jnp.tanh))

    def run(d, x):
        return np.tanh(feedforward(FF, d, x, activate_outputs=False))

    assert finite_difference_check(FF, policy, gdict, run) == 3 * 2 + 4


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_recurrent_and_ctrnn_gradients_equal_finite_differences_of_the_reference(data):
    """One call of the recurrent policy (a synchronous step from zero) and of the CTRNN policy
    (exponential Euler over its advance time) differentiate as they run."""
    ctrnn = data.draw(st.booleans())
    spec = CT if ctrnn else REC
    gdict = data.draw(
        genome_dicts(
            spec, recurrent=True, activations=SMOOTH_ACTS, aggregations=SMOOTH_AGGS, time_constant=ctrnn
        )
    )
    policy = neat_policy(spec, advance_time=0.05, time_step=0.02)

    def run(d, x):
        return CTRNN(spec, d).advance(x, 0.05, 0.02) if ctrnn else Recurrent(spec, d).activate(x)

    finite_difference_check(spec, policy, gdict, run)


def test_a_population_gets_each_genomes_own_gradient():
    grown = grow("ff_neat_python", 3, 10)
    spec, population = grown.spec, grown.population
    policy = neat_policy(spec)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, spec.num_inputs)), jnp.float32)
    loss, (node_grad, conn_grad) = jax.jit(lambda p: loss_and_grad(policy, p, x, jnp.sum))(population)
    assert loss.shape == (population.node_key.shape[0],)
    assert node_grad.shape == population.node_attrs.shape and conn_grad.shape == population.conn_attrs.shape
    single = jax.jit(lambda g: loss_and_grad(policy, g, x, jnp.sum))
    for i in (0, 7, 15):
        l1, (n1, c1) = single(jax.tree_util.tree_map(lambda a, i=i: a[i], population))
        np.testing.assert_allclose(l1, loss[i], rtol=1e-6)
        np.testing.assert_allclose(n1, node_grad[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c1, conn_grad[i], rtol=1e-5, atol=1e-6)
    inputs = jnp.arange(spec.max_nodes) < spec.num_inputs
    assert not np.any(np.asarray(node_grad)[:, np.asarray(inputs)])  # input pins compute nothing
    assert not np.any(np.asarray(node_grad)[~np.asarray(population.node_valid)])  # padding
    assert not np.any(np.asarray(conn_grad)[~np.asarray(population.conn_valid)])
    assert np.any(np.asarray(conn_grad) != 0)


XOR_X, XOR_Y = (jnp.asarray(a) for a in xor_cases(2))


def sse(y):
    return jnp.sum((y - XOR_Y) ** 2)


@pytest.fixture(scope="module")
def grown_xor():
    grown = grow("ff_neat_python", 11, 12)
    return grown.spec, grown.population


def tune(tuner, spec, population, loss_fn=sse):
    # the grown case has 3 inputs: XOR on the first two, the third held at 1
    x = jnp.concatenate([XOR_X, jnp.ones((4, spec.num_inputs - 2))], axis=1)
    return jax.jit(lambda p: tuner.tune(neat_policy(spec), p, x, loss_fn))(population)


def test_tuning_lowers_every_loss_and_changes_only_the_tuned_attributes(grown_xor):
    spec, population = grown_xor
    result = tune(GradientTuner(steps=30, learning_rate=0.05), spec, population)
    loss, initial = np.asarray(result.loss), np.asarray(result.initial_loss)
    assert np.all(loss <= initial)  # keep_best: never worse than the start
    assert np.mean(loss) < 0.8 * np.mean(initial)
    for name in ("node_key", "node_act", "node_agg", "conn_in", "conn_out", "conn_innov", "conn_enabled"):
        np.testing.assert_array_equal(getattr(result.genomes, name), getattr(population, name), err_msg=name)
    moved = np.asarray(result.genomes.conn_attrs != population.conn_attrs)[..., 0]
    assert moved.any() and not moved[~np.asarray(population.conn_valid)].any()
    inputs = np.arange(spec.max_nodes) < spec.num_inputs
    np.testing.assert_array_equal(result.genomes.node_attrs[:, inputs], population.node_attrs[:, inputs])
    # the returned loss is the returned genomes' own
    again = tune(GradientTuner(steps=1, learning_rate=1e-30), spec, result.genomes)
    np.testing.assert_allclose(again.initial_loss, loss, rtol=1e-6)


def test_a_tuner_of_weights_only_leaves_the_node_attributes(grown_xor):
    spec, population = grown_xor
    result = tune(GradientTuner(steps=5, attributes=("weight",)), spec, population)
    np.testing.assert_array_equal(result.genomes.node_attrs, population.node_attrs)
    assert np.any(result.genomes.conn_attrs != population.conn_attrs)


def test_values_stay_within_the_attribute_bounds(grown_xor):
    spec, population = grown_xor
    # a huge step pushes every tuned value to a bound: all must stay inside
    result = tune(GradientTuner(steps=3, optimizer=optax.sgd(1e6), keep_best=False), spec, population)
    for gene, attrs, valid in (
        (spec.node_gene, result.genomes.node_attrs, population.node_valid),
        (spec.conn_gene, result.genomes.conn_attrs, population.conn_valid),
    ):
        for col, attr in enumerate(gene.floats):
            values = np.asarray(attrs)[..., col][np.asarray(valid)]
            assert values.min() >= attr.min_value and values.max() <= attr.max_value, attr.name
    assert np.any(np.isin(np.asarray(result.genomes.conn_attrs)[..., 0], [-30.0, 30.0]))


def test_a_genome_with_a_nonfinite_loss_keeps_its_attributes(grown_xor):
    spec, population = grown_xor
    bad = population.replace(
        conn_attrs=population.conn_attrs.at[2].set(jnp.where(population.conn_valid[2, :, None], jnp.nan, 0.0))
    )
    result = tune(GradientTuner(steps=5), spec, bad)
    assert np.isinf(result.loss[2]) and np.isinf(result.initial_loss[2])
    np.testing.assert_array_equal(result.genomes.conn_attrs[2], bad.conn_attrs[2])
    assert np.all(np.isfinite(np.asarray(result.loss)[np.arange(16) != 2]))


def test_a_loss_that_is_not_a_scalar_is_refused(grown_xor):
    spec, population = grown_xor
    with pytest.raises(ArgumentError, match="loss_fn must return a scalar"):
        tune(GradientTuner(steps=1), spec, population, loss_fn=lambda y: y)


def test_lamarckian_gradient_fit_solves_xor_before_evolution_alone():
    """NEAT on XOR, pop 150, 15 generations: every genome tuned (20 Adam steps) and the tuned genomes
    inherited; the best SSE drops below 0.01, which the same NEAT without tuning (same seed and
    budget of generations) does not reach. The best genome the run reports has the loss reported."""
    strategy = NEAT.from_mode("neat-python", 2, 1, 150)
    fit = GradientFit(
        strategy.decoder, XOR_X, XOR_Y, loss="sse", tuner=GradientTuner(steps=20, learning_rate=0.1)
    )
    tuned = evotensor.run(strategy, fit, generations=15, key=jax.random.key(0))
    plain = evotensor.run(
        strategy, FunctionFit(XOR_X, XOR_Y, loss="sse"), generations=15, key=jax.random.key(0)
    )
    assert tuned.best_fitness < 0.01 < plain.best_fitness
    best = jax.tree_util.tree_map(lambda a: a[None], tuned.best_genotype)
    loss = jax.jit(lambda g: loss_and_grad(strategy.decoder, g, XOR_X, sse)[0])(best)
    np.testing.assert_allclose(loss[0], tuned.best_fitness, rtol=1e-5, atol=1e-7)


def test_a_fraction_tunes_only_the_best_genomes(grown_xor):
    """``GradientFit(fraction=0.25)``: the 4 genomes of lowest loss (of 16) are tuned and put back in
    place; the others keep their attributes and are scored as they are."""
    spec, population = grown_xor
    x = jnp.concatenate([XOR_X, jnp.ones((4, spec.num_inputs - 2))], axis=1)
    y = jnp.concatenate([XOR_Y, XOR_Y], axis=1)  # the grown case has two outputs
    fit = GradientFit(neat_policy(spec), x, y, loss="sse", tuner=GradientTuner(steps=10), fraction=0.25)
    ev = jax.jit(lambda g: fit.evaluate(None, g))(population)
    initial = np.asarray(ev.info["initial_loss"])
    best4 = set(np.argsort(initial, kind="stable")[:4].tolist())
    changed = {
        i
        for i in range(16)
        if np.any(np.asarray(ev.genotypes.conn_attrs[i]) != np.asarray(population.conn_attrs[i]))
        or np.any(np.asarray(ev.genotypes.node_attrs[i]) != np.asarray(population.node_attrs[i]))
    }
    assert changed and changed <= best4
    fitness = np.asarray(ev.fitness)
    for i in range(16):
        if i in best4:
            assert fitness[i] <= initial[i]
        else:
            assert fitness[i] == initial[i]
    every = GradientFit(neat_policy(spec), x, y, loss="sse", tuner=GradientTuner(steps=10))
    full = jax.jit(lambda g: every.evaluate(None, g))(population)
    np.testing.assert_allclose(np.asarray(full.info["initial_loss"]), initial, rtol=1e-6)
