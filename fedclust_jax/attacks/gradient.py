"""Byzantine uploads: functions of the honest uploads g [M, ...] (pytrees), assignments
int32[M] and the Byzantine mask byz bool[M]; Byzantine rows are replaced, honest rows kept.

"Honest statistics" (ALIE, IPM) are taken per cluster over the honest members of the
cluster each Byzantine client joined (all honest clients when k = 1); an empty cluster
gives zeros.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri


def _rows(mask, a):
    return mask.reshape((-1,) + (1,) * (a.ndim - 1))


def _replace(g, byz, new):
    return jax.tree.map(lambda a, b: jnp.where(_rows(byz, a), b.astype(a.dtype), a), g, new)


def sign_flip(g, byz, scale: float = 1.0):
    """g_b -> -scale * g_b: the Byzantine client's own honest upload, reversed."""
    return _replace(g, byz, jax.tree.map(lambda a: -scale * a, g))


def scaling(g, byz, factor: float):
    """g_b -> factor * g_b."""
    return _replace(g, byz, jax.tree.map(lambda a: factor * a, g))


def gaussian(key, g, byz, std: float):
    """g_b -> N(0, std^2 I), independent per client and coordinate."""
    leaves, tree = jax.tree.flatten(g)
    keys = jax.random.split(key, len(leaves))
    noise = [std * jax.random.normal(k, a.shape, jnp.float32) for k, a in zip(keys, leaves)]
    return _replace(g, byz, jax.tree.unflatten(tree, noise))


def honest_cluster_stats(g, assign, byz, k: int):
    """Per-cluster mean and std [K, ...] of the honest rows, and each row's cluster's
    values gathered to [M, ...] (rows with assign -1 use cluster 0)."""
    w = jax.nn.one_hot(assign, k, dtype=jnp.float32).T * (~byz)[None, :]       # [K, M]
    c = jnp.maximum(w.sum(1), 1.0)
    idx = jnp.clip(assign, 0, k - 1)

    def stats(a):
        flat = a.reshape(a.shape[0], -1).astype(jnp.float32)
        mu = (w @ flat) / c[:, None]
        var = jnp.maximum((w @ flat ** 2) / c[:, None] - mu ** 2, 0.0)
        return mu[idx].reshape(a.shape), jnp.sqrt(var)[idx].reshape(a.shape)

    out = jax.tree.map(stats, g)
    mu = jax.tree.map(lambda a, o: o[0], g, out)
    sd = jax.tree.map(lambda a, o: o[1], g, out)
    return mu, sd


def alie_z(num_clients: int, num_byz):
    """Baruch et al. 2019: s = floor(n/2 + 1) - f, z = Phi^{-1}((n - s) / n); ``num_byz`` may
    be a traced integer."""
    s = jnp.floor(num_clients / 2 + 1) - jnp.asarray(num_byz, jnp.float32)
    p = jnp.clip((num_clients - s) / num_clients, 1e-6, 1 - 1e-6)
    return ndtri(p)


def alie(g, assign, byz, k: int, z: float):
    """A Little Is Enough (Baruch et al. 2019): g_b -> mu - z * sd, the honest per-coordinate
    mean and std of the joined cluster (z: see ``alie_z``)."""
    mu, sd = honest_cluster_stats(g, assign, byz, k)
    return _replace(g, byz, jax.tree.map(lambda m, s: m - z * s, mu, sd))


def ipm(g, assign, byz, k: int, eps: float = 0.1):
    """Inner-product manipulation (Xie et al. 2019): g_b -> -eps * (honest mean of the
    joined cluster)."""
    mu, _ = honest_cluster_stats(g, assign, byz, k)
    return _replace(g, byz, jax.tree.map(lambda m: -eps * m, mu))
