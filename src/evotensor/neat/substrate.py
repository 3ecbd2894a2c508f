"""HyperNEAT and ES-HyperNEAT: a CPPN paints the weights of a substrate, at fixed shapes.

A **CPPN** here is any pure JAX function ``cppn_apply(params, coords) -> outputs`` with ``coords
float32 [M, substrate.cppn_num_inputs]`` and ``outputs float32 [M, substrate.cppn_num_outputs]``:
a NEAT network (``lambda net, X: forward_batch(spec, net, X)``), a small MLP evolved by an ES, or an
analytic function. Every decoder takes ``cppn_params`` separately, so a population is decoded with
``jax.vmap`` over the parameters (the decoder classes do that).

**CPPN inputs** (:meth:`Substrate.cppn_inputs`): ``(x1, y1, x2, y2)`` (source then target
coordinates, ``2 * d`` columns), then the Euclidean distance ``|p2 - p1|`` if
``distance_input``, then a constant ``1.0`` if ``cppn_bias_input`` (pureples passes one).
**CPPN outputs**: column 0 is the connection weight; with ``bias_output`` column 1 is the node
bias, queried for every non-input node ``q`` at ``(0, ..., 0, q)`` (the source at the origin).

**Weights** (:func:`scale_weights`, TensorNEAT's HyperNEAT): a CPPN output ``w`` with
``|w| <= weight_threshold`` (default 0.3) is 0; the rest is shifted toward 0 by the threshold and
scaled, ``sign(w) (|w| - threshold) * max_weight / (1 - threshold)`` (default 5), so outputs in
``[-1, 1]`` map onto ``[-max_weight, max_weight]`` (nothing is clipped). Biases use the same map.

**HyperNEAT** (:func:`hyperneat_weights`): every connection of a fixed :class:`Substrate` is
queried in one batched CPPN call.

* ``kind="feedforward"``: layers ``inputs (+ bias) -> hidden_1 -> ... -> outputs``, one dense
  ``[n_i, n_{i+1}]`` matrix per pair of consecutive layers; :func:`substrate_forward` runs them
  layer by layer (TensorNEAT's ``HyperNEATFeedForward`` with an ``MLPSubstrate``).
* ``kind="recurrent"``: every node to every non-input node (self-loops included), one
  ``[N, N - n_in]`` matrix over the nodes ordered ``inputs (+ bias), outputs, hidden``;
  :func:`substrate_forward` starts from a zero state and makes ``activate_time`` synchronous
  updates (TensorNEAT's ``HyperNEAT`` with its recurrent genome, default 10), while
  :func:`substrate_init_state` / :func:`substrate_step` keep the state between calls (the
  stateful policy protocol: ``init_state(phenotype)``, ``step(phenotype, state, obs) -> (state,
  y)``).

A node's value is ``activation(sum_j w_ji v_j + b_i)`` (``output_activation`` on output nodes;
both default to the plain sigmoid, TensorNEAT's). Every substrate node is computed, also one whose
incoming weights are all 0 (as in TensorNEAT, where the thresholded connections still exist). The
optional bias input (``bias_coordinate``) is one more input node, fed the constant 1.

**ES-HyperNEAT** (:func:`es_hyperneat`; Risi & Stanley 2012, "An Enhanced Hypercube-Based Encoding
for Evolving the Placement, Density, and Connectivity of Neurons"), 2-d substrates only, the
hidden nodes placed by the CPPN itself:

1. *Division and initialization* (a quadtree over the square ``center +- width / 2``, per source
   point ``a``): the root (depth 0) always gets its 4 children; a node at depth ``j`` that has
   children passes them on for division (each gets 4 children in turn) when ``j + 1 <
   initial_depth``, or when ``j + 1 < max_depth`` and the (population) variance of those 4
   children's CPPN weights exceeds ``division_threshold`` (pureples' breadth-first division, whose
   levels count the root as 1). Points
   at depth ``k`` are the centres of a ``2^k x 2^k`` grid, so the tree has at most ``4^max_depth``
   leaves; it is evaluated as a fixed tree level by level with masks (every grid point of every
   depth is queried, the ones outside the tree are masked).
2. *Pruning and extraction*: from the root, a child ``c`` whose subtree variance (over the
   subtree's leaves; a leaf's is 0) exceeds ``variance_threshold`` is descended into; any other
   child is a candidate, expressed when its **band** value ``max(min(d_up, d_down), min(d_left,
   d_right))`` (``d``: the absolute weight difference to the neighbouring point one cell width away
   at the same depth) exceeds ``band_threshold`` and ``|w| > weight_threshold``. Self-loops are
   not expressed.
3. Inputs are explored outward (``a -> point``); the hidden nodes found are explored outward
   ``iteration_level`` times (each time only the nodes found in the previous round, which is the
   paper's result: exploring a node again finds nothing new); the outputs are explored inward
   (``point -> output``).
4. Pruning: only connections on a path from an input to an output are kept (pureples'
   ``clean_net``); hidden nodes on no such path are masked.

The quadtree holds the CPPN's **raw** weight output (the paper's pseudocode; the thresholds above
are on that scale); the expressed weight is :func:`scale_weights` of it. Nodes are identified by
their coordinates: a quadtree point that coincides exactly with an input or output coordinate *is*
that node (connections into an input are dropped). Hidden nodes are quadtree grid points, so they
are deduplicated exactly by grid index (a bitmap over the ``sum_k 4^k`` grid points, no float
comparison). They take the ``max_hidden`` slots in discovery order (inputs' round first, then each
iteration's round; within a round by grid index: depth, then x, then y); a node found when the
slots are full is dropped with its connections and **counted** (:attr:`ESNetwork.overflow`), never
silently. Differences from pureples: no ``y1 <= y2`` restriction, the paper's iterated frontier
(pureples re-explores the same set), variance and band on the raw CPPN output (pureples uses its
thresholded and scaled weights).

The network (:class:`ESNetwork`) is a dense ``[N, N - n_in]`` matrix over ``N = n_in + n_out +
max_hidden`` nodes ordered ``inputs (+ bias), outputs, hidden slots``. :func:`es_forward` starts
from zero and updates all nodes synchronously (a node without a kept incoming connection keeps 0,
as in pureples' network, where such a node is never evaluated): an acyclic network runs exactly
its ``depth`` steps (the longest input-to-node path, so the result equals the feedforward one) when
``exact_feedforward`` (default), a cyclic one ``activate_time`` steps. :func:`es_step` keeps the
state between calls.

Cost and memory per individual: HyperNEAT queries every substrate connection once; ES-HyperNEAT
queries ``(n_in + iteration_level * max_hidden + n_out) * sum_k (2^k + 2)^2`` points (476 per
source for ``max_depth=4``) and holds ``N * (N - n_in)`` floats.

Example (an MLP CPPN with parameters ``params`` [pop, ...], evolved by any strategy)::

    substrate = Substrate(inputs=[(-1, -1), (0, -1), (1, -1)], outputs=[(0, 1)],
                          hidden=[[(-1, 0), (0, 0), (1, 0)]], bias_coordinate=(0, -0.5))
    decoder = HyperNEATDecoder(substrate, cppn_apply=my_mlp)   # cppn_decode: identity
    nets = decoder.decode(params)                             # SubstrateNetwork [pop]
    y = jax.vmap(decoder.apply, in_axes=(0, None))(nets, x)    # [pop, 1]; apply: a policy object

    es = ESHyperNEATDecoder(Substrate(inputs=..., outputs=...), my_mlp, config=ESHyperNEATConfig())
    nets = es.decode(params)                                  # ESNetwork [pop]; nets.overflow
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.problems.networks import ACTIVATIONS

__all__ = [
    "ESHyperNEATConfig",
    "ESHyperNEATDecoder",
    "ESNetwork",
    "ESPolicy",
    "HyperNEATConfig",
    "HyperNEATDecoder",
    "StatefulESPolicy",
    "StatefulSubstratePolicy",
    "Substrate",
    "SubstrateNetwork",
    "SubstratePolicy",
    "es_forward",
    "es_hyperneat",
    "es_init_state",
    "es_step",
    "hyperneat_weights",
    "quadtree_extract",
    "quadtree_points",
    "scale_weights",
    "substrate_forward",
    "substrate_init_state",
    "substrate_step",
]

Activation = str | Callable[[jax.Array], jax.Array]
CppnApply = Callable[[Any, jax.Array], jax.Array]

_HIGHEST = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------------------------------
# the substrate
# --------------------------------------------------------------------------------------------------


def _coords(value: Any, name: str, dim: int | None = None, allow_empty: bool = False) -> tuple:
    """``value`` as a tuple of float32-rounded coordinate tuples ``[n, d]``."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(f"{name} must be an [n, d] array of coordinates, got {value!r}") from None
    if arr.ndim != 2 or (arr.shape[0] == 0 and not allow_empty) or arr.shape[1] == 0:
        raise ArgumentError(f"{name} must be a non-empty [n, d] array of coordinates, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or not np.all(np.isfinite(arr.astype(np.float32))):
        raise ArgumentError(f"{name} must be finite (in float32), got {value!r}")
    if dim is not None and arr.shape[1] != dim:
        raise ArgumentError(f"{name} must have {dim} columns (the inputs' dimension), got {arr.shape[1]}")
    return tuple(tuple(float(v) for v in row) for row in arr.astype(np.float32))


def _array(coords: tuple, dim: int) -> np.ndarray:
    return np.asarray(coords, dtype=np.float32).reshape(len(coords), dim)


@dataclasses.dataclass(frozen=True)
class Substrate:
    """The geometry a CPPN is queried on (static configuration: hashable, checked at construction).

    Args:
        inputs: input node coordinates ``[num_inputs, d]`` (``d = 2`` usually; ES-HyperNEAT needs 2).
        outputs: output node coordinates ``[num_outputs, d]``.
        hidden: hidden layers, each ``[n_l, d]`` (a sequence of layers, in order for a feedforward
            substrate; a recurrent one uses them all). Empty for ES-HyperNEAT, which places its own.
        kind: ``"feedforward"`` (``inputs -> hidden_1 -> ... -> outputs``) or ``"recurrent"``
            (every node to every non-input node); HyperNEAT only.
        bias_coordinate: if given, a bias input node at this coordinate, fed the constant 1 (the
            last input node; ``x`` keeps ``num_inputs`` entries).
        distance_input: the CPPN also gets ``|p2 - p1|``.
        cppn_bias_input: the CPPN also gets a constant ``1.0`` (last column).
        bias_output: the CPPN's second output is the bias of every non-input node.

    All node coordinates must be distinct (nodes are identified by their coordinates).
    """

    inputs: Any
    outputs: Any
    hidden: Any = ()
    kind: str = "feedforward"
    bias_coordinate: Any = None
    distance_input: bool = False
    cppn_bias_input: bool = False
    bias_output: bool = False

    def __post_init__(self):
        inputs = _coords(self.inputs, "inputs")
        dim = len(inputs[0])
        outputs = _coords(self.outputs, "outputs", dim)
        if isinstance(self.hidden, np.ndarray) or not isinstance(self.hidden, Sequence):
            raise ArgumentError(
                f"hidden must be a sequence of layers, each an [n, d] array, got {type(self.hidden).__name__}"
            )
        hidden = tuple(_coords(layer, f"hidden[{i}]", dim) for i, layer in enumerate(self.hidden))
        check_choice(self.kind, "kind", ("feedforward", "recurrent"))
        bias = None
        if self.bias_coordinate is not None:
            bias = _coords([self.bias_coordinate], "bias_coordinate", dim)[0]
        for name in ("distance_input", "cppn_bias_input", "bias_output"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        everything = list(inputs) + ([bias] if bias is not None else []) + list(outputs)
        everything += [c for layer in hidden for c in layer]
        if len(set(everything)) != len(everything):
            seen, dup = set(), None
            for c in everything:
                if c in seen:
                    dup = c
                    break
                seen.add(c)
            raise ArgumentError(f"substrate node coordinates must be distinct; {dup} appears twice")
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "outputs", outputs)
        object.__setattr__(self, "hidden", hidden)
        object.__setattr__(self, "bias_coordinate", bias)

    # sizes ---------------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """The coordinate dimension ``d``."""
        return len(self.inputs[0])

    @property
    def num_inputs(self) -> int:
        """Entries of ``x`` (without the bias input)."""
        return len(self.inputs)

    @property
    def num_input_nodes(self) -> int:
        """Input nodes, the bias input included."""
        return len(self.inputs) + (self.bias_coordinate is not None)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def num_hidden(self) -> int:
        """Hidden nodes of all layers (fixed substrates)."""
        return sum(len(layer) for layer in self.hidden)

    @property
    def num_nodes(self) -> int:
        """``N = num_input_nodes + num_outputs + num_hidden``."""
        return self.num_input_nodes + self.num_outputs + self.num_hidden

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """``(num_input_nodes, n_hidden_1, ..., num_outputs)`` (the feedforward layers)."""
        return (self.num_input_nodes, *(len(layer) for layer in self.hidden), self.num_outputs)

    @property
    def cppn_num_inputs(self) -> int:
        """Columns of the CPPN's input: ``2 d (+1 distance) (+1 bias)``."""
        return 2 * self.dim + self.distance_input + self.cppn_bias_input

    @property
    def cppn_num_outputs(self) -> int:
        """Columns the CPPN must return: the weight (+ the node bias with ``bias_output``)."""
        return 1 + self.bias_output

    # coordinates ---------------------------------------------------------------------------------

    @property
    def input_coords(self) -> np.ndarray:
        """``float32 [num_input_nodes, d]``, the bias input last."""
        rows = self.inputs + ((self.bias_coordinate,) if self.bias_coordinate is not None else ())
        return _array(rows, self.dim)

    @property
    def output_coords(self) -> np.ndarray:
        """``float32 [num_outputs, d]``."""
        return _array(self.outputs, self.dim)

    def hidden_coords(self, layer: int | None = None) -> np.ndarray:
        """``float32 [n, d]``: one hidden layer, or all of them concatenated (``layer=None``)."""
        if layer is not None:
            return _array(self.hidden[layer], self.dim)
        return _array(tuple(c for lay in self.hidden for c in lay), self.dim)

    @property
    def node_coords(self) -> np.ndarray:
        """``float32 [N, d]`` in the recurrent node order: inputs (+ bias), outputs, hidden."""
        return np.concatenate([self.input_coords, self.output_coords, self.hidden_coords()])

    def cppn_inputs(self, source: jax.Array, target: jax.Array) -> jax.Array:
        """CPPN input rows ``float32 [..., cppn_num_inputs]`` for ``source``, ``target [..., d]``."""
        source = jnp.asarray(source, jnp.float32)
        target = jnp.asarray(target, jnp.float32)
        source, target = jnp.broadcast_arrays(source, target)
        cols = [source, target]
        if self.distance_input:
            cols.append(jnp.sqrt(jnp.sum(jnp.square(target - source), axis=-1, keepdims=True)))
        if self.cppn_bias_input:
            cols.append(jnp.ones(source.shape[:-1] + (1,), jnp.float32))
        return jnp.concatenate(cols, axis=-1)

    def with_bias(self, x: jax.Array) -> jax.Array:
        """``x [..., num_inputs]`` -> the input nodes' values ``[..., num_input_nodes]``."""
        x = jnp.asarray(x, jnp.float32)
        if x.shape[-1:] != (self.num_inputs,):
            raise ArgumentError(
                f"x must have {self.num_inputs} entries in its last axis, got shape {x.shape}"
            )
        if self.bias_coordinate is None:
            return x
        return jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), jnp.float32)], axis=-1)


# --------------------------------------------------------------------------------------------------
# configuration and shared pieces
# --------------------------------------------------------------------------------------------------


def _resolve_activation(value: Activation, name: str) -> Callable[[jax.Array], jax.Array]:
    if callable(value):
        return value
    check_choice(value, name, tuple(ACTIVATIONS))
    return ACTIVATIONS[value]


def _check_threshold(value: float, name: str) -> float:
    x = check_real(value, name, 0.0)
    if x >= 1.0:
        raise ArgumentError(f"{name} must be in [0, 1), got {value!r}")
    return x


@dataclasses.dataclass(frozen=True)
class HyperNEATConfig:
    """HyperNEAT's decoding and activation settings (TensorNEAT's defaults).

    Args:
        weight_threshold: CPPN outputs with ``|w| <= weight_threshold`` are no connection (0.3).
        max_weight: the weight an output of ``+-1`` maps to (5.0).
        activation: hidden nodes' activation: a name from
            :data:`evotensor.problems.networks.ACTIVATIONS` or a callable (``"sigmoid"``, plain).
        output_activation: output nodes' activation (``"sigmoid"``, TensorNEAT's
            ``output_transform``).
        activate_time: synchronous updates per :func:`substrate_forward` call of a recurrent
            substrate (10).
    """

    weight_threshold: float = 0.3
    max_weight: float = 5.0
    activation: Activation = "sigmoid"
    output_activation: Activation = "sigmoid"
    activate_time: int = 10

    def __post_init__(self):
        _check_threshold(self.weight_threshold, "weight_threshold")
        check_real(self.max_weight, "max_weight", 0.0, low_open=True)
        _resolve_activation(self.activation, "activation")
        _resolve_activation(self.output_activation, "output_activation")
        check_int(self.activate_time, "activate_time", minimum=1, maximum=2**31 - 1)


def scale_weights(w: jax.Array, weight_threshold: float = 0.3, max_weight: float = 5.0) -> jax.Array:
    """HyperNEAT's weight map, elementwise (float32): ``0`` where ``|w| <= weight_threshold``, else
    ``sign(w) * (|w| - weight_threshold) * (max_weight / (1 - weight_threshold))``.

    ``(|w| - threshold)`` is exact in float32 arithmetic; the factor is rounded to float32 once
    (from float64 for Python numbers), so the result is one rounding of the exact product and
    the same on every device (TensorNEAT divides and multiplies, which can differ by 1 ulp)."""
    w = jnp.asarray(w, jnp.float32)
    if isinstance(weight_threshold, (int, float)) and isinstance(max_weight, (int, float)):
        thr = np.float32(weight_threshold)
        factor = np.float32(float(max_weight) / (1.0 - float(thr)))
    else:
        thr = jnp.asarray(weight_threshold, jnp.float32)
        factor = jnp.asarray(max_weight, jnp.float32) / (1.0 - thr)
    shifted = jnp.where(w > 0, w - thr, w + thr)
    return jnp.where(jnp.abs(w) > thr, shifted * factor, 0.0)


def _query(substrate: Substrate, cppn_apply: CppnApply, cppn_params: Any, rows: jax.Array) -> jax.Array:
    """One batched CPPN call on ``rows [M, cppn_num_inputs]``; checks the output shape."""
    out = cppn_apply(cppn_params, rows)
    want = (rows.shape[0], substrate.cppn_num_outputs)
    if tuple(out.shape) != want and not (substrate.cppn_num_outputs == 1 and tuple(out.shape) == want[:1]):
        raise ArgumentError(
            f"cppn_apply must return [M, cppn_num_outputs] = {list(want)} for {rows.shape[0]} query rows,"
            f" got shape {tuple(out.shape)}"
        )
    return jnp.asarray(out, jnp.float32).reshape(want)


def _recurrent_run(
    weights: jax.Array,
    biases: jax.Array,
    state: jax.Array,
    x_nodes: jax.Array,
    num_outputs: int,
    activation: Callable,
    output_activation: Callable,
    steps: Any,
    active: jax.Array | None = None,
) -> jax.Array:
    """``steps`` synchronous updates of ``state [..., N]`` (nodes: inputs, outputs, rest) with the
    inputs clamped to ``x_nodes [..., n_in]``; ``weights [N, N - n_in]``, ``biases [N - n_in]``;
    nodes where ``active`` is False keep their value."""
    n_in = x_nodes.shape[-1]

    def body(_, s):
        s = jnp.concatenate([x_nodes, s[..., n_in:]], axis=-1)
        z = jnp.matmul(s, weights, precision=_HIGHEST) + biases
        new = jnp.concatenate([output_activation(z[..., :num_outputs]), activation(z[..., num_outputs:])], -1)
        if active is not None:
            new = jnp.where(active, new, s[..., n_in:])
        return jnp.concatenate([x_nodes, new], axis=-1)

    return jax.lax.fori_loop(0, steps, body, state)


# --------------------------------------------------------------------------------------------------
# HyperNEAT on a fixed substrate
# --------------------------------------------------------------------------------------------------


@pytree_dataclass
class SubstrateNetwork:
    """A HyperNEAT phenotype (a leading ``[pop]`` axis on every leaf for a population).

    * feedforward substrate: ``weights[l] float32 [n_l, n_{l+1}]`` and ``biases[l] [n_{l+1}]`` for
      each pair of consecutive layers of :attr:`Substrate.layer_sizes`;
    * recurrent substrate: ``weights = (W,)`` with ``W [N, N - n_in]`` (row: source node, column:
      non-input target; nodes ordered inputs (+ bias), outputs, hidden) and ``biases = (b [N - n_in],)``.

    Biases are 0 unless the substrate has ``bias_output``.
    """

    weights: tuple
    biases: tuple


def _pairs(src: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ``(source, target)`` pairs, row-major ``[n_src * n_tgt, d]`` each."""
    return np.repeat(src, len(tgt), axis=0), np.tile(tgt, (len(src), 1))


def hyperneat_weights(
    substrate: Substrate, cppn_apply: CppnApply, cppn_params: Any, config: HyperNEATConfig | None = None
) -> SubstrateNetwork:
    """Query the CPPN on every connection of ``substrate`` (one batched call) -> :class:`SubstrateNetwork`.

    ``cppn_apply(cppn_params, coords [M, cppn_num_inputs]) -> [M, cppn_num_outputs]``; the raw
    outputs go through :func:`scale_weights`. Jit-able; vmap it over ``cppn_params`` for a population.
    """
    config = config or HyperNEATConfig()
    if substrate.kind == "feedforward":
        coords = [substrate.input_coords, *(substrate.hidden_coords(i) for i in range(len(substrate.hidden)))]
        coords.append(substrate.output_coords)
        blocks = [_pairs(a, b) for a, b in zip(coords[:-1], coords[1:])]
        targets = coords[1:]
        shapes = [(len(a), len(b)) for a, b in zip(coords[:-1], coords[1:])]
    else:
        nodes = substrate.node_coords
        blocks = [_pairs(nodes, nodes[substrate.num_input_nodes :])]
        targets = [nodes[substrate.num_input_nodes :]]
        shapes = [(len(nodes), len(nodes) - substrate.num_input_nodes)]
    src = np.concatenate([b[0] for b in blocks])
    tgt = np.concatenate([b[1] for b in blocks])
    num_conn = len(src)
    if substrate.bias_output:
        all_targets = np.concatenate(targets)
        src = np.concatenate([src, np.zeros_like(all_targets)])
        tgt = np.concatenate([tgt, all_targets])
    out = _query(substrate, cppn_apply, cppn_params, substrate.cppn_inputs(src, tgt))
    out = scale_weights(out, config.weight_threshold, config.max_weight)
    weights, biases, start, bstart = [], [], 0, num_conn
    for rows, cols in shapes:
        weights.append(out[start : start + rows * cols, 0].reshape(rows, cols))
        start += rows * cols
        if substrate.bias_output:
            biases.append(out[bstart : bstart + cols, 1])
            bstart += cols
        else:
            biases.append(jnp.zeros((cols,), jnp.float32))
    return SubstrateNetwork(weights=tuple(weights), biases=tuple(biases))


def substrate_forward(
    substrate: Substrate, network: SubstrateNetwork, x: jax.Array, config: HyperNEATConfig | None = None
) -> jax.Array:
    """Outputs ``[..., num_outputs]`` for inputs ``x [..., num_inputs]`` (any leading batch axes).

    Feedforward: layer by layer, ``h <- act(h @ W_l + b_l)`` (dense, ``Precision.HIGHEST``).
    Recurrent: ``activate_time`` synchronous updates from a zero state (TensorNEAT's semantics).
    """
    config = config or HyperNEATConfig()
    act = _resolve_activation(config.activation, "activation")
    out_act = _resolve_activation(config.output_activation, "output_activation")
    h = substrate.with_bias(x)
    if substrate.kind == "feedforward":
        last = len(network.weights) - 1
        for i, (w, b) in enumerate(zip(network.weights, network.biases)):
            z = jnp.matmul(h, w, precision=_HIGHEST) + b
            h = out_act(z) if i == last else act(z)
        return h
    state = jnp.zeros(h.shape[:-1] + (substrate.num_nodes,), jnp.float32)
    _, y = substrate_step(substrate, network, state, x, config, steps=config.activate_time)
    return y


def substrate_init_state(substrate: Substrate, network: SubstrateNetwork) -> jax.Array:
    """The zero state ``float32 [N]`` of a recurrent substrate (``[0]`` for a feedforward one)."""
    del network
    return jnp.zeros((substrate.num_nodes if substrate.kind == "recurrent" else 0,), jnp.float32)


def substrate_step(
    substrate: Substrate,
    network: SubstrateNetwork,
    state: jax.Array,
    x: jax.Array,
    config: HyperNEATConfig | None = None,
    steps: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """``steps`` synchronous updates of a recurrent substrate from ``state [..., N]`` with inputs
    ``x [..., num_inputs]`` -> ``(state, outputs [..., num_outputs])``; the state carries over to
    the next call. A feedforward substrate returns ``(state, substrate_forward(...))``."""
    config = config or HyperNEATConfig()
    if substrate.kind == "feedforward":
        return state, substrate_forward(substrate, network, x, config)
    act = _resolve_activation(config.activation, "activation")
    out_act = _resolve_activation(config.output_activation, "output_activation")
    x_nodes = substrate.with_bias(x)
    state = jnp.broadcast_to(jnp.asarray(state, jnp.float32), x_nodes.shape[:-1] + (substrate.num_nodes,))
    state = _recurrent_run(
        network.weights[0], network.biases[0], state, x_nodes, substrate.num_outputs, act, out_act, steps
    )
    n_in = substrate.num_input_nodes
    return state, state[..., n_in : n_in + substrate.num_outputs]


# --------------------------------------------------------------------------------------------------
# ES-HyperNEAT
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ESHyperNEATConfig:
    """ES-HyperNEAT's settings. Names follow pureples; defaults are MultiNEAT's
    (``InitialDepth 3, MaxDepth 4, DivisionThreshold 0.03, VarianceThreshold 0.03, BandThreshold
    0.3, IterationLevel 1``, the square of side ``Width 2`` around ``(Qtree_X, Qtree_Y) = (0, 0)``).

    Args:
        initial_depth: uniform division depth (a ``2^d x 2^d`` grid; 0 and 1 both mean 2 x 2).
        max_depth: deepest division (at most ``4^max_depth`` leaves per quadtree).
        variance_threshold: subtree variance above which pruning descends into a quad.
        band_threshold: band value a point needs to be expressed.
        iteration_level: rounds of hidden-to-hidden exploration.
        division_threshold: children's variance above which a quad divides (below ``max_depth``).
        weight_threshold, max_weight: :func:`scale_weights` (a point also needs
            ``|w| > weight_threshold``).
        max_hidden: hidden node slots (static capacity; overflow is counted).
        activation, output_activation: as :class:`HyperNEATConfig` (plain sigmoid).
        activate_time: synchronous updates per :func:`es_forward` call of a cyclic network (and of
            every network when ``exact_feedforward`` is False).
        exact_feedforward: an acyclic network runs exactly its depth in updates (= feedforward).
        center, width: the quadtree's square, ``center +- width / 2``.
    """

    initial_depth: int = 3
    max_depth: int = 4
    variance_threshold: float = 0.03
    band_threshold: float = 0.3
    iteration_level: int = 1
    division_threshold: float = 0.03
    weight_threshold: float = 0.3
    max_weight: float = 5.0
    max_hidden: int = 64
    activation: Activation = "sigmoid"
    output_activation: Activation = "sigmoid"
    activate_time: int = 10
    exact_feedforward: bool = True
    center: tuple[float, float] = (0.0, 0.0)
    width: float = 2.0

    def __post_init__(self):
        check_int(self.max_depth, "max_depth", minimum=1, maximum=10)
        check_int(self.initial_depth, "initial_depth", minimum=0, maximum=self.max_depth)
        check_real(self.variance_threshold, "variance_threshold", 0.0)
        check_real(self.band_threshold, "band_threshold", 0.0)
        check_int(self.iteration_level, "iteration_level", minimum=0, maximum=2**31 - 1)
        check_real(self.division_threshold, "division_threshold", 0.0)
        _check_threshold(self.weight_threshold, "weight_threshold")
        check_real(self.max_weight, "max_weight", 0.0, low_open=True)
        check_int(self.max_hidden, "max_hidden", minimum=1, maximum=2**31 - 1)
        _resolve_activation(self.activation, "activation")
        _resolve_activation(self.output_activation, "output_activation")
        check_int(self.activate_time, "activate_time", minimum=1, maximum=2**31 - 1)
        if not isinstance(self.exact_feedforward, bool):
            raise ArgumentError(f"exact_feedforward must be a bool, got {self.exact_feedforward!r}")
        center = _coords([self.center], "center", 2)[0]
        object.__setattr__(self, "center", center)
        check_real(self.width, "width", 0.0, low_open=True)

    @property
    def num_points(self) -> int:
        """Grid points of all depths, ``S = sum_{k=1}^{max_depth} 4^k`` (the hidden-node universe)."""
        return sum(4**k for k in range(1, self.max_depth + 1))


@functools.lru_cache(maxsize=64)
def _grid_tables(config: ESHyperNEATConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(padded float32 [P, 2], interior float32 [S, 2], padded index of each interior point [S])``.

    Depth ``k`` has a ``(2^k + 2)^2`` padded grid (the ring holds the band's outside neighbours),
    row-major in ``(ix, iy)``; the interior point ``(ix, iy)`` has grid id
    ``offset_k + ix * 2^k + iy``.
    """
    cx, cy = config.center
    padded, interior, pad_index, start = [], [], [], 0
    for k in range(1, config.max_depth + 1):
        n = 2**k
        side = config.width / n
        idx = np.arange(-1, n + 1, dtype=np.float64)
        xs = cx - config.width / 2 + (idx + 0.5) * side
        ys = cy - config.width / 2 + (idx + 0.5) * side
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        padded.append(np.stack([gx, gy], -1).reshape(-1, 2))
        interior.append(np.stack([gx[1:-1, 1:-1], gy[1:-1, 1:-1]], -1).reshape(-1, 2))
        ii, jj = np.meshgrid(np.arange(1, n + 1), np.arange(1, n + 1), indexing="ij")
        pad_index.append(start + (ii * (n + 2) + jj).reshape(-1))
        start += (n + 2) ** 2
    return (
        np.concatenate(padded).astype(np.float32),
        np.concatenate(interior).astype(np.float32),
        np.concatenate(pad_index).astype(np.int32),
    )


def quadtree_points(config: ESHyperNEATConfig) -> np.ndarray:
    """``float32 [S, 2]``: the coordinates of every quadtree grid point, by grid id (depth 1's 4
    points, then depth 2's 16, ...; within a depth row-major in ``(ix, iy)``)."""
    return _grid_tables(config)[1]


def _upsample(a: jax.Array) -> jax.Array:
    return jnp.repeat(jnp.repeat(a, 2, axis=-2), 2, axis=-1)


def _quads(a: jax.Array) -> jax.Array:
    """``[B, 2s, 2s] -> [B, s, 2, s, 2]``: each node's 4 children on axes 2 and 4."""
    b, n = a.shape[0], a.shape[1]
    return a.reshape(b, n // 2, 2, n // 2, 2)


def _quadtree(config: ESHyperNEATConfig, padded: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Division, subtree variance and band pruning for ``B`` quadtrees at once.

    ``padded float32 [B, P]`` (the CPPN's raw weights on the padded grids) ->
    ``(express bool [B, S], weight float32 [B, S], exists bool [B, S])`` by grid id.
    """
    depth_max = config.max_depth
    b = padded.shape[0]
    grids, start = [None], 0
    for k in range(1, depth_max + 1):
        n = 2**k + 2
        grids.append(padded[:, start : start + n * n].reshape(b, n, n))
        start += n * n
    w = [None] + [g[:, 1:-1, 1:-1] for g in grids[1:]]
    thr_div = jnp.float32(config.division_threshold)
    # 1. division: expanded[k] (the point has children), exists[k] (the point is in the tree)
    expanded = [jnp.ones((b, 1, 1), bool)]
    exists = [expanded[0]]
    for j in range(depth_max):
        var4 = jnp.var(_quads(w[j + 1]), axis=(2, 4))
        divides = expanded[j] & ((j + 1 < config.initial_depth) | ((j + 1 < depth_max) & (var4 > thr_div)))
        exists.append(_upsample(expanded[j]))
        expanded.append(_upsample(divides))
    # 2. subtree leaf statistics bottom-up (count, mean, M2; Chan et al.'s merge)
    count, mean, m2 = [None] * (depth_max + 2), [None] * (depth_max + 2), [None] * (depth_max + 2)
    for k in range(depth_max, 0, -1):
        leaf_n, leaf_mean, leaf_m2 = jnp.ones_like(w[k]), w[k], jnp.zeros_like(w[k])
        if k == depth_max:
            count[k], mean[k], m2[k] = leaf_n, leaf_mean, leaf_m2
            continue
        cn, cmean, cm2 = _quads(count[k + 1]), _quads(mean[k + 1]), _quads(m2[k + 1])
        tot = jnp.sum(cn, axis=(2, 4))
        mu = jnp.sum(cn * cmean, axis=(2, 4)) / tot
        dev = cmean - mu[:, :, None, :, None]
        merged = jnp.sum(cm2 + cn * dev * dev, axis=(2, 4))
        ex = expanded[k]
        count[k] = jnp.where(ex, tot, leaf_n)
        mean[k] = jnp.where(ex, mu, leaf_mean)
        m2[k] = jnp.where(ex, merged, leaf_m2)
    # 3. pruning and extraction
    thr_var = jnp.float32(config.variance_threshold)
    thr_band = jnp.float32(config.band_threshold)
    thr_w = jnp.float32(config.weight_threshold)
    visited = jnp.ones((b, 2, 2), bool)
    express, weight, exist = [], [], []
    for k in range(1, depth_max + 1):
        g = grids[k]
        centre = g[:, 1:-1, 1:-1]
        d_left = jnp.abs(centre - g[:, :-2, 1:-1])
        d_right = jnp.abs(centre - g[:, 2:, 1:-1])
        d_down = jnp.abs(centre - g[:, 1:-1, :-2])
        d_up = jnp.abs(centre - g[:, 1:-1, 2:])
        band = jnp.maximum(jnp.minimum(d_up, d_down), jnp.minimum(d_left, d_right))
        big = (m2[k] / count[k]) > thr_var
        here = visited & exists[k]
        candidate = here & ~big
        express.append(candidate & (band > thr_band) & (jnp.abs(centre) > thr_w))
        weight.append(centre)
        exist.append(exists[k])
        if k < depth_max:
            visited = _upsample(here & expanded[k] & big)
    flat = lambda parts: jnp.concatenate([p.reshape(b, -1) for p in parts], axis=1)  # noqa: E731
    return flat(express), flat(weight), flat(exist)


def quadtree_extract(
    substrate: Substrate,
    cppn_apply: CppnApply,
    cppn_params: Any,
    sources: jax.Array,
    outgoing: Any,
    config: ESHyperNEATConfig | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One quadtree per point of ``sources float32 [B, 2]`` (steps 1-2 of ES-HyperNEAT), all in
    one CPPN call.

    ``outgoing`` (a bool, or ``bool [B]`` per source): connections ``source -> point`` (else
    ``point -> source``). Returns ``(express bool [B, S], raw weight float32 [B, S], in_tree bool
    [B, S])`` over the grid points of :func:`quadtree_points` (``express`` excludes the point
    equal to the source).
    """
    config = config or ESHyperNEATConfig()
    if substrate.dim != 2:
        raise ArgumentError(f"ES-HyperNEAT needs a 2-d substrate, got dimension {substrate.dim}")
    padded, interior, _ = _grid_tables(config)
    sources = jnp.asarray(sources, jnp.float32)
    b, p = sources.shape[0], padded.shape[0]
    src = jnp.broadcast_to(sources[:, None, :], (b, p, 2))
    pts = jnp.broadcast_to(jnp.asarray(padded)[None], (b, p, 2))
    if isinstance(outgoing, (bool, np.bool_)):
        rows = substrate.cppn_inputs(src, pts) if outgoing else substrate.cppn_inputs(pts, src)
    else:
        out = jnp.broadcast_to(jnp.asarray(outgoing, bool).reshape(b, 1, 1), (b, p, 1))
        rows = substrate.cppn_inputs(jnp.where(out, src, pts), jnp.where(out, pts, src))
    raw = _query(substrate, cppn_apply, cppn_params, rows.reshape(b * p, -1))[:, 0]
    express, weight, exist = _quadtree(config, raw.reshape(b, p))
    self_loop = jnp.all(jnp.asarray(interior)[None] == sources[:, None, :], axis=-1)
    return express & ~self_loop, weight, exist


@pytree_dataclass
class ESNetwork:
    """An ES-HyperNEAT phenotype (a leading ``[pop]`` axis on every leaf for a population).

    Nodes are ordered inputs (+ bias), outputs, ``max_hidden`` hidden slots (``N`` in all).

    * ``weights float32 [N, N - n_in]``: kept connections (row: source node, column: non-input
      target); 0 elsewhere. ``biases float32 [N - n_in]`` (0 unless ``bias_output``).
    * ``active bool [N - n_in]``: the node has a kept incoming connection (the others stay 0).
    * ``hidden_coords float32 [max_hidden, 2]``, ``hidden_mask bool [max_hidden]``: kept hidden
      nodes (a slot of a pruned or unused node is masked, coordinates 0).
    * ``depth int32``: the longest input-to-node path in connections (``-1`` if cyclic);
      ``acyclic bool``.
    * ``overflow int32``: hidden nodes discovered when the slots were full (dropped with their
      connections); ``num_discovered int32``: hidden nodes that got a slot, before pruning.
    """

    weights: jax.Array
    biases: jax.Array
    active: jax.Array
    hidden_coords: jax.Array
    hidden_mask: jax.Array
    depth: jax.Array
    acyclic: jax.Array
    overflow: jax.Array
    num_discovered: jax.Array

    @property
    def num_hidden(self) -> jax.Array:
        """Kept hidden nodes ``int32 [...]``."""
        return jnp.sum(self.hidden_mask, axis=-1, dtype=jnp.int32)

    @property
    def num_connections(self) -> jax.Array:
        """Kept connections ``int32 [...]``."""
        return jnp.sum(self.weights != 0, axis=(-2, -1), dtype=jnp.int32)


def _io_of_grid(substrate: Substrate, interior: np.ndarray) -> np.ndarray:
    """``int32 [S]``: the input/output node index whose coordinates equal the grid point, or -1."""
    io = np.concatenate([substrate.input_coords, substrate.output_coords])
    match = np.all(interior[:, None, :] == io[None, :, :], axis=-1)
    return np.where(match.any(axis=1), match.argmax(axis=1), -1).astype(np.int32)


def _reach(adj: jax.Array, start: jax.Array) -> jax.Array:
    """Nodes reachable from ``start bool [N]`` along ``adj bool [N, N]`` (row -> column)."""

    def cond(c):
        return c[1]

    def body(c):
        r, _ = c
        new = r | jnp.any(r[:, None] & adj, axis=0)
        return new, jnp.any(new != r)

    return jax.lax.while_loop(cond, body, (start, jnp.bool_(True)))[0]


def _longest_path(adj: jax.Array, is_input: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(depth int32, acyclic bool)``: the longest path from an input over ``adj [N, N]``."""
    n = adj.shape[0]
    level0 = jnp.where(is_input, 0, -1).astype(jnp.int32)

    def cond(c):
        return c[1] & (c[2] <= n)

    def body(c):
        lev, _, it = c
        cand = jnp.max(jnp.where(adj & (lev[:, None] >= 0), lev[:, None] + 1, -1), axis=0)
        new = jnp.where(is_input, 0, jnp.maximum(lev, cand))
        return new, jnp.any(new != lev), it + 1

    lev, changed, _ = jax.lax.while_loop(cond, body, (level0, jnp.bool_(True), jnp.int32(0)))
    acyclic = ~changed
    return jnp.where(acyclic, jnp.max(lev), -1).astype(jnp.int32), acyclic


def es_hyperneat(
    substrate: Substrate, cppn_apply: CppnApply, cppn_params: Any, config: ESHyperNEATConfig | None = None
) -> ESNetwork:
    """ES-HyperNEAT's network for one CPPN, at fixed shapes (see the module docstring).

    ``substrate``: 2-d, inputs and outputs only (``hidden=()``); ``cppn_apply(cppn_params, coords
    [M, cppn_num_inputs]) -> [M, cppn_num_outputs]``. Jit-able; vmap it over ``cppn_params``.
    """
    config = config or ESHyperNEATConfig()
    if substrate.dim != 2:
        raise ArgumentError(f"ES-HyperNEAT needs a 2-d substrate, got dimension {substrate.dim}")
    if substrate.hidden:
        raise ArgumentError("ES-HyperNEAT places its own hidden nodes: the substrate's hidden must be ()")
    _, interior, _ = _grid_tables(config)
    n_in, n_out, cap = substrate.num_input_nodes, substrate.num_outputs, config.max_hidden
    n_total, s_pts = n_in + n_out + cap, interior.shape[0]
    io_of = jnp.asarray(_io_of_grid(substrate, interior))
    free = io_of < 0  # grid points that are not an input/output node
    grid_ids = jnp.arange(s_pts, dtype=jnp.int32)
    extract = functools.partial(quadtree_extract, substrate, cppn_apply, cppn_params, config=config)

    # slot bookkeeping: slot_of [S] (-1: none), count, dropped [S]
    def assign(new, slot_of, count, dropped):
        rank = jnp.cumsum(new, dtype=jnp.int32) - 1 + count
        fits = new & (rank < cap)
        slot_of = jnp.where(fits, rank, slot_of)
        return slot_of, jnp.minimum(count + jnp.sum(new, dtype=jnp.int32), cap), dropped | (new & ~fits)

    def slot_grid_of(slot_of):  # int32 [cap]: the grid id in each slot (0 where empty)
        return (
            jnp.zeros((cap,), jnp.int32).at[jnp.where(slot_of >= 0, slot_of, cap)].set(grid_ids, mode="drop")
        )

    # phases 1 and 3 in one batch: out of every input, into every output
    io_coords = jnp.asarray(np.concatenate([substrate.input_coords, substrate.output_coords]))
    e_io, w_io, _ = extract(io_coords, np.arange(n_in + n_out) < n_in)
    e_in, w_in, e_out, w_out = e_io[:n_in], w_io[:n_in], e_io[n_in:], w_io[n_in:]
    slot_of, count, dropped = assign(
        jnp.any(e_in, axis=0) & free,
        jnp.full((s_pts,), -1, jnp.int32),
        jnp.int32(0),
        jnp.zeros((s_pts,), bool),
    )

    # phase 2: each round explores the nodes that the previous round slotted (slots [lo, count))
    def round_(carry, _):
        slot_of, count, dropped, lo = carry
        slots = jnp.arange(cap, dtype=jnp.int32)
        frontier = (slots >= lo) & (slots < count)
        e_h, w_h, _ = extract(jnp.asarray(interior)[slot_grid_of(slot_of)], True)
        e_h = e_h & frontier[:, None]
        new = jnp.any(e_h, axis=0) & free & (slot_of < 0) & ~dropped
        slot_of, new_count, dropped = assign(new, slot_of, count, dropped)
        return (slot_of, new_count, dropped, count), (e_h, w_h)

    if config.iteration_level:
        carry = (slot_of, count, dropped, jnp.int32(0))
        (slot_of, count, dropped, _), (e_h, w_h) = jax.lax.scan(round_, carry, length=config.iteration_level)
    else:
        e_h, w_h = jnp.zeros((0, cap, s_pts), bool), jnp.zeros((0, cap, s_pts), jnp.float32)

    # dense weights over nodes; columns are non-input targets (node - n_in). One scatter per
    # phase (no duplicate index within one), later phases overwriting: deterministic.
    node_of = jnp.where(io_of >= 0, io_of, jnp.where(slot_of >= 0, n_in + n_out + slot_of, -1))
    scale = functools.partial(
        scale_weights, weight_threshold=config.weight_threshold, max_weight=config.max_weight
    )
    weights = jnp.zeros((n_total, n_total - n_in), jnp.float32)
    adj = jnp.zeros((n_total, n_total - n_in), bool)
    oob = n_total  # an index both axes drop

    def put(weights, adj, src, tgt, ok, w):
        src = jnp.where(ok, src, oob)
        col = jnp.where(ok, tgt - n_in, oob)
        weights = weights.at[src, col].set(scale(w), mode="drop")
        return weights, adj.at[src, col].set(True, mode="drop")

    tgt = jnp.broadcast_to(node_of[None, :], e_in.shape)
    src = jnp.broadcast_to(jnp.arange(n_in, dtype=jnp.int32)[:, None], e_in.shape)
    weights, adj = put(weights, adj, src, tgt, e_in & (tgt >= n_in), w_in)
    tgt = jnp.broadcast_to(node_of[None, None, :], e_h.shape)
    src = jnp.broadcast_to(jnp.arange(cap, dtype=jnp.int32)[None, :, None] + n_in + n_out, e_h.shape)
    weights, adj = put(weights, adj, src, tgt, e_h & (tgt >= n_in), w_h)
    src = jnp.broadcast_to(node_of[None, :], e_out.shape)
    tgt = jnp.broadcast_to(jnp.arange(n_out, dtype=jnp.int32)[:, None] + n_in, e_out.shape)
    weights, adj = put(weights, adj, src, tgt, e_out & (src >= 0), w_out)

    # prune: keep connections on an input -> output path
    full = jnp.concatenate([jnp.zeros((n_total, n_in), bool), adj], axis=1)
    node_ids = jnp.arange(n_total)
    is_input = node_ids < n_in
    is_output = (node_ids >= n_in) & (node_ids < n_in + n_out)
    from_in = _reach(full, is_input)
    to_out = _reach(full.T, is_output)
    keep = full & from_in[:, None] & to_out[None, :]
    weights = jnp.where(keep[:, n_in:], weights, 0.0)
    depth, acyclic = _longest_path(keep, is_input)
    active = jnp.any(keep[:, n_in:], axis=0)

    hidden_mask = (from_in & to_out)[n_in + n_out :]
    slot_grid = slot_grid_of(slot_of)
    hidden_coords = jnp.where(hidden_mask[:, None], jnp.asarray(interior)[slot_grid], 0.0)
    biases = jnp.zeros((n_total - n_in,), jnp.float32)
    if substrate.bias_output:
        targets = jnp.concatenate([jnp.asarray(substrate.output_coords), jnp.asarray(interior)[slot_grid]])
        rows = substrate.cppn_inputs(jnp.zeros_like(targets), targets)
        biases = scale(_query(substrate, cppn_apply, cppn_params, rows)[:, 1])
        biases = jnp.where(jnp.concatenate([jnp.ones((n_out,), bool), hidden_mask]), biases, 0.0)
    return ESNetwork(
        weights=weights,
        biases=biases,
        active=active,
        hidden_coords=hidden_coords,
        hidden_mask=hidden_mask,
        depth=depth,
        acyclic=acyclic,
        overflow=jnp.sum(dropped, dtype=jnp.int32),
        num_discovered=count,
    )


def es_init_state(network: ESNetwork) -> jax.Array:
    """The zero state ``float32 [N]`` (``[..., N]`` for a population)."""
    return jnp.zeros(network.weights.shape[:-1], jnp.float32)


def es_step(
    substrate: Substrate,
    network: ESNetwork,
    state: jax.Array,
    x: jax.Array,
    config: ESHyperNEATConfig | None = None,
    steps: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """``steps`` synchronous updates from ``state [..., N]`` with inputs ``x [..., num_inputs]``
    -> ``(state, outputs [..., num_outputs])`` (one network; the state carries over)."""
    config = config or ESHyperNEATConfig()
    act = _resolve_activation(config.activation, "activation")
    out_act = _resolve_activation(config.output_activation, "output_activation")
    x_nodes = substrate.with_bias(x)
    n_total = network.weights.shape[-2]
    state = jnp.broadcast_to(jnp.asarray(state, jnp.float32), x_nodes.shape[:-1] + (n_total,))
    state = _recurrent_run(
        network.weights,
        network.biases,
        state,
        x_nodes,
        substrate.num_outputs,
        act,
        out_act,
        steps,
        network.active,
    )
    n_in = substrate.num_input_nodes
    return state, state[..., n_in : n_in + substrate.num_outputs]


def es_forward(
    substrate: Substrate, network: ESNetwork, x: jax.Array, config: ESHyperNEATConfig | None = None
) -> jax.Array:
    """Outputs ``[..., num_outputs]`` for ``x [..., num_inputs]`` from a zero state: ``max(depth,
    1)`` updates for an acyclic network with ``exact_feedforward`` (exactly the feedforward
    result), else ``activate_time``."""
    config = config or ESHyperNEATConfig()
    steps = jnp.int32(config.activate_time)
    if config.exact_feedforward:
        steps = jnp.where(network.acyclic, jnp.maximum(network.depth, 1), steps)
    state = jnp.zeros(jnp.shape(x)[:-1] + network.weights.shape[-2:-1], jnp.float32)
    return es_step(substrate, network, state, x, config, steps=steps)[1]


# --------------------------------------------------------------------------------------------------
# decoders for the run loop
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SubstratePolicy:
    """A HyperNEAT network as a policy: ``policy(network, obs) -> y`` is :func:`substrate_forward`
    on ``ravel(obs)`` (a recurrent substrate restarts from zero on every call)."""

    substrate: Substrate
    config: HyperNEATConfig

    def __call__(self, network: SubstrateNetwork, obs: jax.Array) -> jax.Array:
        return substrate_forward(self.substrate, network, jnp.ravel(obs), self.config)


@dataclasses.dataclass(frozen=True)
class StatefulSubstratePolicy(SubstratePolicy):
    """A recurrent HyperNEAT network as a stateful policy (the control problems' ``StatefulPolicy``
    protocol): ``init_state(network) -> state [N]``, ``step(network, state, obs) -> (state, y)``
    with ``steps_per_call`` synchronous updates per observation."""

    steps_per_call: int = 1

    def init_state(self, network: SubstrateNetwork) -> jax.Array:
        return substrate_init_state(self.substrate, network)

    def step(
        self, network: SubstrateNetwork, state: jax.Array, obs: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        return substrate_step(
            self.substrate, network, state, jnp.ravel(obs), self.config, self.steps_per_call
        )


@dataclasses.dataclass(frozen=True)
class ESPolicy:
    """An ES-HyperNEAT network as a policy: ``policy(network, obs) -> y`` is :func:`es_forward`."""

    substrate: Substrate
    config: ESHyperNEATConfig

    def __call__(self, network: ESNetwork, obs: jax.Array) -> jax.Array:
        return es_forward(self.substrate, network, jnp.ravel(obs), self.config)


@dataclasses.dataclass(frozen=True)
class StatefulESPolicy(ESPolicy):
    """An ES-HyperNEAT network as a stateful policy (``init_state`` / ``step``, ``steps_per_call``
    synchronous updates per observation)."""

    steps_per_call: int = 1

    def init_state(self, network: ESNetwork) -> jax.Array:
        return es_init_state(network)

    def step(self, network: ESNetwork, state: jax.Array, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return es_step(self.substrate, network, state, jnp.ravel(obs), self.config, self.steps_per_call)


def _identity(genotypes: Any) -> Any:
    return genotypes


def _decoder_args(substrate, cppn_apply, cppn_decode, config, config_type, policy, steps_per_call):
    if not isinstance(substrate, Substrate):
        raise ArgumentError(f"substrate must be a Substrate, got {type(substrate).__name__}")
    if not callable(cppn_apply):
        raise ArgumentError(f"cppn_apply must be callable, got {type(cppn_apply).__name__}")
    if cppn_decode is not None and not callable(cppn_decode):
        raise ArgumentError(f"cppn_decode must be callable or None, got {type(cppn_decode).__name__}")
    config = config_type() if config is None else config
    if not isinstance(config, config_type):
        raise ArgumentError(f"config must be a {config_type.__name__}, got {type(config).__name__}")
    check_choice(policy, "policy", ("stateless", "stateful"))
    check_int(steps_per_call, "steps_per_call", minimum=1)
    return cppn_decode or _identity, config


class HyperNEATDecoder:
    """HyperNEAT as a :class:`~evotensor.core.problem.Decoder`.

    Args:
        substrate: the :class:`Substrate`.
        cppn_apply: ``cppn_apply(params, coords [M, cppn_num_inputs]) -> [M, cppn_num_outputs]``
            for *one* CPPN.
        cppn_decode: genotype population -> CPPN parameter population (leading ``[pop]`` axis);
            default: the genotypes are the parameters (e.g. an MLP CPPN evolved by an ES).
        config: :class:`HyperNEATConfig`.
        policy: ``"stateless"`` (default; TensorNEAT's semantics: ``apply`` restarts a recurrent
            substrate from zero and makes ``activate_time`` updates) or ``"stateful"`` (a
            recurrent substrate only: ``apply`` also has ``init_state`` / ``step``, the state
            kept across an episode's observations).
        steps_per_call: synchronous updates per ``step`` of the stateful policy.

    ``decode(genotypes)`` -> :class:`SubstrateNetwork` ``[pop]``; ``apply`` is the policy object
    (:class:`SubstratePolicy` or :class:`StatefulSubstratePolicy`), ``apply(network, obs) -> y``.
    """

    def __init__(
        self,
        substrate: Substrate,
        cppn_apply: CppnApply,
        cppn_decode: Callable[[Any], Any] | None = None,
        config: HyperNEATConfig | None = None,
        policy: str = "stateless",
        steps_per_call: int = 1,
    ):
        self.cppn_decode, self.config = _decoder_args(
            substrate, cppn_apply, cppn_decode, config, HyperNEATConfig, policy, steps_per_call
        )
        self.substrate, self.cppn_apply = substrate, cppn_apply
        if policy == "stateful":
            if substrate.kind != "recurrent":
                raise ArgumentError("policy='stateful' needs a recurrent substrate (kind='recurrent')")
            self.apply = StatefulSubstratePolicy(substrate, self.config, steps_per_call)
        else:
            self.apply = SubstratePolicy(substrate, self.config)

    def decode(self, genotypes: Any) -> SubstrateNetwork:
        """:class:`SubstrateNetwork` with a leading ``[pop]`` axis (vmapped over the CPPN params)."""
        params = self.cppn_decode(genotypes)
        return jax.vmap(lambda p: hyperneat_weights(self.substrate, self.cppn_apply, p, self.config))(params)

    def __repr__(self) -> str:
        return f"HyperNEATDecoder({type(self.apply).__name__}, {self.substrate.layer_sizes})"


class ESHyperNEATDecoder:
    """ES-HyperNEAT as a :class:`~evotensor.core.problem.Decoder`; arguments as
    :class:`HyperNEATDecoder` with an :class:`ESHyperNEATConfig` (``policy="stateful"`` works for
    every network).

    ``decode(genotypes)`` -> :class:`ESNetwork` ``[pop]`` (``.overflow [pop]`` counts the hidden
    nodes that found no slot); ``apply`` is :class:`ESPolicy` (:func:`es_forward`) or
    :class:`StatefulESPolicy`.
    """

    def __init__(
        self,
        substrate: Substrate,
        cppn_apply: CppnApply,
        cppn_decode: Callable[[Any], Any] | None = None,
        config: ESHyperNEATConfig | None = None,
        policy: str = "stateless",
        steps_per_call: int = 1,
    ):
        self.cppn_decode, self.config = _decoder_args(
            substrate, cppn_apply, cppn_decode, config, ESHyperNEATConfig, policy, steps_per_call
        )
        if substrate.dim != 2 or substrate.hidden:
            raise ArgumentError("substrate must be 2-d with no hidden layers for ES-HyperNEAT")
        self.substrate, self.cppn_apply = substrate, cppn_apply
        if policy == "stateful":
            self.apply = StatefulESPolicy(substrate, self.config, steps_per_call)
        else:
            self.apply = ESPolicy(substrate, self.config)

    def decode(self, genotypes: Any) -> ESNetwork:
        """:class:`ESNetwork` with a leading ``[pop]`` axis (vmapped over the CPPN params)."""
        params = self.cppn_decode(genotypes)
        return jax.vmap(lambda p: es_hyperneat(self.substrate, self.cppn_apply, p, self.config))(params)

    def __repr__(self) -> str:
        return f"ESHyperNEATDecoder({type(self.apply).__name__}, max_hidden={self.config.max_hidden})"
