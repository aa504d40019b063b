"""k-means (k-means++ seeding, Lloyd iterations) on vectors, jit-able."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from fedclust_jax.core.pairwise import sq_distances


def kmeans_plus_plus(key, points, k: int, weights=None) -> jax.Array:
    """[k, P] initial centres: first uniform (by weight), then proportional to weight x D^2."""
    n = points.shape[0]
    w = jnp.ones((n,)) if weights is None else weights.astype(jnp.float32)
    keys = jax.random.split(key, k)
    first = jax.random.choice(keys[0], n, p=w / w.sum())
    centres = jnp.zeros((k, points.shape[1]), points.dtype).at[0].set(points[first])
    best = sq_distances(points, centres[:1])[:, 0]

    def body(j, carry):
        centres, best = carry
        p = w * best
        p = jnp.where(p.sum() > 0, p / jnp.maximum(p.sum(), 1e-30), w / w.sum())
        idx = jax.random.choice(keys[j], n, p=p)
        centres = centres.at[j].set(points[idx])
        best = jnp.minimum(best, sq_distances(points, points[idx][None])[:, 0])
        return centres, best

    return lax.fori_loop(1, k, body, (centres, best))[0]


def kmeans(key, points: jax.Array, k: int, *, iters: int = 50, weights=None, init=None):
    """Lloyd's k-means. points [N, P]; weights [N] (0 = ignore a point) or None.

    Returns (centres [k, P], labels int32[N], inertia scalar). An empty cluster keeps its
    centre. ``init``: [k, P] initial centres (default k-means++ from ``key``).
    """
    n = points.shape[0]
    w = jnp.ones((n,), jnp.float32) if weights is None else weights.astype(jnp.float32)
    centres = kmeans_plus_plus(key, points, k, w) if init is None else init

    def step(centres, _):
        labels = jnp.argmin(sq_distances(points, centres), axis=1)
        onehot = jax.nn.one_hot(labels, k, dtype=points.dtype) * w[:, None]
        total = onehot.sum(0)
        new = (onehot.T @ points) / jnp.maximum(total, 1e-30)[:, None]
        return jnp.where((total > 0)[:, None], new, centres), None

    centres, _ = lax.scan(step, centres, None, length=iters)
    d = sq_distances(points, centres)
    labels = jnp.argmin(d, axis=1).astype(jnp.int32)
    return centres, labels, jnp.sum(w * d.min(axis=1))
