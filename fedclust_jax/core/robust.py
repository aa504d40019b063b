"""Coordinate-wise robust reductions per cluster, with masks (no Python loop over clusters).

Members of a cluster are the clients whose ``assign`` equals its index; non-members are
sent to +inf before sorting and ranks are counted per cluster, so one static-shape program
serves any cluster sizes. Empty clusters keep their previous params.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _sorted_members(v: jax.Array, member: jax.Array) -> jax.Array:
    """v [M, P], member bool[M] -> members' values sorted ascending along axis 0, +inf after."""
    return jnp.sort(jnp.where(member[:, None], v, jnp.inf), axis=0)


def _trimmed_mean_sorted(s: jax.Array, count, beta: float) -> jax.Array:
    """Mean of ranks [t, count - t) of sorted columns s [M, P], t = floor(beta * count)."""
    t = jnp.floor(beta * count).astype(jnp.int32)
    ranks = jnp.arange(s.shape[0])[:, None]
    keep = (ranks >= t) & (ranks < count - t)
    return jnp.sum(jnp.where(keep, s, 0.0), axis=0) / jnp.maximum(count - 2 * t, 1)


def _median_sorted(s: jax.Array, count) -> jax.Array:
    """Median of the first ``count`` rows of sorted columns s (mean of the middle two when even)."""
    lo = jnp.maximum((count - 1) // 2, 0)
    hi = jnp.maximum(count // 2, 0)
    return 0.5 * (s[lo] + s[hi])


def _per_cluster(reduce_sorted, values, assign, previous):
    num_clusters = jax.tree.leaves(previous)[0].shape[0]

    def leaf(v, prev):
        flat = v.reshape(v.shape[0], -1).astype(jnp.float32)

        def one(j):
            member = assign == j
            count = member.sum()
            out = reduce_sorted(_sorted_members(flat, member), count)
            return jnp.where(count > 0, out, prev[j].reshape(-1).astype(jnp.float32))

        out = lax.map(one, jnp.arange(num_clusters))
        return out.reshape(prev.shape).astype(prev.dtype)

    return jax.tree.map(leaf, values, previous)


def cluster_trimmed_mean(values, assign, previous, beta: float):
    """Coordinate-wise beta-trimmed mean per cluster.

    values: pytree [M, ...]; assign int32[M] (-1 = in no cluster); previous: pytree [K, ...].
    In a cluster of c members, floor(beta * c) values are dropped on each side of every
    coordinate; beta = 0 is the mean. 0 <= beta < 0.5.
    """
    if not 0 <= beta < 0.5:
        raise ValueError(f"trimming fraction beta must be in [0, 0.5), got {beta}")
    return _per_cluster(lambda s, c: _trimmed_mean_sorted(s, c, beta), values, assign, previous)


def cluster_median(values, assign, previous):
    """Coordinate-wise median per cluster (mean of the two middle values for even sizes)."""
    return _per_cluster(_median_sorted, values, assign, previous)
