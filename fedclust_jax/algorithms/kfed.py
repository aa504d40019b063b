"""k-FED ([T] Alg. 2; Dennis et al. 2021): one-shot federated k-means on points.

1. every client runs k-means (best of ``restarts`` k-means++ seedings, Lloyd) with ``local_k`` centres on its own
   points ([T] leaves the source of the local mu_k open; local k-means is Dennis et al.'s);
2. it sends its local centroids mu_{i,1..k'} (empty local clusters are dropped);
3. the server runs k-means with K centres on all N k' local centroids;
4. every point inherits its local centroid's server cluster.
Clients are vmapped (``map_clients``); points may be images (flattened).

k-FED + UIFCA = ``run_uifca(..., assign=kfed(...).assign)``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import check_chunk, check_clusters
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.data.federated import example_mask


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
         iters: int = 50, restarts: int = 10, chunk: int | None = None) -> KFedResult:
    """k-FED on points x [N, n_max, ...] with count int[N] real points per client.

    num_clusters: K (server); local_k: k' centres per client (default K); restarts:
    k-means++ seedings per k-means run (client and server), best inertia kept.
    """
    check_clusters(num_clusters)
    local_k = num_clusters if local_k is None else local_k
    check_clusters(local_k)
    check_chunk(chunk)
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
