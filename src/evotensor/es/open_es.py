"""OpenAI-ES (Salimans et al., 2017) and the shared machinery of finite-difference gradient ES.

Salimans, Ho, Chen, Sidor, Sutskever (2017), "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", arXiv:1703.03864.

An isotropic Gaussian ``N(mean, sigma^2 I)`` is sampled (optionally antithetically,
``x = mean +/- sigma * eps``); the gradient of the expected (shaped) objective is estimated as ::

    g = 1 / (pop * sigma) * sum_i w_i * eps_i          w = fitness_shaping(fitness)

and handed to any optax optimizer, which *descends* it (strategies minimize). With identity
shaping, ``E[g] = grad f(mean)`` for linear ``f`` (tested). :class:`GradientES` holds what every
finite-difference gradient ES of this package shares: mean + optax state, a sigma that is either a
constant hyperparameter or an optax-style schedule ``generation -> sigma``, best-so-far tracking,
and a finite-state guard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.fitness_shaping import centered_ranks
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import check_even
from evotensor.es.gradient_es import FitnessShaping, GradientES, pair_sum, tell_by_statistics

NOISE_CHUNK_BYTES = 8 * 2**20


def _per_platform(vectorized: bool | None, operand, loop, at_once):
    """``loop(operand)`` on a CPU, ``at_once(operand)`` elsewhere (or as ``vectorized`` forces).

    The two compute the same blocks of noise. On a CPU a loop over blocks keeps each block in cache;
    on a GPU a loop pays a host round trip per iteration, so the blocks are drawn at once there.
    """
    if vectorized is None:
        return jax.lax.platform_dependent(operand, cpu=loop, default=at_once)
    return at_once(operand) if vectorized else loop(operand)


def chunked_normal(
    key: jax.Array,
    rows: int,
    num_dims: int,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
    vectorized: bool | None = None,
) -> jax.Array:
    """Standard normal ``[rows, dims]`` float32, generated in row blocks of about ``chunk_bytes``.

    Small draws are one ``rng.normal(key, ...)`` call. Large ones are blocks keyed by
    ``fold_in(key, block)``: on a CPU a ``lax.map`` over them, so XLA never holds the random bits of
    the whole matrix at once (at d=100,000, pop=1024 this cuts OpenES' temporaries from ~614 MB to
    ~237 MB and is faster, the blocks staying in cache); on a GPU (or with ``vectorized=True``) the
    same blocks in one ``vmap``.
    """
    per_block = max(1, chunk_bytes // (4 * num_dims))
    if per_block >= rows:
        return rng.normal(key, (rows, num_dims), jnp.float32)
    blocks = -(-rows // per_block)

    def block(i):
        return rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)

    z = _per_platform(vectorized, jnp.arange(blocks), lambda i: jax.lax.map(block, i), jax.vmap(block))
    return z.reshape(blocks * per_block, num_dims)[:rows]


def sampled_population(
    key: jax.Array,
    mean: jax.Array,
    scale: jax.Array,
    rows: int,
    mirrored: bool,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
    vectorized: bool | None = None,
) -> jax.Array:
    """``[rows, dims]``: ``mean + scale * z`` for ``z = chunked_normal(key, rows, dims)``, or with
    ``mirrored`` the pairs ``[mean + scale * z; mean - scale * z]`` for ``z = chunked_normal(key, rows // 2,
    dims)``.

    The same draw as writing it out with :func:`chunked_normal`, but a large one is written block by
    block into the output (a ``fori_loop`` of in-place ``dynamic_update_slice``), so XLA never holds
    ``z`` (nor the two mirrored halves) next to the population. Values agree within 1 ulp: XLA may
    contract ``mean + scale * z`` into a fused multiply-add in one program and not the other
    (OpenES' recorded runs, eager, jit and vmap, and its d=100,000 generation came out bit-identical).
    At d=100,000, pop=1024 that removes ~205 MB for ``z`` and, with :func:`mirrored_pair_sum` in the
    tell, ~410 MB of half-population copies from OpenES' jitted generation
    (``benchmarks/results_es_openes.md``).

    Args:
        key: noise key; mean: ``[dims]``; scale: ``[]`` (or broadcastable to ``[dims]``).
        rows: population rows (even when ``mirrored``); mirrored: antithetic pairs at ``i, i + rows/2``.
        vectorized: draw the blocks at once, as on a GPU (default: per platform, see
            :func:`chunked_normal`); same numbers.
    """
    num_dims = mean.shape[-1]
    n = rows // 2 if mirrored else rows
    per_block = max(1, chunk_bytes // (4 * num_dims))
    if per_block >= n:
        z = rng.normal(key, (n, num_dims), jnp.float32)
        return jnp.concatenate([mean + scale * z, mean - scale * z]) if mirrored else mean + scale * z

    def put(x, z, start):
        x = jax.lax.dynamic_update_slice_in_dim(x, mean + scale * z, start, 0)
        if mirrored:
            x = jax.lax.dynamic_update_slice_in_dim(x, mean - scale * z, n + start, 0)
        return x

    def block(i):  # chunked_normal's block i
        return rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)

    full, tail = divmod(n, per_block)

    def in_place(_):  # block by block, each block staying in cache
        x = jnp.zeros((rows, num_dims), jnp.result_type(mean, scale, jnp.float32))
        x = jax.lax.fori_loop(0, full, lambda i, x: put(x, block(i), i * per_block), x)
        if tail:  # chunked_normal draws the whole last block and keeps its first rows
            x = put(x, block(full)[:tail], full * per_block)
        return x

    def all_blocks(blocks):  # the same blocks at once; XLA fuses the draw into the population's writes
        z = jax.vmap(block)(blocks).reshape(-1, num_dims)[:n]
        return jnp.concatenate([mean + scale * z, mean - scale * z]) if mirrored else mean + scale * z

    return _per_platform(vectorized, jnp.arange(full + (tail > 0)), in_place, all_blocks)


def noise_weighted_sum(
    key: jax.Array,
    coeffs: jax.Array,
    num_dims: int,
    rows_of: Callable[[jax.Array], jax.Array] | None = None,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
) -> jax.Array:
    """``sum_i coeffs_i r_i``, ``[dims]``, over the rows ``r = rows_of(z)`` of ``z = chunked_normal(key,
    rows, dims)`` (default ``r = z``), ``coeffs [rows]``, without ever holding ``z``: the noise is drawn
    again, block by block, from the same keys, and ``rows_of`` (elementwise, ``[b, dims] -> [b, dims]``)
    is applied to each block.

    The same numbers as :func:`chunked_normal` (block ``b`` from ``fold_in(key, b)``; the padding rows
    of a partial last block get coefficient 0 and add exact zeros); a small draw is one
    matrix-vector product. The tell of ``OpenES(regenerate_noise=True)``: it never reads the population.
    """
    rows = coeffs.shape[0]
    rows_of = (lambda z: z) if rows_of is None else rows_of
    coeffs = coeffs.astype(jnp.float32)
    per_block = max(1, chunk_bytes // (4 * num_dims))
    if per_block >= rows:
        z = rng.normal(key, (rows, num_dims), jnp.float32)
        return jnp.matmul(coeffs, rows_of(z), precision=Precision.HIGHEST)
    blocks = -(-rows // per_block)
    c = jnp.pad(coeffs, (0, blocks * per_block - rows)).reshape(blocks, per_block)

    def body(i, acc):  # chunked_normal's block i
        z = rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)
        return acc + jnp.matmul(c[i], rows_of(z), precision=Precision.HIGHEST)

    return jax.lax.fori_loop(0, blocks, body, jnp.zeros((num_dims,), jnp.float32))


@jax.custom_batching.custom_vmap
def _mirrored_pair_sum_batchable(weights: jax.Array, x: jax.Array) -> jax.Array:
    h = x.shape[0] // 2
    c = weights[:h] - weights[h:]
    # HIGHEST: exact float32 on GPUs (their default float32 matmul precision is TF32, whose rounding
    # of the uncentred rows, ~|mean| 2^-11, would swamp the differences between mirrored rows)
    halves = jnp.einsum(
        "ph,phd->pd", jnp.stack([c, -c]), x.reshape(2, h, x.shape[1]), precision=Precision.HIGHEST
    )
    return halves[0] + halves[1]


@_mirrored_pair_sum_batchable.def_vmap
def _mirrored_pair_sum_vmap(axis_size, in_batched, weights, x):
    axes = tuple(0 if batched else None for batched in in_batched)
    return jax.vmap(pair_sum, in_axes=axes, axis_size=axis_size)(weights, x), True


@jax.custom_jvp
def mirrored_pair_sum(weights: jax.Array, x: jax.Array) -> jax.Array:
    """``sum_i (w_i - w_{i+h}) (x_i - x_{i+h})``, ``[dims]``, for ``x [rows, dims]`` with row ``i + h``
    (``h = rows/2``) the mirror of row ``i`` and ``weights [rows]``.

    Bit for bit :func:`~evotensor.es.gradient_es.pair_sum` (``c @ x[:h] - c @ x[h:]``), written as
    one batched matrix-vector product over ``x.reshape(2, h, dims)``: a reshape is free, whereas XLA
    materializes each slice ``x[:h]``, ``x[h:]`` feeding a ``dot`` as a copy (2 x 205 MB at
    d=100,000, pop=1024). Under ``vmap`` it is ``vmap(pair_sum)``: XLA:CPU rounds the two batched
    forms differently, and vmapped runs stay bit-identical to what they were (and to separate runs).
    Its derivative is that of the bilinear ``pair_sum`` (``custom_vmap`` alone has no reverse-mode rule).
    """
    return _mirrored_pair_sum_batchable(weights, x)


@mirrored_pair_sum.defjvp
def _mirrored_pair_sum_jvp(primals, tangents):
    (weights, x), (dw, dx) = primals, tangents
    return mirrored_pair_sum(weights, x), pair_sum(dw, x) + pair_sum(weights, dx)


def antithetic_perturbations(key: jax.Array, population_size: int, num_dims: int) -> jax.Array:
    """Standard-normal perturbations ``[pop, dims]`` with row ``i + pop/2`` equal to ``-row i``."""
    z = chunked_normal(key, population_size // 2, num_dims)
    return jnp.concatenate([z, -z])


def open_es_sum(x: jax.Array, weights: jax.Array, mean: jax.Array, antithetic: bool) -> jax.Array:
    """The row sum behind the OpenAI-ES estimate, ``[dims]``.

    ``sum_i w_i (x_i - mean)``, or with antithetic pairs ``sum_i (w_i - w_{i+h}) (x_i - x_{i+h})``
    (:func:`mirrored_pair_sum`), for ``x [rows, dims]``, ``weights [rows]``. A sum
    over rows: the sharded tell adds the shards' sums.
    """
    if antithetic:
        return mirrored_pair_sum(weights, x)
    return jnp.matmul(weights, x - mean, precision=Precision.HIGHEST)


def open_es_scale(population_size: int, sigma: jax.Array, antithetic: bool) -> jax.Array:
    """Divisor turning :func:`open_es_sum` into the gradient: ``2 pop sigma^2`` (pairs) or ``pop sigma^2``."""
    return (2.0 * population_size * sigma**2) if antithetic else (population_size * sigma**2)


def open_es_gradient(
    x: jax.Array, weights: jax.Array, mean: jax.Array, sigma: jax.Array, antithetic: bool
) -> jax.Array:
    """OpenAI-ES estimate ``g = 1/(pop*sigma) * sum_i w_i eps_i`` with ``eps_i = (x_i - mean)/sigma``.

    Args:
        x: ``[pop, dims]`` samples; for ``antithetic`` rows ``i`` and ``i + pop/2`` are a pair.
        weights: ``[pop]`` shaped fitness (lower is better).
        mean: ``[dims]``; sigma: ``[]``.

    Returns:
        ``[dims]``. With antithetic pairs ``eps_i = (x_i - x_{i+h}) / (2 sigma)`` is used instead,
        so the mean never has to be subtracted from the (large) population matrix; the whole
        estimate is two matrix-vector products that read ``x`` once.
    """
    return open_es_sum(x, weights, mean, antithetic) / open_es_scale(x.shape[0], sigma, antithetic)


class OpenES(GradientES):
    """OpenAI evolution strategy (Salimans et al., 2017).

    Args:
        population_size: samples per generation (even when ``antithetic``).
        solution: template pytree (exclusive with ``num_dims``); its values are the initial mean.
        num_dims: flat dimension (initial mean zero).
        optimizer: any optax transformation; default ``optax.adam(0.01)`` (Adam with step size 0.01,
            as in Salimans et al.'s MuJoCo experiments).
        sigma_init: constant perturbation std; default 0.02 (Salimans et al.'s noise std).
        sigma_schedule: optax-style schedule ``generation -> sigma`` (exclusive with ``sigma_init``),
            e.g. ``optax.exponential_decay(0.1, 1, 0.999, end_value=0.01)``.
        fitness_shaping: ``fitness [pop] -> weights [pop]`` (lower = better); default centered
            ranks in ``[-0.5, 0.5]`` (Salimans et al.).
        antithetic: mirrored sampling ``mean +/- sigma*eps`` (default True, Salimans et al.).
        regenerate_noise: where ``tell`` takes the noise from. False (default): from the population
            it is given, ``eps_i = (x_i - mean) / sigma`` (pairs: ``(x_i - x_{i+h}) / (2 sigma)``),
            one read of ``x``. True: ``ask`` keeps its key in the state (``noise_key``; nothing of
            size ``pop x dims``) and ``tell`` draws the same ``eps`` again from it, block by block
            (:func:`noise_weighted_sum`), reading ``x`` only for the best-so-far row. Then ``tell``
            must get the state returned by ``ask`` and the population unchanged (a clipped or
            repaired population would be credited with the unclipped noise). It trades one read of
            the population for a second draw of the noise: on the 2-core CPU ~25% more time per
            generation at d=100,000, pop=1024 (0.69 -> 0.87 s), with the same XLA peak (the
            population is alive for the evaluation either way; ``benchmarks/results_es_openes.md``).
            Same noise, each row's perturbation rounded as the row was: the update differs from the
            default's only in float32 rounding order (the sum; a multiply-add XLA may fuse in one
            program only). :func:`evotensor.es.sharding.sharded` always uses the rows.

    Noise for large populations is drawn in ~8 MiB row blocks (:func:`chunked_normal`) written straight
    into the population (:func:`sampled_population`), and the tell reads the population once without
    copying its halves (:func:`mirrored_pair_sum`), which keeps XLA's temporaries small;
    :mod:`evotensor.es.sharding` splits the population over devices. No noise is kept between
    ``ask`` and ``tell`` in either mode.

    Example::

        es = OpenES(64, num_dims=10)
        state = es.init(jax.random.key(0))
        x, state = es.ask(jax.random.key(1), state)          # [64, 10]
        state, metrics = es.tell(jax.random.key(2), state, x, jnp.sum(x**2, axis=1))
    """

    name = "open_es"

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        fitness_shaping: FitnessShaping = centered_ranks,
        antithetic: bool = True,
        regenerate_noise: bool = False,
    ):
        super().__init__(
            population_size,
            solution,
            num_dims,
            optimizer=optimizer,
            sigma_init=sigma_init,
            sigma_schedule=sigma_schedule,
            fitness_shaping=fitness_shaping,
        )
        self.antithetic = bool(antithetic)
        if self.antithetic:
            check_even(population_size, "antithetic sampling")
        self.regenerate_noise = bool(regenerate_noise)

    # -- population-sharding hooks (see evotensor.es.sharding) ------------------------------------
    shard_state_fields: tuple[str, ...] = ()

    @property
    def shard_pairs(self) -> bool:
        """Whether rows ``i`` and ``i + rows/2`` are mirrored pairs (``antithetic``)."""
        return self.antithetic

    def _sample(self, key, state, params, rows):
        return sampled_population(key, state.mean, self.sigma(state, params), rows, self.antithetic), state

    def _member_weights(self, state, fitness, params):
        return self._weights(fitness), None

    def _row_statistics(self, state, params, x, weights, aux):
        return open_es_sum(x, weights, state.mean, self.antithetic)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        sigma = self.sigma(state, params)
        grad = stats / open_es_scale(self.population_size, sigma, self.antithetic)
        return self._apply_gradient_row(state, grad, best_row, fitness, sigma)

    # -- ask / tell -----------------------------------------------------------------------------
    def _init(self, key, params):
        if not self.regenerate_noise:
            return super()._init(key, params)
        # a placeholder until the first ask; an own buffer, as callers may donate the state
        return OpenESNoiseKeyState(**self._base_fields(), noise_key=jnp.array(key, copy=True))

    def _ask(self, key, state, params):
        x, state = self._sample(key, state, params, self.population_size)
        if self.regenerate_noise:
            state = state.replace(noise_key=jnp.array(key, copy=True))
        return x, state

    def _tell(self, key, state, x, fitness, params):
        if not self.regenerate_noise:
            return tell_by_statistics(self, key, state, x, fitness, params)
        weights = self._weights(fitness)
        sigma, mean = self.sigma(state, params), state.mean
        # open_es_sum with each row's perturbation rebuilt from its noise, rounded as ask rounded the
        # row: (x_i - x_{i+h}) = (mean + sigma z_i) - (mean - sigma z_i), or x_i - mean. Once sigma z
        # is below mean's float32 resolution the rows, and so these differences, are the mean's; the
        # gradient then stays 0 as from the rows (2 sigma z_i / (2 sigma) would be ~1/sigma noise).
        if self.antithetic:
            h = self.population_size // 2
            coeffs = weights[:h] - weights[h:]
            rows_of = lambda z: (mean + sigma * z) - (mean - sigma * z)
        else:
            coeffs = weights
            rows_of = lambda z: (mean + sigma * z) - mean
        stats = noise_weighted_sum(state.noise_key, coeffs, self.num_dims, rows_of)
        return self._update_from_statistics(key, state, params, stats, None, fitness, x[jnp.argmin(fitness)])


@pytree_dataclass
class OpenESNoiseKeyState:
    """State of ``OpenES(regenerate_noise=True)``: :class:`~evotensor.es.gradient_es.GradientESState`'s
    fields and the key of the last ``ask``.

    Attributes:
        mean, opt_state, generation, best_solution, best_fitness: as in ``GradientESState``.
        noise_key: the key the last ``ask`` drew its noise from (``init``'s key before the first ask),
            the only thing ``tell`` needs to draw that noise again.
    """

    mean: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    noise_key: jax.Array
