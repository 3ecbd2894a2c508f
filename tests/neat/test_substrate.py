"""HyperNEAT and ES-HyperNEAT (``evotensor.neat.substrate``) against slow pure-Python references.

The random CPPNs are NumPy float64 functions rounded to float32, called from JAX through
``jax.pure_callback``: row by row they give the same float32 bits whatever the batch, so the
references (which query one point at a time) see exactly the weights the batched JAX code sees,
and node sets and weights can be compared exactly.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.problem import Decoder
from evotensor.neat.substrate import (
    ESHyperNEATConfig,
    ESHyperNEATDecoder,
    HyperNEATConfig,
    HyperNEATDecoder,
    Substrate,
    es_forward,
    es_hyperneat,
    es_init_state,
    es_step,
    hyperneat_weights,
    quadtree_extract,
    quadtree_points,
    scale_weights,
    substrate_forward,
    substrate_init_state,
    substrate_step,
)
from evotensor.problems.control import is_stateful

# --------------------------------------------------------------------------------------------------
# test CPPNs
# --------------------------------------------------------------------------------------------------


def np_cppn(A, c, a, X):
    """float64 ``tanh(sum_j a_j sin(c_j + sum_i X_i A_ij))`` per output, rounded to float32.

    ``A [..., k, h]``, ``c [..., h]``, ``a [..., h, o]``, ``X [..., M, k]`` -> ``[..., M, o]``; explicit
    loops so that every row is computed by the same operations whatever the batch."""
    A, c, a, X = (np.asarray(v, np.float64) for v in (A, c, a, X))
    z = np.broadcast_to(c[..., None, :], X.shape[:-1] + c.shape[-1:]).copy()
    for i in range(X.shape[-1]):
        z = z + X[..., :, i, None] * A[..., None, i, :]
    s = np.sin(z)
    outs = []
    for o in range(a.shape[-1]):
        y = np.zeros(X.shape[:-1])
        for j in range(s.shape[-1]):
            y = y + s[..., j] * a[..., None, j, o]
        outs.append(np.tanh(y))
    return np.stack(outs, axis=-1).astype(np.float32)


def cb_cppn(params, X):
    """The JAX side of :func:`np_cppn` (a ``pure_callback``; vmappable over ``params``)."""
    A, c, a = params["A"], params["c"], params["a"]
    shape = jax.ShapeDtypeStruct(X.shape[:-1] + (a.shape[-1],), jnp.float32)
    return jax.pure_callback(np_cppn, shape, A, c, a, X, vmap_method="broadcast_all")


def random_params(seed, k, h=6, o=1, scale=2.5):
    rng = np.random.default_rng(seed)
    return {
        "A": jnp.asarray(rng.normal(0, scale, (k, h)), jnp.float32),
        "c": jnp.asarray(rng.uniform(-np.pi, np.pi, h), jnp.float32),
        "a": jnp.asarray(rng.normal(0, 1.0, (h, o)), jnp.float32),
    }


def ref_query(params, row):
    """The reference CPPN call: one row, NumPy only."""
    p = {k: np.asarray(v) for k, v in params.items()}
    return np_cppn(p["A"], p["c"], p["a"], np.asarray(row, np.float32)[None])[0]


def ref_row(sub, src, tgt):
    src, tgt = np.asarray(src, np.float32), np.asarray(tgt, np.float32)
    row = list(src) + list(tgt)
    if sub.distance_input:
        d = tgt - src
        total = np.float32(0.0)
        for v in d:
            total = np.float32(total + np.float32(v * v))
        row.append(np.sqrt(total))
    if sub.cppn_bias_input:
        row.append(1.0)
    return np.asarray(row, np.float32)


def ref_scale(w, thr, mw):
    """HyperNEAT's weight map in float32 NumPy scalars (TensorNEAT's order of operations)."""
    w, thr = np.float32(w), np.float32(thr)
    if not abs(w) > thr:
        return np.float32(0.0)
    shifted = w - thr if w > 0 else w + thr
    return np.float32(shifted * np.float32(mw / (1.0 - float(thr))))


# --------------------------------------------------------------------------------------------------
# Substrate and the weight map
# --------------------------------------------------------------------------------------------------


def test_substrate_layout_and_sizes():
    sub = Substrate(
        inputs=[(-1, -1), (0, -1), (1, -1)],
        outputs=[(0, 1)],
        hidden=[[(-1, 0), (1, 0)], [(0, 0.5)]],
        bias_coordinate=(0, -0.5),
        distance_input=True,
        cppn_bias_input=True,
        bias_output=True,
    )
    assert sub.dim == 2 and sub.num_inputs == 3 and sub.num_input_nodes == 4
    assert sub.layer_sizes == (4, 2, 1, 1) and sub.num_nodes == 8
    assert sub.cppn_num_inputs == 6 and sub.cppn_num_outputs == 2
    np.testing.assert_array_equal(sub.input_coords[-1], [0, -0.5])
    np.testing.assert_array_equal(sub.node_coords[4], [0, 1])  # outputs follow the inputs
    rows = sub.cppn_inputs(jnp.asarray([[0.0, 0.0]]), jnp.asarray([[3.0, 4.0]]))
    np.testing.assert_array_equal(rows, [[0, 0, 3, 4, 5, 1]])
    assert hash(sub) == hash(Substrate(**{f: getattr(sub, f) for f in sub.__dataclass_fields__}))


@settings(max_examples=10)
@given(
    d=st.integers(1, 4),
    dist=st.booleans(),
    bias_in=st.booleans(),
    bias_out=st.booleans(),
    n_in=st.integers(1, 4),
    n_out=st.integers(1, 3),
)
def test_cppn_layout_property(d, dist, bias_in, bias_out, n_in, n_out):
    rng = np.random.default_rng(d * 100 + n_in * 10 + n_out)
    sub = Substrate(
        inputs=rng.normal(size=(n_in, d)),
        outputs=rng.normal(size=(n_out, d)) + 10,
        distance_input=dist,
        cppn_bias_input=bias_in,
        bias_output=bias_out,
    )
    assert sub.cppn_num_inputs == 2 * d + dist + bias_in
    assert sub.cppn_num_outputs == 1 + bias_out
    rows = sub.cppn_inputs(sub.input_coords, sub.input_coords[::-1])
    assert rows.shape == (n_in, sub.cppn_num_inputs)
    np.testing.assert_array_equal(rows[:, :d], sub.input_coords)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(inputs=[], outputs=[(0, 1)]), "inputs"),
        (dict(inputs=[(0, 0)], outputs=[(0, 1, 2)]), "outputs"),
        (dict(inputs=[(0, 0)], outputs=[(0, 1)], kind="dense"), "kind"),
        (dict(inputs=[(0, 0)], outputs=[(0, 0)]), "distinct"),
        (dict(inputs=[(0, 0)], outputs=[(0, 1)], hidden=[(1, 1)]), "hidden"),
        (dict(inputs=[(0, np.nan)], outputs=[(0, 1)]), "inputs"),
        (dict(inputs=[(0, 0)], outputs=[(0, 1)], bias_output=1), "bias_output"),
        (dict(inputs=[(0, 0)], outputs=[(0, 1)], bias_coordinate=(0, 1)), "distinct"),
    ],
)
def test_substrate_bad_arguments(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        Substrate(**kwargs)


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (HyperNEATConfig, dict(weight_threshold=1.0), "weight_threshold"),
        (HyperNEATConfig, dict(max_weight=0), "max_weight"),
        (HyperNEATConfig, dict(activation="nope"), "activation"),
        (HyperNEATConfig, dict(activate_time=0), "activate_time"),
        (ESHyperNEATConfig, dict(initial_depth=5, max_depth=4), "initial_depth"),
        (ESHyperNEATConfig, dict(max_depth=0), "max_depth"),
        (ESHyperNEATConfig, dict(variance_threshold=-0.1), "variance_threshold"),
        (ESHyperNEATConfig, dict(max_hidden=0), "max_hidden"),
        (ESHyperNEATConfig, dict(width=0.0), "width"),
        (ESHyperNEATConfig, dict(center=(0, 0, 0)), "center"),
    ],
)
def test_config_bad_arguments(cls, kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        cls(**kwargs)


def test_es_needs_2d_substrate_without_hidden():
    params = random_params(0, 6)
    with pytest.raises(ArgumentError, match="2-d"):
        cfg = ESHyperNEATConfig(initial_depth=1, max_depth=1)
        es_hyperneat(Substrate([(0, 0, 0)], [(0, 1, 0)]), cb_cppn, params, cfg)
    with pytest.raises(ArgumentError, match="hidden"):
        ESHyperNEATDecoder(Substrate([(0, 0)], [(0, 1)], hidden=[[(0, 0.5)]]), cb_cppn)
    with pytest.raises(ArgumentError, match="cppn_apply"):
        HyperNEATDecoder(Substrate([(0, 0)], [(0, 1)]), cppn_apply=3)


def test_cppn_output_shape_is_checked():
    sub = Substrate([(0, 0)], [(0, 1)], bias_output=True)
    with pytest.raises(ArgumentError, match="cppn_apply"):
        hyperneat_weights(sub, lambda p, X: X[:, :1], None)


def test_scale_weights_exact_points():
    w = jnp.asarray([0.0, 0.3, -0.3, 0.2999, 1.0, -1.0, 0.65, 2.0], jnp.float32)
    got = np.asarray(scale_weights(w, 0.3, 5.0))
    np.testing.assert_allclose(got, [0, 0, 0, 0, 5, -5, 2.5, 12.142857], rtol=1e-6)
    assert got[1] == 0 and got[2] == 0  # |w| == threshold is no connection


_scale_jit = jax.jit(scale_weights, static_argnums=(1, 2))


@given(st.lists(st.floats(-3, 3, width=32), min_size=16, max_size=16), st.floats(0, 0.9), st.floats(0.1, 10))
def test_scale_weights_property(ws, thr, mw):
    w = np.asarray(ws, np.float32)
    got = np.asarray(scale_weights(w, thr, mw))
    np.testing.assert_array_equal(_scale_jit(w, thr, mw), got)  # jit gives the same bits
    want = np.asarray([ref_scale(v, thr, mw) for v in w])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(scale_weights(-w, thr, mw)), -got)  # odd
    assert np.all((got == 0) == (np.abs(w) <= np.float32(thr)))


# --------------------------------------------------------------------------------------------------
# HyperNEAT on fixed substrates
# --------------------------------------------------------------------------------------------------

FF = Substrate(
    inputs=[(-1, -1), (0, -1), (1, -1)],
    outputs=[(-0.5, 1), (0.5, 1)],
    hidden=[[(-1, -0.3), (0, -0.3), (1, -0.3), (0.5, -0.3)], [(-0.5, 0.4), (0.5, 0.4)]],
    bias_coordinate=(0, -0.6),
    distance_input=True,
    bias_output=True,
)
REC = Substrate(
    inputs=[(-1, -1), (1, -1)],
    outputs=[(0, 1)],
    hidden=[[(-1, 0), (0, 0), (1, 0)]],
    kind="recurrent",
    bias_coordinate=(0, -1),
    cppn_bias_input=True,
)


def ref_hyperneat(sub, params, cfg):
    """Python loop over every substrate connection: ``{(src_coords, tgt_coords): w}`` and biases."""
    if sub.kind == "feedforward":
        layers = [sub.input_coords] + [sub.hidden_coords(i) for i in range(len(sub.hidden))]
        layers.append(sub.output_coords)
        pairs = [(a, b) for la, lb in zip(layers[:-1], layers[1:]) for a in la for b in lb]
        targets = [b for lb in layers[1:] for b in lb]
    else:
        nodes = sub.node_coords
        pairs = [(a, b) for a in nodes for b in nodes[sub.num_input_nodes :]]
        targets = list(nodes[sub.num_input_nodes :])
    weights = {}
    for a, b in pairs:
        raw = ref_query(params, ref_row(sub, a, b))
        weights[tuple(a), tuple(b)] = ref_scale(raw[0], cfg.weight_threshold, cfg.max_weight)
    biases = {}
    for b in targets:
        raw = ref_query(params, ref_row(sub, np.zeros(2), b))
        biases[tuple(b)] = ref_scale(raw[1], cfg.weight_threshold, cfg.max_weight) if sub.bias_output else 0.0
    return weights, biases


@pytest.mark.parametrize("sub", [FF, REC], ids=["feedforward", "recurrent"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hyperneat_weights_equal_python_loop(sub, seed):
    cfg = HyperNEATConfig(weight_threshold=0.2 + 0.1 * seed, max_weight=3.0 + seed)
    params = random_params(seed, sub.cppn_num_inputs, o=sub.cppn_num_outputs)
    net = jax.jit(lambda p: hyperneat_weights(sub, cb_cppn, p, cfg))(params)
    want_w, want_b = ref_hyperneat(sub, params, cfg)
    if sub.kind == "feedforward":
        layers = [sub.input_coords] + [sub.hidden_coords(i) for i in range(len(sub.hidden))]
        layers.append(sub.output_coords)
        src_tgt = list(zip(layers[:-1], layers[1:]))
    else:
        src_tgt = [(sub.node_coords, sub.node_coords[sub.num_input_nodes :])]
    got_w, got_b = {}, {}
    for (src, tgt), w, b in zip(src_tgt, net.weights, net.biases):
        assert w.shape == (len(src), len(tgt)) and b.shape == (len(tgt),)
        for i, a in enumerate(src):
            for j, t in enumerate(tgt):
                got_w[tuple(a), tuple(t)] = np.asarray(w)[i, j]
        for j, t in enumerate(tgt):
            got_b[tuple(t)] = np.asarray(b)[j]
    assert got_w.keys() == want_w.keys()
    for key in want_w:
        assert got_w[key] == want_w[key], key  # threshold and scaling exact
        assert got_b.get(key[1], 0) == want_b[key[1]]
    zeros = sum(v == 0 for v in want_w.values())
    assert 0 < zeros < len(want_w)  # the threshold actually cut something


def np_act(z):
    return 1.0 / (1.0 + np.exp(-z))


def test_feedforward_forward_equals_numpy():
    params = random_params(5, FF.cppn_num_inputs, o=2)
    net = hyperneat_weights(FF, cb_cppn, params)
    X = np.random.default_rng(0).normal(size=(7, FF.num_inputs)).astype(np.float32)
    got = jax.jit(lambda n, x: substrate_forward(FF, n, x))(net, X)
    h = np.concatenate([X, np.ones((7, 1))], axis=1).astype(np.float64)
    for w, b in zip(net.weights, net.biases):
        h = np_act(h @ np.asarray(w, np.float64) + np.asarray(b, np.float64))
    np.testing.assert_allclose(got, h, rtol=1e-5, atol=1e-6)
    one = substrate_forward(FF, net, X[3])  # unbatched input
    np.testing.assert_allclose(one, got[3], rtol=1e-6)


def np_recurrent(W, b, x_nodes, n_out, steps, state):
    n_in = x_nodes.shape[-1]
    s = np.array(state, np.float64)
    for _ in range(steps):
        s[:n_in] = x_nodes
        z = s @ W + b
        s = np.concatenate([x_nodes, np_act(z)])
    return s, s[n_in : n_in + n_out]


def test_recurrent_state_carries_over_calls():
    cfg = HyperNEATConfig(activation="tanh", output_activation="sigmoid", activate_time=4)
    params = random_params(7, REC.cppn_num_inputs)
    net = hyperneat_weights(REC, cb_cppn, params, cfg)
    W, b = np.asarray(net.weights[0], np.float64), np.asarray(net.biases[0], np.float64)
    assert W.shape == (REC.num_nodes, REC.num_nodes - REC.num_input_nodes)
    state = substrate_init_state(REC, net)
    np.testing.assert_array_equal(state, np.zeros(REC.num_nodes))
    xs = np.random.default_rng(1).normal(size=(5, 2)).astype(np.float32)
    step = jax.jit(lambda n, s, x: substrate_step(REC, n, s, x, cfg))
    s_ref = np.zeros(REC.num_nodes)
    n_in = REC.num_input_nodes
    for x in xs:
        state, y = step(net, state, x)
        s_ref = s_ref.copy()
        for _ in range(1):
            s_ref[:n_in] = np.append(x, 1.0)
            z = s_ref @ W + b
            s_ref = np.concatenate([np.append(x, 1.0), np_act(z[:1]), np.tanh(z[1:])])
        np.testing.assert_allclose(state, s_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, s_ref[n_in : n_in + 1], rtol=1e-5, atol=1e-6)
    # the state matters: the same observation from a fresh state gives another output
    fresh = step(net, substrate_init_state(REC, net), xs[-1])[1]
    assert not np.allclose(fresh, y)
    # forward = activate_time synchronous steps from zero
    got = substrate_forward(REC, net, xs[0], cfg)
    many = substrate_step(REC, net, substrate_init_state(REC, net), xs[0], cfg, steps=4)[1]
    np.testing.assert_array_equal(got, many)


def test_hyperneat_decoder_vmaps_a_population():
    pop = [random_params(s, FF.cppn_num_inputs, o=2) for s in range(4)]
    stacked = jax.tree.map(lambda *v: jnp.stack(v), *pop)
    dec = HyperNEATDecoder(FF, cb_cppn)
    assert isinstance(dec, Decoder)
    nets = jax.jit(dec.decode)(stacked)
    x = jnp.asarray([0.1, -0.4, 0.7])
    ys = jax.jit(jax.vmap(dec.apply, in_axes=(0, None)))(nets, x)
    single = jax.jit(lambda p: hyperneat_weights(FF, cb_cppn, p))
    for i, p in enumerate(pop):
        one = single(p)
        for a, b in zip(one.weights, jax.tree.map(lambda v, i=i: v[i], nets).weights):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(ys[i], substrate_forward(FF, one, x), rtol=1e-6)
    assert not is_stateful(dec.apply)
    rdec = HyperNEATDecoder(
        REC, cb_cppn, cppn_decode=lambda g: g["cppn"], policy="stateful", steps_per_call=2
    )
    assert is_stateful(rdec.apply)
    rpop = jax.tree.map(lambda *v: jnp.stack(v), *[random_params(s, REC.cppn_num_inputs) for s in range(3)])
    rnets = rdec.decode({"cppn": rpop})
    state = jax.vmap(rdec.apply.init_state)(rnets)
    state, y = jax.vmap(rdec.apply.step, in_axes=(0, 0, None))(rnets, state, jnp.ones(2))
    assert state.shape == (3, REC.num_nodes) and y.shape == (3, 1)
    net0 = jax.tree.map(lambda v: v[0], rnets)
    two = substrate_step(REC, net0, substrate_init_state(REC, net0), jnp.ones(2), steps=2)
    np.testing.assert_allclose(state[0], two[0], rtol=1e-6)
    with pytest.raises(ArgumentError, match="recurrent"):
        HyperNEATDecoder(FF, cb_cppn, policy="stateful")
    with pytest.raises(ArgumentError, match="policy"):
        HyperNEATDecoder(REC, cb_cppn, policy="sometimes")


# --------------------------------------------------------------------------------------------------
# ES-HyperNEAT: the slow recursive reference
# --------------------------------------------------------------------------------------------------


class _Quad:
    def __init__(self, k, ix, iy):
        self.k, self.ix, self.iy = k, ix, iy
        self.w = None
        self.children = None


def ref_coord(cfg, k, i, axis):
    return np.float32(cfg.center[axis] - cfg.width / 2 + (i + 0.5) * (cfg.width / 2**k))


def ref_gid(k, ix, iy):
    return sum(4**j for j in range(1, k)) + ix * 2**k + iy


class RefES:
    """ES-HyperNEAT as the paper's recursive pseudocode (pureples' structure: a BFS division, a
    recursive pruning/extraction, sets of connections, a reachability clean-up), with the
    module's documented choices: raw CPPN weights in the tree, node identity by coordinates,
    hidden slots in discovery order with dropped nodes counted."""

    def __init__(self, sub, cfg, params):
        self.sub, self.cfg, self.params = sub, cfg, params
        self.memo = {}

    def w(self, src, tgt):
        row = ref_row(self.sub, src, tgt)
        key = row.tobytes()
        if key not in self.memo:
            self.memo[key] = ref_query(self.params, row)[0]
        return self.memo[key]

    def point(self, k, ix, iy):
        return (ref_coord(self.cfg, k, ix, 0), ref_coord(self.cfg, k, iy, 1))

    def w_at(self, a, k, ix, iy, outgoing):
        p = self.point(k, ix, iy)
        return self.w(a, p) if outgoing else self.w(p, a)

    def divide(self, a, outgoing):
        cfg = self.cfg
        root = _Quad(0, 0, 0)
        queue = [root]
        while queue:
            p = queue.pop(0)
            p.children = [_Quad(p.k + 1, 2 * p.ix + i, 2 * p.iy + j) for i in (0, 1) for j in (0, 1)]
            for c in p.children:
                c.w = self.w_at(a, c.k, c.ix, c.iy, outgoing)
            var = np.var(np.asarray([c.w for c in p.children], np.float64))
            if p.k + 1 < cfg.initial_depth or (p.k + 1 < cfg.max_depth and var > cfg.division_threshold):
                queue.extend(p.children)
        return root

    def leaves(self, p):
        return [p.w] if p.children is None else [w for c in p.children for w in self.leaves(c)]

    def extract(self, a, p, outgoing, out):
        cfg = self.cfg
        for c in p.children:
            if np.var(np.asarray(self.leaves(c), np.float64)) > cfg.variance_threshold:
                self.extract(a, c, outgoing, out)
                continue
            nb = [
                self.w_at(a, c.k, c.ix + dx, c.iy + dy, outgoing)
                for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1))
            ]
            d_l, d_r, d_d, d_u = (abs(float(c.w) - float(v)) for v in nb)
            band = max(min(d_u, d_d), min(d_l, d_r))
            pt = self.point(c.k, c.ix, c.iy)
            if band > cfg.band_threshold and abs(c.w) > cfg.weight_threshold and pt != tuple(a):
                out[ref_gid(c.k, c.ix, c.iy)] = (pt, c.w)

    def quadtree(self, a, outgoing):
        a = tuple(np.float32(v) for v in a)
        out = {}
        self.extract(a, self.divide(a, outgoing), outgoing, out)
        return out

    def run(self):
        sub, cfg = self.sub, self.cfg
        io = {}
        for i, c in enumerate(sub.input_coords):
            io[tuple(c)] = ("in", i)
        for o, c in enumerate(sub.output_coords):
            io[tuple(c)] = ("out", o)
        order, slot, dropped = [], {}, set()
        coords = {}

        def add(cands):
            for g in sorted(cands):
                if g in slot or g in dropped:
                    continue
                if len(order) < cfg.max_hidden:
                    slot[g] = len(order)
                    order.append(g)
                else:
                    dropped.add(g)

        raw = []  # (src key, tgt key, raw w); grid keys are ("grid", gid)
        new = set()
        for i, a in enumerate(sub.input_coords):
            for g, (pt, w) in self.quadtree(a, True).items():
                coords[g] = pt
                raw.append((("in", i), ("grid", g), w))
                if pt not in io:
                    new.add(g)
        add(new)
        lo = 0
        for _ in range(cfg.iteration_level):
            hi = len(order)
            new = set()
            for g in order[lo:hi]:
                for g2, (pt, w) in self.quadtree(coords[g], True).items():
                    coords[g2] = pt
                    raw.append((("grid", g), ("grid", g2), w))
                    if pt not in io and g2 not in slot and g2 not in dropped:
                        new.add(g2)
            add(new)
            lo = hi
        for o, a in enumerate(sub.output_coords):
            for g, (pt, w) in self.quadtree(a, False).items():
                coords[g] = pt
                raw.append((("grid", g), ("out", o), w))

        def node(key):
            if key[0] != "grid":
                return key
            pt = coords[key[1]]
            if pt in io:
                return io[pt]
            return ("h", key[1]) if key[1] in slot else None

        edges = {}
        for s, t, w in raw:
            s, t = node(s), node(t)
            if s is None or t is None or t[0] == "in":
                continue
            edges[s, t] = ref_scale(w, cfg.weight_threshold, cfg.max_weight)
        # clean: keep edges on input -> output paths
        reach_in = {("in", i) for i in range(sub.num_input_nodes)}
        reach_out = {("out", o) for o in range(sub.num_outputs)}
        changed = True
        while changed:
            changed = False
            for s, t in edges:
                if s in reach_in and t not in reach_in:
                    reach_in.add(t)
                    changed = True
                if t in reach_out and s not in reach_out:
                    reach_out.add(s)
                    changed = True
        kept = {e: w for e, w in edges.items() if e[0] in reach_in and e[1] in reach_out}

        def xy(key):
            if key[0] == "in":
                return tuple(sub.input_coords[key[1]])
            if key[0] == "out":
                return tuple(sub.output_coords[key[1]])
            return coords[key[1]]

        hidden = {coords[g]: slot[g] for g in order if ("h", g) in reach_in and ("h", g) in reach_out}
        return {
            "edges": {(xy(s), xy(t)): w for (s, t), w in kept.items()},
            "hidden": hidden,
            "overflow": len(dropped),
            "discovered": len(order),
            "slot_coords": [coords[g] for g in order],
        }


def jax_edges(sub, net):
    n_in = sub.num_input_nodes
    coords = [tuple(c) for c in sub.input_coords] + [tuple(c) for c in sub.output_coords]
    coords += [tuple(np.float32(v) for v in c) for c in np.asarray(net.hidden_coords)]
    W = np.asarray(net.weights)
    out = {}
    for i, j in zip(*np.nonzero(W)):
        out[tuple(np.float32(v) for v in coords[i]), tuple(np.float32(v) for v in coords[j + n_in])] = W[i, j]
    return out


def check_against_reference(sub, cfg, params, net):
    ref = RefES(sub, cfg, params).run()
    got = jax_edges(sub, net)
    assert got.keys() == ref["edges"].keys()
    for key, w in ref["edges"].items():
        np.testing.assert_allclose(got[key], w, rtol=1e-6, err_msg=str(key))
    mask = np.asarray(net.hidden_mask)
    hc = np.asarray(net.hidden_coords)
    got_hidden = {(np.float32(hc[s, 0]), np.float32(hc[s, 1])): s for s in np.nonzero(mask)[0]}
    assert got_hidden == ref["hidden"]  # same nodes in the same slots
    assert int(net.overflow) == ref["overflow"]
    assert int(net.num_discovered) == ref["discovered"]
    assert int(net.num_hidden) == len(ref["hidden"])
    return ref


ES_SUB = Substrate(
    inputs=[(-1, -1), (0, -1), (-0.5, -0.5)],  # (-0.5, -0.5) is a depth-1 quadtree point
    outputs=[(0, 1), (0.25, 0.75)],  # (0.25, 0.75) is a depth-2 point
    bias_coordinate=(1, -1),
)
ES_CASES = [
    (ES_SUB, ESHyperNEATConfig(initial_depth=2, max_depth=3, max_hidden=64, division_threshold=0.03)),
    (
        Substrate(inputs=[(-1, -1), (1, -1)], outputs=[(0, 1)], cppn_bias_input=True),
        ESHyperNEATConfig(
            initial_depth=1,
            max_depth=3,
            iteration_level=2,
            max_hidden=12,  # small: overflow happens
            variance_threshold=0.01,
            band_threshold=0.2,
            division_threshold=0.05,
            center=(0.1, -0.1),
            width=2.5,
        ),
    ),
    (ES_SUB, ESHyperNEATConfig(initial_depth=1, max_depth=3, iteration_level=0, max_hidden=40)),
]


@functools.cache
def _es_jit(sub, cfg):
    return jax.jit(lambda p: es_hyperneat(sub, cb_cppn, p, cfg))


@pytest.mark.parametrize("case", range(len(ES_CASES)))
def test_es_hyperneat_equals_recursive_reference(case):
    sub, cfg = ES_CASES[case]
    fn = _es_jit(sub, cfg)
    nonempty = overflowed = 0
    for seed in range(5):
        params = random_params(100 * case + seed, sub.cppn_num_inputs, scale=2.0)
        net = fn(params)
        ref = check_against_reference(sub, cfg, params, net)
        nonempty += len(ref["hidden"]) > 0
        overflowed += ref["overflow"] > 0
    assert nonempty >= 3  # the comparison is not vacuous
    if cfg.max_hidden < 20:
        assert overflowed >= 1


def test_es_vmap_over_population_equals_single():
    sub, cfg = ES_CASES[0]
    pop = [random_params(s, sub.cppn_num_inputs, scale=2.0) for s in range(4)]
    stacked = jax.tree.map(lambda *v: jnp.stack(v), *pop)
    dec = ESHyperNEATDecoder(sub, cb_cppn, config=cfg)
    assert isinstance(dec, Decoder)
    nets = jax.jit(dec.decode)(stacked)
    assert nets.weights.shape == (
        4,
        sub.num_input_nodes + sub.num_outputs + cfg.max_hidden,
        cfg.max_hidden + 2,
    )
    fn = _es_jit(sub, cfg)
    for i, p in enumerate(pop):
        one = fn(p)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(jax.tree.map(lambda v, i=i: v[i], nets))):
            np.testing.assert_array_equal(a, b)
    x = jnp.asarray([0.3, -0.2, 0.9])
    ys = jax.jit(jax.vmap(dec.apply, in_axes=(0, None)))(nets, x)
    assert ys.shape == (4, 2) and np.all(np.isfinite(ys))
    np.testing.assert_array_equal(ys[1], es_forward(sub, jax.tree.map(lambda v: v[1], nets), x, cfg))
    sdec = ESHyperNEATDecoder(sub, cb_cppn, config=cfg, policy="stateful")
    assert is_stateful(sdec.apply) and not is_stateful(dec.apply)
    state = jax.vmap(sdec.apply.init_state)(nets)
    state, y = jax.vmap(sdec.apply.step, in_axes=(0, 0, None))(nets, state, x)
    assert state.shape == nets.weights.shape[:2] and y.shape == (4, 2)


def shape_cppn(p, X):
    """``c + r * ridge + t * step``: a thin ridge of weight 0.9 at x = 0.3125 in the source's and
    the target's x (width 0.08), a sharp step at x = 0.3 in the target's x, a constant."""
    ridge = lambda x: 0.9 * jnp.exp(-jnp.square((x - 0.3125) / 0.08))  # noqa: E731
    w = p["c"] + p["r"] * (ridge(X[:, 0]) + ridge(X[:, 2])) + p["t"] * 0.8 * jnp.tanh(200.0 * (X[:, 2] - 0.3))
    return w[:, None]


SHAPE_SUB = Substrate(inputs=[(-1, -1), (-0.6, -1)], outputs=[(-0.2, 1)])
SHAPE_CFG = ESHyperNEATConfig(initial_depth=2, max_depth=4, max_hidden=32, iteration_level=0)
_shape_extract = jax.jit(
    lambda p: quadtree_extract(SHAPE_SUB, shape_cppn, p, SHAPE_SUB.input_coords, True, SHAPE_CFG)
)
_shape_net = jax.jit(lambda p: es_hyperneat(SHAPE_SUB, shape_cppn, p, SHAPE_CFG))


def shape(c=0.0, r=0.0, t=0.0):
    return {k: jnp.float32(v) for k, v in (("c", c), ("r", r), ("t", t))}


def test_es_constant_cppn_has_no_hidden_nodes():
    sub, cfg = SHAPE_SUB, SHAPE_CFG
    express, w, exists = _shape_extract(shape(c=0.7))
    # no variance: the tree stops at the initial depth; no band: nothing is expressed
    assert exists.shape == (2, cfg.num_points)
    np.testing.assert_array_equal(np.sum(exists, axis=1), [4 + 16] * 2)
    assert not np.any(express)
    net = _shape_net(shape(c=0.7))
    assert int(net.num_hidden) == 0 and int(net.num_connections) == 0 and int(net.overflow) == 0
    # outputs without an incoming connection stay 0 (never evaluated)
    np.testing.assert_array_equal(es_forward(sub, net, jnp.ones(2), cfg), [0.0])


def test_es_sharp_feature_places_hidden_nodes_there():
    cfg = SHAPE_CFG
    pts = quadtree_points(cfg)
    deep = slice(cfg.num_points - 4**cfg.max_depth, None)
    express, w, exists = _shape_extract(shape(r=1.0))
    # the tree is refined to max_depth only around the ridge
    in_tree = pts[deep][np.asarray(exists[0, deep])]
    assert len(in_tree) > 0 and np.all(np.abs(in_tree[:, 0] - 0.3125) < 0.3)
    assert np.sum(exists[0]) < cfg.num_points // 2
    # expressed: exactly the finest points on the ridge (x = 0.3125, every y)
    column = {(0.3125, -1 + 0.0625 + 0.125 * i) for i in range(16)}
    assert {tuple(map(float, p)) for p in pts[np.asarray(express[0])]} == column
    net = _shape_net(shape(r=1.0))
    hidden = np.asarray(net.hidden_coords)[np.asarray(net.hidden_mask)]
    assert {tuple(map(float, h)) for h in hidden} == column
    assert bool(net.acyclic) and int(net.depth) == 2  # input -> hidden -> output
    assert int(net.num_connections) == 2 * 16 + 16
    # a step has no band (each point equals one of its neighbours): nothing is expressed
    express, _, exists = _shape_extract(shape(t=1.0))
    assert np.any(exists[0, deep]) and not np.any(express)


def test_es_capacity_overflow_is_counted():
    sub, large = ES_CASES[2]  # iteration_level 0: the discovered set does not depend on the capacity
    small = dataclasses.replace(large, max_hidden=3)
    for seed in range(3):
        params = random_params(seed, sub.cppn_num_inputs, scale=2.0)
        a, b = _es_jit(sub, small)(params), _es_jit(sub, large)(params)
        assert int(b.overflow) == 0
        assert int(a.num_discovered) == min(3, int(b.num_discovered))
        assert int(a.overflow) == int(b.num_discovered) - int(a.num_discovered)  # every one counted
        assert int(a.num_hidden) <= 3
    assert int(a.overflow) > 0


def np_es_forward(sub, net, x, cfg):
    """Feedforward evaluation in topological order (acyclic networks), float64."""
    W = np.asarray(net.weights, np.float64)
    b = np.asarray(net.biases, np.float64)
    active = np.asarray(net.active)
    n_in, n_out = sub.num_input_nodes, sub.num_outputs
    n = W.shape[0]
    full = np.zeros((n, n))
    full[:, n_in:] = W
    vals = np.zeros(n)
    vals[:n_in] = np.append(x, 1.0) if sub.bias_coordinate is not None else x
    done = set(range(n_in)) | {n_in + j for j in range(n - n_in) if not active[j]}
    while len(done) < n:
        for v in range(n):
            if v in done:
                continue
            preds = np.nonzero(full[:, v])[0]
            if all(p in done for p in preds):
                z = vals[preds] @ full[preds, v] + b[v - n_in]
                vals[v] = np_act(z)
                done.add(v)
    return vals[n_in : n_in + n_out]


def test_es_forward_equals_feedforward_reference():
    sub, cfg = ES_CASES[2]
    fn = _es_jit(sub, cfg)
    checked = 0
    for seed in range(6):
        net = fn(random_params(seed, sub.cppn_num_inputs, scale=2.0))
        if not bool(net.acyclic) or int(net.num_connections) == 0:
            continue
        x = np.asarray([0.5, -0.3, 0.8], np.float32)
        got = es_forward(sub, net, jnp.asarray(x), cfg)
        np.testing.assert_allclose(got, np_es_forward(sub, net, x, cfg), rtol=1e-5, atol=1e-6)
        # more steps change nothing once an acyclic network has settled
        more = es_step(sub, net, es_init_state(net), jnp.asarray(x), cfg, steps=int(net.depth) + 3)[1]
        np.testing.assert_allclose(more, got, rtol=1e-6, atol=1e-7)
        checked += 1
    assert checked >= 2


def test_es_stateful_step_and_cyclic_forward():
    sub, cfg = ES_CASES[1]
    fn = _es_jit(sub, cfg)
    nets = [fn(random_params(100 + s, sub.cppn_num_inputs, scale=2.0)) for s in range(6)]
    net = max(nets, key=lambda n: int(n.num_connections))
    assert int(net.num_connections) > 0
    W, b = np.asarray(net.weights, np.float64), np.asarray(net.biases, np.float64)
    active = np.asarray(net.active)
    n_in, n_out = sub.num_input_nodes, sub.num_outputs
    state = es_init_state(net)
    s_ref = np.zeros(W.shape[0])
    xs = np.random.default_rng(3).normal(size=(4, 2)).astype(np.float32)
    for x in xs:
        state, y = es_step(sub, net, state, jnp.asarray(x), cfg)
        s_ref[:n_in] = x
        new = np_act(s_ref @ W + b)
        s_ref = np.concatenate([x, np.where(active, new, s_ref[n_in:])])
        np.testing.assert_allclose(state, s_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, s_ref[n_in : n_in + n_out], rtol=1e-5, atol=1e-6)
    # a cyclic network's forward is activate_time steps from zero
    cyc = [n for n in nets if not bool(n.acyclic)]
    for n in cyc:
        got = es_forward(sub, n, jnp.asarray(xs[0]), cfg)
        want = es_step(sub, n, es_init_state(n), jnp.asarray(xs[0]), cfg, steps=cfg.activate_time)[1]
        np.testing.assert_array_equal(got, want)
