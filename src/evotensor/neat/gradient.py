"""Gradient descent on the float attributes of NEAT genomes (connection weights, node biases and
responses, CTRNN time constants, a custom gene's floats) through every genome's own topology, for a
whole population at once: TensorNEAT's ``genome.grad``, and Lamarckian fine-tuning inside a run.

* :func:`loss_and_grad`: each genome's loss on a batch of inputs and its gradient with respect to
  ``node_attrs`` and ``conn_attrs`` (zero on padding rows, input pins and disabled connections).
* :class:`GradientTuner`: a few optimizer steps (any optax ``GradientTransformation``; Adam by
  default) on every genome at once, each genome with its own optimizer state, values clipped to
  the genes' ``[min_value, max_value]``, and for each genome the attributes of its lowest loss.
* :class:`GradientFit`: a problem that fits ``y`` from ``x``: every genome is tuned before it is
  scored, and the tuned genomes go back to the strategy (Lamarckian, through
  :attr:`evotensor.core.Evaluation.genotypes`), so offspring inherit what gradient descent found.

The networks are differentiable as they run: :func:`evotensor.neat.network.forward` has a reverse
mode rule (its level loop's trip count is data, so plain autodiff could not transpose it), the
recurrent :func:`~evotensor.neat.network.step` and the CTRNN's
:func:`~evotensor.neat.network.ctrnn_advance` differentiate as they are. Gradients are those of the
float32 computation; activations with flat pieces (``step``-like, ``clamped`` outside ``[-1, 1]``)
pass no gradient there. A genome whose loss or gradient is not finite keeps its attributes (its
reported loss is then ``inf``). The decoders are NEAT's own (``NEAT.decoder``, a policy of
:func:`~evotensor.neat.network.neat_policy`); HyperNEAT's substrate decoders are refused (they
decode whole populations of CPPNs, not one genome at a time).

Example (3-input parity from 50 mutated topologies, as TensorNEAT's ``xor_grad`` example)::

    strategy = NEAT.from_mode("neat-python", 3, 1, 150)
    fit = GradientFit(strategy.decoder, x, y, tuner=GradientTuner(steps=20, learning_rate=0.1))
    result = evotensor.run(strategy, fit, generations=50, key=jax.random.key(0))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from evotensor.core.checks import ArgumentError, check_fraction, check_int, check_real
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.genome import Genome, GenomeSpec

__all__ = ["GradientFit", "GradientTuner", "TuneResult", "loss_and_grad"]


def _check_decoder(decoder: Any) -> GenomeSpec:
    """The spec behind ``decoder`` (a NEAT decoder or policy: ``decode(genome)`` and a way to run a
    network, ``apply(network, x)`` or the policy's own call)."""
    spec = getattr(decoder, "spec", None)
    if not callable(getattr(decoder, "decode", None)) or not isinstance(spec, GenomeSpec):
        raise ArgumentError(
            "decoder must be a NEAT decoder or policy with decode() and a spec (e.g. strategy.decoder "
            f"or neat_policy(spec)), got {type(decoder).__name__}"
        )
    return spec


def _runner(decoder: Any) -> Callable[[Any, jax.Array], jax.Array]:
    apply = getattr(decoder, "apply", None)
    return apply if callable(apply) else decoder


def _real(value: Any, name: str) -> np.ndarray:
    """``value`` as a NumPy array of real numbers (an error naming ``name`` otherwise)."""
    if isinstance(value, (str, bytes)) or value is None:
        raise ArgumentError(f"{name} must be an array of numbers, got {value!r}")
    array = np.asarray(value)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise ArgumentError(f"{name} must be an array of real numbers, got dtype {array.dtype}")
    return array


def _batch(spec: GenomeSpec, x: Any, name: str = "x") -> jax.Array:
    """``float32 [B, num_inputs]`` (inside ``jit`` a traced ``x`` is only shape-checked)."""
    if not isinstance(x, jax.core.Tracer):
        x = _real(x, name)
    if x.ndim != 2 or x.shape[1] != spec.num_inputs or x.shape[0] == 0:
        raise ArgumentError(f"{name} must have shape (B, {spec.num_inputs}) with B >= 1, got {x.shape}")
    return jnp.asarray(x, jnp.float32)


def _genome_loss(decoder, x, loss_fn, node_attrs, conn_attrs, genome: Genome) -> jax.Array:
    """One genome's loss with its float attributes replaced (traced per genome under ``vmap``)."""
    net = decoder.decode(genome.replace(node_attrs=node_attrs, conn_attrs=conn_attrs))
    run = _runner(decoder)
    y = jax.vmap(lambda xi: jnp.reshape(run(net, xi), (-1,)))(x)
    loss = jnp.asarray(loss_fn(y))
    if loss.shape != ():
        raise ArgumentError(f"loss_fn must return a scalar per genome, got shape {loss.shape}")
    return loss.astype(jnp.float32)


def _value_and_grad(decoder, x, loss_fn):
    """``(node_attrs [P, N, A], conn_attrs [P, C, B], genomes) -> (loss [P], (node_grad, conn_grad))``."""
    one = jax.value_and_grad(lambda a, b, g: _genome_loss(decoder, x, loss_fn, a, b, g), argnums=(0, 1))
    return jax.vmap(one)


def _population(spec: GenomeSpec, genomes: Any) -> tuple[Genome, bool]:
    spec.check_rows(genomes, "genomes")
    if genomes.node_key.ndim == 1:
        return jax.tree_util.tree_map(lambda a: a[None], genomes), True
    if genomes.node_key.ndim != 2:
        lead = genomes.node_key.shape[:-1]
        raise ArgumentError(f"genomes must be one genome or a population [pop], got leading axes {lead}")
    return genomes, False


def _masks(spec: GenomeSpec, genomes: Genome, names: tuple[str, ...] | None) -> tuple[jax.Array, jax.Array]:
    """``bool [P, N, A]``, ``bool [P, C, B]``: the entries gradient descent may change (tuned columns of
    valid, non-input node rows and of valid connection rows)."""
    node_names, conn_names = spec.node_gene.float_names, spec.conn_gene.float_names
    node_cols = jnp.asarray([names is None or n in names for n in node_names], bool)
    conn_cols = jnp.asarray([names is None or n in names for n in conn_names], bool)
    hidden = genomes.node_valid & (jnp.arange(spec.max_nodes) >= spec.num_inputs)
    return hidden[..., None] & node_cols, genomes.conn_valid[..., None] & conn_cols


def _rows(flags: jax.Array, like: jax.Array) -> jax.Array:
    """``flags [P]`` shaped to broadcast against ``like [P, ...]``."""
    return flags.reshape(flags.shape + (1,) * (like.ndim - 1))


def loss_and_grad(
    decoder: Any, genomes: Genome, x: Any, loss_fn: Callable[[jax.Array], jax.Array]
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Each genome's loss and its gradient with respect to its float attributes.

    Args:
        decoder: how a genome runs: ``strategy.decoder`` of a :class:`~evotensor.neat.NEAT`, or a
            policy (:func:`~evotensor.neat.network.neat_policy`).
        genomes: one genome (arrays ``[N]``, ``[C]``) or a population (``[pop, ...]``).
        x: ``float32 [B, num_inputs]``: the inputs every network is run on.
        loss_fn: ``y [B, num_outputs] -> scalar`` (the network outputs on ``x``; traced once).

    Returns:
        ``(loss, (node_grad, conn_grad))``: ``loss float32 [pop]`` (``[]`` for one genome),
        ``node_grad`` shaped like ``genomes.node_attrs`` and ``conn_grad`` like ``conn_attrs``;
        zero on padding rows, on input pins and for disabled connections (which do not compute).
    """
    spec = _check_decoder(decoder)
    population, single = _population(spec, genomes)
    x = _batch(spec, x)
    if not callable(loss_fn):
        raise ArgumentError(f"loss_fn must be callable, got {loss_fn!r}")
    loss, (node_grad, conn_grad) = _value_and_grad(decoder, x, loss_fn)(
        population.node_attrs.astype(jnp.float32), population.conn_attrs.astype(jnp.float32), population
    )
    node_mask, conn_mask = _masks(spec, population, None)
    node_grad, conn_grad = jnp.where(node_mask, node_grad, 0.0), jnp.where(conn_mask, conn_grad, 0.0)
    if single:
        return loss[0], (node_grad[0], conn_grad[0])
    return loss, (node_grad, conn_grad)


@pytree_dataclass
class TuneResult:
    """What :meth:`GradientTuner.tune` returns (arrays with a leading ``[pop]`` axis).

    Fields:
        genomes: the tuned population (attributes of each genome's lowest loss; structure unchanged).
        loss: ``float32 [pop]``: the loss of the returned genomes (``inf`` where never finite).
        initial_loss: ``float32 [pop]``: the loss before tuning (``inf`` where not finite).
    """

    genomes: Genome
    loss: jax.Array
    initial_loss: jax.Array


@dataclasses.dataclass(frozen=True)
class GradientTuner:
    """Gradient descent on the float attributes of a whole population (hashable: a static argument).

    Args:
        steps: optimizer steps per :meth:`tune` (each one forward and backward pass of every genome).
        learning_rate: Adam's step size when ``optimizer`` is ``None``.
        optimizer: any optax ``GradientTransformation`` (vmapped: every genome has its own state, so
            a transformation over the whole update, such as global-norm clipping, sees one genome).
        attributes: names of the float attributes to tune (of the node or the connection gene, e.g.
            ``("weight",)``); ``None``: all of them.
        keep_best: return each genome's attributes of its lowest loss seen (the start included),
            not the last step's.
    """

    steps: int = 10
    learning_rate: float = 0.05
    optimizer: Any = None
    attributes: tuple[str, ...] | None = None
    keep_best: bool = True

    def __post_init__(self):
        object.__setattr__(self, "steps", check_int(self.steps, "steps", minimum=1))
        object.__setattr__(
            self, "learning_rate", check_real(self.learning_rate, "learning_rate", 0.0, low_open=True)
        )
        opt = self.optimizer
        transformation = all(callable(getattr(opt, name, None)) for name in ("init", "update"))
        if opt is not None and not transformation:
            raise ArgumentError(f"optimizer must be an optax GradientTransformation or None, got {opt!r}")
        if self.attributes is not None:
            names = self.attributes
            if isinstance(names, str):
                names = (names,)
            names = tuple(names) if isinstance(names, (tuple, list)) else ()
            if not names or not all(isinstance(n, str) and n for n in names):
                raise ArgumentError(f"attributes must be attribute names or None, got {self.attributes!r}")
            object.__setattr__(self, "attributes", names)
        if not isinstance(self.keep_best, bool):
            raise ArgumentError(f"keep_best must be a bool, got {self.keep_best!r}")

    def _optimizer(self):
        return optax.adam(self.learning_rate) if self.optimizer is None else self.optimizer

    def _check_attributes(self, spec: GenomeSpec) -> None:
        if self.attributes is None:
            return
        known = spec.node_gene.float_names + spec.conn_gene.float_names
        unknown = [n for n in self.attributes if n not in known]
        if unknown:
            raise ArgumentError(f"attributes {unknown} are not float attributes of the genes ({known})")

    def tune(self, decoder: Any, genomes: Genome, x: Any, loss_fn: Callable[[jax.Array], Any]) -> TuneResult:
        """``steps`` optimizer steps on every genome of ``genomes`` (``[pop]``); see
        :func:`loss_and_grad` for ``decoder``, ``x`` and ``loss_fn``. Pure and jit-able; the
        structure (keys, connections, enabled flags, activation ids) never changes, and a value
        leaves ``[min_value, max_value]`` of its attribute never."""
        spec = _check_decoder(decoder)
        self._check_attributes(spec)
        population, single = _population(spec, genomes)
        if single:
            raise ArgumentError("tune takes a population [pop]; add a leading axis for one genome")
        x = _batch(spec, x)
        if not callable(loss_fn):
            raise ArgumentError(f"loss_fn must be callable, got {loss_fn!r}")
        value_and_grad = _value_and_grad(decoder, x, loss_fn)
        masks = _masks(spec, population, self.attributes)
        bounds = (spec.node_gene.float_bounds, spec.conn_gene.float_bounds)
        opt = self._optimizer()
        params = (population.node_attrs.astype(jnp.float32), population.conn_attrs.astype(jnp.float32))
        P = population.node_key.shape[0]

        def finite_loss(loss):
            return jnp.where(jnp.isfinite(loss), loss, jnp.inf)

        def per_genome(a):  # [P, ...] -> [P]
            return jnp.all(a.reshape(P, -1), axis=1)

        def step(carry, _):
            params, opt_state, best, best_loss = carry
            loss, grads = value_and_grad(*params, population)
            loss = finite_loss(loss)
            grads = tuple(jnp.where(m, g, 0.0) for g, m in zip(grads, masks))
            ok = jnp.isfinite(loss)  # and a finite gradient in every tuned entry
            for g in grads:
                ok = ok & per_genome(jnp.isfinite(g))
            grads = tuple(jnp.where(_rows(ok, g), g, 0.0) for g in grads)
            better = loss < best_loss
            best = tuple(jnp.where(_rows(better, p), p, b) for p, b in zip(params, best))
            best_loss = jnp.where(better, loss, best_loss)
            updates, opt_state = jax.vmap(opt.update)(grads, opt_state, params)
            new = []
            for p, u, m, (lo, hi) in zip(params, updates, masks, bounds):
                moved = jnp.clip(p + u.astype(p.dtype), lo, hi)
                keep = m & _rows(ok, p) & jnp.isfinite(moved)
                new.append(jnp.where(keep, moved, p))
            return (tuple(new), opt_state, best, best_loss), loss

        opt_state = jax.vmap(opt.init)(params)
        inf = jnp.full((P,), jnp.inf, jnp.float32)
        (params, _, best, best_loss), losses = jax.lax.scan(
            step, (params, opt_state, params, inf), None, length=self.steps
        )
        losses_of = jax.vmap(lambda a, b, g: _genome_loss(decoder, x, loss_fn, a, b, g))
        final = finite_loss(losses_of(*params, population))
        if self.keep_best:
            better = final < best_loss
            params = tuple(jnp.where(_rows(better, p), p, b) for p, b in zip(params, best))
            final = jnp.where(better, final, best_loss)
        node_attrs, conn_attrs = params
        tuned = population.replace(
            node_attrs=node_attrs.astype(population.node_attrs.dtype),
            conn_attrs=conn_attrs.astype(population.conn_attrs.dtype),
        )
        return TuneResult(genomes=tuned, loss=final, initial_loss=losses[0])


class GradientFit:
    """Fit ``y`` from ``x`` with every genome tuned by gradient descent before it is scored
    (minimized ``loss``); the tuned genomes are handed back to the strategy (Lamarckian).

    Args:
        decoder: ``strategy.decoder`` of the NEAT strategy that runs on this problem (or a policy).
        x: ``[n, num_inputs]`` inputs; y: ``[n, num_outputs]`` (or ``[n]``) targets, finite.
        loss: a loss of :class:`~evotensor.problems.function_fit.FunctionFit` (``"mse"``, ``"rmse"``,
            ``"mae"``, ``"sse"``; over cases and outputs) or ``loss(pred [n, k], y [n, k]) -> scalar``.
        tuner: the :class:`GradientTuner` (default: 10 Adam steps at 0.05).
        fraction: the share of each generation tuned, in ``(0, 1]``: the ``ceil(fraction * pop)``
            genomes of lowest loss before tuning (a memetic algorithm's usual budget); the others
            are scored as they are. Default 1.0 (every genome).

    The data, their checks and the named losses are a ``FunctionFit``'s (``self.data``). A function
    problem of ``kind = "genotype"``: the run loop hands it the genomes, not networks. Its
    ``Evaluation.info`` holds ``initial_loss [pop]`` (before tuning) beside the tuned loss.
    """

    kind = "genotype"
    maximize = False

    def __init__(
        self,
        decoder: Any,
        x: Any,
        y: Any,
        loss: Any = "mse",
        tuner: GradientTuner | None = None,
        fraction: float = 1.0,
    ):
        from evotensor.problems.function_fit import FunctionFit

        spec = _check_decoder(decoder)
        self.fraction = check_fraction(fraction, "fraction")
        self.data = FunctionFit(x, y, "mse" if callable(loss) else loss)
        if self.data.num_inputs != spec.num_inputs:
            raise ArgumentError(
                f"x must have {spec.num_inputs} columns (the spec's inputs), got {self.data.num_inputs}"
            )
        if self.data.num_outputs != spec.num_outputs:
            raise ArgumentError(
                f"y must have {spec.num_outputs} columns (the spec's outputs), got {self.data.num_outputs}"
            )
        if tuner is not None and not isinstance(tuner, GradientTuner):
            raise ArgumentError(f"tuner must be a GradientTuner or None, got {tuner!r}")
        self.decoder, self.loss = decoder, loss
        self.tuner = GradientTuner() if tuner is None else tuner
        self.tuner._check_attributes(spec)
        self.x = self.data.x
        self._loss_fn = (lambda pred: loss(pred, self.data.y)) if callable(loss) else self.data.loss_of

    def evaluate(self, key: jax.Array, genotypes: Genome) -> Evaluation:
        """``fitness [pop]``: each tuned genome's loss; ``genotypes``: the tuned genomes."""
        del key
        P = genotypes.node_key.shape[0]
        k = max(1, math.ceil(self.fraction * P))
        if k >= P:
            result = self.tuner.tune(self.decoder, genotypes, self.x, self._loss_fn)
            info = {"initial_loss": result.initial_loss}
            return Evaluation(fitness=result.loss, genotypes=result.genomes, info=info)
        # score everyone once, tune the k best (lowest loss; NaN last) and put them back in place
        losses_of = jax.vmap(lambda a, b, g: _genome_loss(self.decoder, self.x, self._loss_fn, a, b, g))
        initial = losses_of(genotypes.node_attrs, genotypes.conn_attrs, genotypes)
        initial = jnp.where(jnp.isfinite(initial), initial, jnp.inf)
        chosen = jnp.argsort(initial, stable=True)[:k]
        picked = jax.tree_util.tree_map(lambda a: a[chosen], genotypes)
        result = self.tuner.tune(self.decoder, picked, self.x, self._loss_fn)
        tuned = jax.tree_util.tree_map(lambda a, t: a.at[chosen].set(t), genotypes, result.genomes)
        fitness = initial.at[chosen].set(result.loss)
        return Evaluation(fitness=fitness, genotypes=tuned, info={"initial_loss": initial})

    def __repr__(self) -> str:
        return (
            f"GradientFit(x{list(self.x.shape)}, loss={self.loss!r}, tuner={self.tuner!r}, "
            f"fraction={self.fraction})"
        )
