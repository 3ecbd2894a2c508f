"""OpenAI-ES (Salimans et al., 2017).

Salimans, Ho, Chen, Sidor, Sutskever (2017), "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", arXiv:1703.03864.

An isotropic Gaussian ``N(mean, sigma^2 I)`` is sampled (optionally antithetically,
``x = mean +/- sigma * eps``); the gradient of the expected (shaped) objective is estimated as ::

    g = 1 / (pop * sigma) * sum_i w_i * eps_i          w = fitness_shaping(fitness)

and handed to any optax optimizer, which *descends* it (strategies minimize). With identity
shaping, ``E[g] = grad f(mean)`` for linear ``f`` (tested). What every finite-difference gradient
ES shares (mean + optax state, a constant or scheduled sigma, best-so-far tracking, a finite-state
guard) is :class:`evotensor.es.core.gradient_es.GradientES`; the memory-saving noise kernels are
in :mod:`evotensor.es.core.sampling`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core.pytree import pytree_dataclass
from evotensor.es._moved import moved_names
from evotensor.es.core.base import check_even
from evotensor.es.core.gradient_es import GradientES, tell_by_statistics
from evotensor.es.core.sampling import mirrored_pair_sum, noise_weighted_sum, sampled_population


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
            (:func:`~evotensor.es.core.sampling.noise_weighted_sum`), reading ``x`` only for the
            best-so-far row. Then ``tell`` must get the state returned by ``ask`` and the population
            unchanged (a clipped or repaired population would be credited with the unclipped noise).
            It trades one read of
            the population for a second draw of the noise: on the 2-core CPU ~25% more time per
            generation at d=100,000, pop=1024 (0.69 -> 0.87 s), with the same XLA peak (the
            population is alive for the evaluation either way; ``benchmarks/results_es_openes.md``).
            Same noise, each row's perturbation rounded as the row was: the update differs from the
            default's only in float32 rounding order (the sum; a multiply-add XLA may fuse in one
            program only). :func:`evotensor.es.core.sharding.sharded` always uses the rows.

    Noise for large populations is drawn in ~8 MiB row blocks
    (:func:`~evotensor.es.core.sampling.chunked_normal`) written straight into the population
    (:func:`~evotensor.es.core.sampling.sampled_population`), and the tell reads the population once
    without copying its halves (:func:`~evotensor.es.core.sampling.mirrored_pair_sum`), which keeps
    XLA's temporaries small;
    :mod:`evotensor.es.core.sharding` splits the population over devices. No noise is kept between
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
        population_size,
        solution=None,
        num_dims=None,
        *,
        antithetic=True,
        regenerate_noise=False,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.antithetic = bool(antithetic)
        if self.antithetic:
            check_even(population_size, "antithetic sampling")
        self.regenerate_noise = bool(regenerate_noise)

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
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
    """State of ``OpenES(regenerate_noise=True)``: :class:`~evotensor.es.core.gradient_es.GradientESState`'s
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


# the sampling kernels lived here until they moved to evotensor.es.core.sampling
__getattr__ = moved_names(
    __name__,
    {
        name: "evotensor.es.core.sampling"
        for name in ("NOISE_CHUNK_BYTES", "antithetic_perturbations", "chunked_normal")
    },
)
