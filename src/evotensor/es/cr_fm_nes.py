"""CR-FM-NES: cost-reduced fast-moving natural evolution strategy (Nomura & Ono, 2022, "Fast
Moving Natural Evolution Strategy for High-Dimensional Problems", IEEE CEC 2022,
arXiv:2201.11422).

Search distribution ``N(m, sigma^2 D (I + v v^T) D)`` with a diagonal ``D`` and one rank-one
direction ``v``: linear time and memory in ``d`` while still learning one dependency. Sampling is
mirrored (``z`` and ``-z``), ``y = z + (sqrt(1 + |v|^2) - 1) (z . vbar) vbar``,
``x = m + sigma * y * D``. The update follows the paper's Algorithm (evolution path ``p_sigma``,
switching between rank weights and *distance weights* ``w_hat(rank) * exp(alpha_dist |z|)`` when
``|p_sigma| >= E|N(0, I)|`` (movement phase), three sigma learning rates (move / stagnation /
convergence), rank-one path ``p_c`` for ``v``, and the closed-form natural-gradient steps ``s`` and
``t`` for ``D`` and ``v``). Constants (paper, Section IV / Table I): ``lambda = 4 + floor(3 ln d)``
rounded up to even, ``c_sigma = (mu_eff + 2) / (d + mu_eff + 5)``,
``c_c = (4 + mu_eff/d) / (d + 4 + 2 mu_eff/d)``, ``c_1 = (d - 5)/6 * 2 / ((d + 1.3)^2 + mu_eff)``,
``eta_B = tanh((min(0.02 lambda, 3 ln d) + 5) / (0.23 d + 25))``, ``eta_m = eta_move = 1``,
``eta_stag = tanh((0.024 lambda + 0.7 d + 20) / (d + 12))``,
``eta_conv = 2 tanh((0.025 lambda + 0.75 d + 10) / (d + 4))``, and ``alpha_dist`` from the root
``h_inv`` of ``(1 + a^2) exp(a^2/2) / 0.24 - 10 - d = 0``.

Non-finite fitness is ranked last by ``tell`` (the paper's feasible count ``lambda_F`` is taken
as ``lambda``). Note ``c_1 <= 0`` for ``d <= 5`` as in the paper's formula; it is clipped at 0.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_spread
from evotensor.core.fitness_shaping import ranks
from evotensor.core.numerics import exact_matvec, exact_sum, exact_vecmat, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import (
    VectorStrategy,
    check_even,
    default_population_size,
    population_size_or_default,
    track_best,
)


def default_even_population_size(num_dims: int) -> int:
    """``4 + floor(3 ln d)`` rounded up to even (mirrored sampling)."""
    lam = default_population_size(num_dims)
    return lam + lam % 2


def h_inv(num_dims: int) -> float:
    """Root of ``(1 + a^2) exp(a^2 / 2) / 0.24 - 10 - d`` by damped Newton (paper, eq. for alpha_dist)."""
    f = lambda a: (1.0 + a * a) * math.exp(a * a / 2.0) / 0.24 - 10.0 - num_dims
    fp = lambda a: a * math.exp(a * a / 2.0) * (3.0 + a * a) / 0.24
    a = 1.0
    for _ in range(1000):
        if abs(f(a)) <= 1e-10:
            break
        a -= 0.5 * f(a) / fp(a)
    return a


@pytree_dataclass
class CRFMNESState:
    """Attributes: ``mean [dims]``, ``sigma []``, ``D [dims]``, ``v [dims]``, ``p_sigma [dims]``,
    ``p_c [dims]``, ``generation []``, ``best_solution [dims]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    D: jax.Array
    v: jax.Array
    p_sigma: jax.Array
    p_c: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


@pytree_dataclass
class CRFMNESParams:
    """Dynamic hyperparameters (vmappable); defaults from the module docstring.

    Attributes: ``sigma_init`` (1.0), ``c_sigma``, ``c_c``, ``c_1``, ``eta_B``, ``eta_mean`` (1),
    ``eta_move_sigma`` (1), ``eta_stag_sigma``, ``eta_conv_sigma``, ``alpha_dist``,
    ``sigma_min`` (1e-30, keeps float32 sigma above 0).
    """

    sigma_init: jax.Array
    c_sigma: jax.Array
    c_c: jax.Array
    c_1: jax.Array
    eta_B: jax.Array
    eta_mean: jax.Array
    eta_move_sigma: jax.Array
    eta_stag_sigma: jax.Array
    eta_conv_sigma: jax.Array
    alpha_dist: jax.Array
    sigma_min: jax.Array


class CRFMNES(VectorStrategy):
    """CR-FM-NES (Nomura & Ono, 2022).

    Args:
        population_size: even; default ``4 + floor(3 ln d)`` rounded up to even.
        solution / num_dims: template pytree (initial mean) or flat dimension.
        sigma_init: initial step size (default 1.0).

    Rank-based weights are built in (the algorithm switches between two weightings), so there is
    no fitness-shaping argument. ``init`` draws the initial ``v ~ N(0, I / d)`` from its key.
    """

    name = "cr_fm_nes"
    min_population_size = 2

    def __init__(self, population_size=None, solution=None, num_dims=None, *, sigma_init: float = 1.0):
        super().__init__(
            population_size_or_default(population_size, solution, num_dims, default_even_population_size),
            solution,
            num_dims,
        )
        check_even(self.population_size, "CR-FM-NES's mirrored sampling")
        self._sigma_init = check_spread(sigma_init, "sigma_init")
        lam = self.population_size
        k = jnp.arange(1, lam + 1, dtype=jnp.float32)
        self._w_hat = jnp.maximum(0.0, math.log(lam / 2.0 + 1.0) - jnp.log(k))  # [lam] by rank
        self._w_rank = self._w_hat / jnp.sum(self._w_hat) - 1.0 / lam
        self.mu_eff = float(1.0 / jnp.sum((self._w_rank + 1.0 / lam) ** 2))
        d = self.num_dims
        self.chi_n = math.sqrt(d) * (1.0 - 1.0 / (4.0 * d) + 1.0 / (21.0 * d * d))

    def default_params(self) -> CRFMNESParams:
        d, lam, mu = self.num_dims, self.population_size, self.mu_eff
        f = lambda v: jnp.asarray(v, jnp.float32)
        c1_cma = 2.0 / ((d + 1.3) ** 2 + mu)
        return CRFMNESParams(
            sigma_init=f(self._sigma_init),
            c_sigma=f((mu + 2.0) / (d + mu + 5.0)),
            c_c=f((4.0 + mu / d) / (d + 4.0 + 2.0 * mu / d)),
            c_1=f(max(0.0, c1_cma * (d - 5) / 6.0)),
            eta_B=f(math.tanh((min(0.02 * lam, 3.0 * math.log(d)) + 5.0) / (0.23 * d + 25.0))),
            eta_mean=f(1.0),
            eta_move_sigma=f(1.0),
            eta_stag_sigma=f(math.tanh((0.024 * lam + 0.7 * d + 20.0) / (d + 12.0))),
            eta_conv_sigma=f(2.0 * math.tanh((0.025 * lam + 0.75 * d + 10.0) / (d + 4.0))),
            alpha_dist=f(h_inv(d) * min(1.0, math.sqrt(lam / d))),
            sigma_min=f(1e-30),
        )

    def _init(self, key, params):
        d = self.num_dims
        zeros = jnp.zeros(d, jnp.float32)
        return CRFMNESState(
            **self._initial_mean_fields(),
            sigma=jnp.asarray(params.sigma_init, jnp.float32),
            D=jnp.ones(d, jnp.float32),
            v=rng.normal(key, (d,), jnp.float32) / math.sqrt(d),
            p_sigma=zeros,
            p_c=zeros,
        )

    def _ask(self, key, state, params):
        half = rng.normal(key, (self.population_size // 2, self.num_dims), jnp.float32)
        z = jnp.concatenate([half, -half])
        norm_v2 = exact_sum(state.v**2)
        vbar = state.v * (1.0 / jnp.sqrt(norm_v2))  # explicit reciprocal: see _tell
        y = z + rounded((jnp.sqrt(1.0 + norm_v2) - 1.0) * exact_matvec(z, vbar)[:, None] * vbar)
        return state.mean + rounded(state.sigma * y * state.D), state

    def _tell(self, key, state, x, fitness, params):
        # Bitwise vmap invariance (see evotensor.core.numerics): every product that feeds an add
        # goes through r(), and divisions by a broadcast value are explicit reciprocals.
        r = rounded
        d, lam = self.num_dims, self.population_size
        rank = ranks(fitness)
        v, D, sigma = state.v, state.D, state.sigma
        norm_v2 = exact_sum(v**2)
        norm_v = jnp.sqrt(norm_v2)
        inv_norm_v = 1.0 / norm_v
        vbar = v * inv_norm_v
        # recover y and z: y = (I + c vbar vbar^T) z with c = sqrt(1 + |v|^2) - 1
        y = (x - state.mean) * (1.0 / (sigma * D))
        c = jnp.sqrt(1.0 + norm_v2) - 1.0
        z = y - r((c / (1.0 + c)) * exact_matvec(y, vbar)[:, None] * vbar)

        w_rank = self._w_rank[rank]  # [lam], per sample
        p_sigma = r((1.0 - params.c_sigma) * state.p_sigma) + r(
            jnp.sqrt(r(params.c_sigma * (2.0 - params.c_sigma)) * self.mu_eff) * exact_vecmat(w_rank, z)
        )
        ps_norm = jnp.sqrt(exact_sum(p_sigma**2))
        # distance weights, normalized in log space so exp never overflows
        log_dist = r(params.alpha_dist * jnp.sqrt(exact_sum(z**2, axis=1)))
        w_tmp = self._w_hat[rank] * jnp.exp(log_dist - jnp.max(log_dist))
        w_dist = r(w_tmp * (1.0 / exact_sum(w_tmp))) - 1.0 / lam
        moving = ps_norm >= self.chi_n
        weights = jnp.where(moving, w_dist, w_rank)
        eta_sigma = jnp.where(
            moving,
            params.eta_move_sigma,
            jnp.where(ps_norm >= 0.1 * self.chi_n, params.eta_stag_sigma, params.eta_conv_sigma),
        )
        l_c = jnp.where(moving, 1.0, 0.0)

        wxm = exact_vecmat(weights, x - state.mean)
        p_c = r((1.0 - params.c_c) * state.p_c) + r(
            jnp.sqrt(r(params.c_c * (2.0 - params.c_c)) * self.mu_eff) * wxm * (1.0 / sigma)
        )
        mean = state.mean + r(params.eta_mean * wxm)

        # natural-gradient directions s (for D) and t (for v); rows: lam samples + the path p_c
        ex_y = jnp.concatenate([y, (p_c / D)[None]])  # [lam + 1, d]
        norm_v4 = r(norm_v2**2)
        ip_yvbar = exact_matvec(ex_y, vbar)
        gamma_v = 1.0 + norm_v2
        vbarbar = r(vbar**2)
        alpha_vd = jnp.minimum(
            1.0,
            jnp.sqrt(norm_v4 + r((2.0 * gamma_v - jnp.sqrt(gamma_v)) / jnp.max(vbarbar))) / (2.0 + norm_v2),
        )
        alpha2 = r(alpha_vd**2)
        t = r(ex_y * ip_yvbar[:, None]) - r(vbar * ((r(ip_yvbar**2) + gamma_v) / 2.0)[:, None])
        b = -r((1.0 - alpha2) * norm_v4 / gamma_v) + 2.0 * alpha2
        inv_h = 1.0 / (2.0 - r((b + 2.0 * alpha2) * vbarbar))
        s1 = r(ex_y**2) - r(norm_v2 / gamma_v * (ex_y * vbar * ip_yvbar[:, None])) + 1.0
        ip_vbart = exact_matvec(t, vbar)
        s2 = s1 - r(
            alpha_vd / gamma_v * (r((2.0 + norm_v2) * (t * vbar)) - r(norm_v2 * vbarbar * ip_vbart[:, None]))
        )
        inv_h_vbb = r(inv_h * vbarbar)
        coef = b / (1.0 + r(b * exact_sum(vbarbar * inv_h_vbb)))
        s = r(s2 * inv_h) - r(coef * inv_h_vbb * exact_matvec(s2, inv_h_vbb)[:, None])
        t = t - r(alpha_vd * (r((2.0 + norm_v2) * (s * vbar)) - r(vbar * exact_matvec(s, vbarbar)[:, None])))

        ex_w = jnp.concatenate([params.eta_B * weights, (l_c * params.c_1)[None]])  # [lam + 1]
        v_new = v + r(exact_vecmat(ex_w, t) * inv_norm_v)
        D_new = D + r(exact_vecmat(ex_w, s) * D)
        nth_root_det_old = jnp.exp(r(exact_sum(jnp.log(D)) / d) + r(jnp.log1p(norm_v2) / (2.0 * d)))
        nth_root_det = jnp.exp(
            r(exact_sum(jnp.log(D_new)) / d) + r(jnp.log1p(exact_sum(v_new**2)) / (2.0 * d))
        )
        g_s = r(exact_sum(weights * (exact_sum(z**2, axis=1) - d)) / d)
        l_s = jnp.where(moving & (g_s < 0), 1.0, 0.0)
        sigma_new = sigma * jnp.exp(r((1.0 - l_s) * eta_sigma / 2.0 * g_s)) * nth_root_det_old
        sigma_new = jnp.maximum(sigma_new, params.sigma_min)
        D_new = D_new * (1.0 / nth_root_det)

        ok = (
            jnp.all(jnp.isfinite(mean))
            & jnp.isfinite(sigma_new)
            & jnp.all(jnp.isfinite(D_new) & (D_new > 0))
            & jnp.all(jnp.isfinite(v_new))
            & jnp.all(jnp.isfinite(p_sigma))
            & jnp.all(jnp.isfinite(p_c))
        )
        keep = lambda new, old: jnp.where(ok, new, old)
        new, metrics = track_best(state, x, fitness)
        new = new.replace(
            mean=keep(mean, state.mean),
            sigma=keep(sigma_new, sigma),
            D=keep(D_new, D),
            v=keep(v_new, v),
            p_sigma=keep(p_sigma, state.p_sigma),
            p_c=keep(p_c, state.p_c),
            generation=state.generation + 1,
        )
        metrics.update(sigma=new.sigma)
        return new, metrics
