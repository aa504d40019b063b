"""Per-cluster reductions of client uploads given assignments (weights @ values, no loops).

Every contraction runs at ``lax.Precision.HIGHEST``: on GPUs JAX's default float32 matmul
rounds both operands to TF32 (10-bit mantissa), which would perturb averaged params by
~1e-3 relative (weights 1/M included); on CPU the precision changes nothing.
Robust (sort-based) reductions live in ``fedclust_jax.core.robust``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def membership(assign: jax.Array, num_clusters: int, weights: jax.Array | None = None) -> jax.Array:
    """[K, M] matrix: entry (j, i) = weights[i] (or 1) if client i is in cluster j, else 0.

    assign: int32[M]; an entry of -1 (unassigned) belongs to no cluster.
    """
    onehot = jax.nn.one_hot(assign, num_clusters, dtype=jnp.float32).T
    return onehot if weights is None else onehot * weights.astype(jnp.float32)[None, :]


def combine(matrix: jax.Array, values):
    """sum_i matrix[j, i] * values[i] for every leaf: [K, M] x [M, ...] -> [K, ...]."""
    return jax.tree.map(
        lambda v: jnp.tensordot(matrix, v.astype(jnp.float32), axes=1,
                               precision=lax.Precision.HIGHEST).astype(v.dtype), values)


def cluster_mean(values, assign: jax.Array, previous, *, weights: jax.Array | None = None):
    """Per-cluster (weighted) mean of client values.

    values: pytree with leading axis M (participants); assign: int32[M] in [-1, K);
    previous: pytree with leading axis K, returned for clusters with no member (an empty
    cluster keeps its params). weights: [M] (e.g. sample counts) or None for equal weights.
    """
    num_clusters = jax.tree.leaves(previous)[0].shape[0]
    w = membership(assign, num_clusters, weights)
    total = w.sum(axis=1)
    means = combine(w / jnp.maximum(total, 1e-30)[:, None], values)
    has = total > 0
    return jax.tree.map(
        lambda m, p: jnp.where(has.reshape((-1,) + (1,) * (p.ndim - 1)), m, p), means, previous)


def global_mean(values, *, weights: jax.Array | None = None):
    """(Weighted) mean over the leading axis of every leaf, as ``w @ V``."""
    m = jax.tree.leaves(values)[0].shape[0]
    w = jnp.ones((m,), jnp.float32) if weights is None else weights.astype(jnp.float32)
    return jax.tree.map(lambda v: v[0], combine((w / w.sum())[None, :], values))


def _rows_like(mask, a):
    return mask.reshape((-1,) + (1,) * (a.ndim - 1))


def mean_from_sums(previous, sums, totals):
    """Per-cluster weighted means from streamed sums of deltas.

    previous: pytree [K, ...]; sums: [K, ...] float32, sum_i w_i (v_i - previous[j_i]) over
    the members of each cluster; totals: float32[K], sum of their weights. Returns
    previous + sums / totals, and previous where a cluster has no weight (an empty cluster
    keeps its params). Equals ``cluster_mean`` of the v_i (up to float rounding).
    """
    has = totals > 0
    scale = jnp.where(has, 1.0 / jnp.where(has, totals, 1.0), 0.0)
    return jax.tree.map(
        lambda p, s: (p.astype(jnp.float32) + s * _rows_like(scale, s)).astype(p.dtype),
        previous, sums)


def share_body(params, heads, body):
    """Cluster params [K, ...] whose non-head leaves are replaced by ``body`` [...] (one
    model's worth, broadcast over K); ``heads``: pytree of bools (``pytree.head_mask``)."""
    return jax.tree.map(lambda h, p, b: p if h else jnp.broadcast_to(b.astype(p.dtype), p.shape),
                        heads, params, body)
