"""k-means (k-means++ seeding, Lloyd iterations) on vectors, and k-FED (Dennis et al. 2021:
one-shot federated k-means of the clients' points), jit-able.

k-FED ([T] Alg. 2): 1. every client runs k-means (best of ``restarts`` k-means++ seedings,
Lloyd) with ``local_k`` centres on its own points ([T] leaves the source of the local mu_k
open; local k-means is Dennis et al.'s); 2. it sends its local centroids mu_{i,1..k'}
(empty local clusters are dropped); 3. the server runs k-means with K centres on all N k'
local centroids; 4. every point inherits its local centroid's server cluster. Clients are
mapped with ``map_clients``; points may be images (flattened).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from fedclust_jax.core.clients import check_chunk, map_clients

from fedclust_jax.core.pairwise import sq_distances
from fedclust_jax.data.federated import example_mask


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
        new = (jnp.dot(onehot.T, points, precision=lax.Precision.HIGHEST)
               / jnp.maximum(total, 1e-30)[:, None])
        return jnp.where((total > 0)[:, None], new, centres), None

    centres, _ = lax.scan(step, centres, None, length=iters)
    d = sq_distances(points, centres)
    labels = jnp.argmin(d, axis=1).astype(jnp.int32)
    return centres, labels, jnp.sum(w * d.min(axis=1))


@struct.dataclass
class KFedResult:
    """assign: int32[N, n_max] server cluster of every point (-1 on padding);
    local_labels: int32[N, n_max]; local_centres: [N, k', P]; local_sizes: [N, k'];
    server_labels: int32[N, k'] server cluster of every local centroid; centres: [K, P]."""

    assign: jax.Array
    local_labels: jax.Array
    local_centres: jax.Array
    local_sizes: jax.Array
    server_labels: jax.Array
    centres: jax.Array


def best_kmeans(key, points, k: int, *, iters: int, restarts: int, weights=None):
    """k-means with ``restarts`` k-means++ seedings (vmapped), the lowest inertia kept
    (as scikit-learn's n_init). Returns (centres [k, P], labels int32[n])."""
    runs = jax.vmap(lambda kk: kmeans(kk, points, k, iters=iters, weights=weights))(
        jax.random.split(key, restarts))
    best = jnp.argmin(runs[2])
    return runs[0][best], runs[1][best]


def kfed(key, x: jax.Array, count: jax.Array, num_clusters: int, *, local_k: int | None = None,
         iters: int = 50, restarts: int = 10, chunk: int | str | None = None) -> KFedResult:
    """k-FED on points x [N, n_max, ...] with count int[N] real points per client.

    num_clusters: K (server); local_k: k' centres per client (default K); restarts:
    k-means++ seedings per k-means run (client and server), best inertia kept.
    """
    for name, v in (("num_clusters", num_clusters), ("local_k", local_k)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    check_chunk(chunk)
    local_k = num_clusters if local_k is None else local_k
    if iters < 1 or restarts < 1:
        raise ValueError(f"iters and restarts must be >= 1, got {iters}, {restarts}")
    return _kfed(key, x, count, num_clusters, local_k, iters, restarts, chunk)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _kfed(key, x, count, num_clusters, local_k, iters, restarts, chunk) -> KFedResult:
    n, n_max = x.shape[:2]
    pts = x.reshape(n, n_max, -1).astype(jnp.float32)
    mask = example_mask(count, n_max).astype(jnp.float32)
    k_local, k_server = jax.random.split(key)

    def local(p, w, i):
        centres, labels = best_kmeans(jax.random.fold_in(k_local, i), p, local_k, iters=iters,
                                      restarts=restarts, weights=w)
        sizes = jnp.sum(jax.nn.one_hot(labels, local_k) * w[:, None], axis=0)
        return centres, labels, sizes

    centres, labels, sizes = map_clients(local, pts, mask, jnp.arange(n), chunk=chunk)
    flat = centres.reshape(n * local_k, -1)
    server, server_labels = best_kmeans(k_server, flat, num_clusters, iters=iters,
                                        restarts=restarts, weights=(sizes.reshape(-1) > 0))
    server_labels = server_labels.reshape(n, local_k)
    assign = jnp.take_along_axis(server_labels, labels, axis=1)
    assign = jnp.where(mask > 0, assign, -1).astype(jnp.int32)
    return KFedResult(assign=assign, local_labels=labels, local_centres=centres,
                      local_sizes=sizes, server_labels=server_labels, centres=server)
