"""Slow, obviously correct pieces of TD3 shared by the PGA-ME and DCRL-ME reference tests: each critic
run as its own MLP, Adam written out in float64, the soft target update."""

import jax
import jax.numpy as jnp
import numpy as np


def ref_q(critic, obs, action):
    """[n, 2]: each critic's MLP run separately."""
    out = []
    for c in range(critic[0]["w"].shape[0]):
        h = jnp.concatenate([obs, action], axis=-1)
        for i, layer in enumerate(critic):
            h = h @ layer["w"][c] + layer["b"][c]
            if i < len(critic) - 1:
                # ReLU with derivative 0 at 0, as jax.nn.relu (a unit whose input is exactly 0, a
                # zero bias behind an all-dead layer, has no gradient); jnp.maximum would give 0.5
                h = jnp.where(h > 0.0, h, 0.0)
        out.append(h[:, 0])
    return jnp.stack(out, axis=1)


class RefAdam:
    """Adam (b1 0.9, b2 0.999, eps 1e-8) on a pytree, in float64."""

    def __init__(self, params, lr):
        self.lr, self.t = lr, 0
        self.m = jax.tree_util.tree_map(lambda p: np.zeros(np.shape(p)), params)
        self.v = jax.tree_util.tree_map(lambda p: np.zeros(np.shape(p)), params)

    def step(self, params, grad):
        self.t += 1
        grad = jax.tree_util.tree_map(lambda g: np.asarray(g, np.float64), grad)
        self.m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, self.m, grad)
        self.v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, self.v, grad)
        c1, c2 = 1 - 0.9**self.t, 1 - 0.999**self.t
        return jax.tree_util.tree_map(
            lambda p, m, v: (
                np.asarray(p, np.float64) - self.lr * (m / c1) / (np.sqrt(v / c2) + 1e-8)
            ).astype(np.float32),
            params,
            self.m,
            self.v,
        )


def soft(target, online, tau=0.005):
    return jax.tree_util.tree_map(
        lambda t, o: (1 - tau) * np.asarray(t) + tau * np.asarray(o), target, online
    )


def assert_close(a, b, atol=2e-5):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=atol)
