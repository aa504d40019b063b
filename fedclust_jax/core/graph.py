"""Clusterings of a thresholded distance graph, jit-able, with static shapes.

Graphs are dense symmetric boolean adjacency matrices ``adj: bool[N, N]`` (the diagonal is
ignored). A clustering is ``labels: int32[N]`` with kept clusters numbered 0..C-1 and -1
for nodes in no kept cluster; ``mask: bool[N]`` (optional) removes nodes from the graph
(they get -1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _clean(adj: jax.Array, mask: jax.Array | None) -> jax.Array:
    n = adj.shape[0]
    adj = adj.astype(bool) & ~jnp.eye(n, dtype=bool)
    if mask is not None:
        adj = adj & mask[:, None] & mask[None, :]
    return adj


def component_roots(adj: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """int32[N]: the smallest node index in each node's connected component.

    Hook-and-pointer-jump (a FastSV-like scheme): every round each node hooks the root of
    its tree to the smallest parent label among its neighbours, then all pointers jump to
    their grandparents; it stops when nothing changes (O(log N) rounds in practice, not the
    longest path's length as plain label propagation). Masked-out nodes are their own roots.
    """
    adj = _clean(adj, mask)
    n = adj.shape[0]
    big = jnp.int32(n)

    def step(carry):
        f, _ = carry
        nbr = jnp.min(jnp.where(adj, f[None, :], big), axis=1)
        m = jnp.minimum(f, nbr)
        g = f.at[f].min(m)                  # hook each tree's root to the smallest label seen
        g = jnp.minimum(g, m)               # aggressive hooking of the node itself
        g = g[g]                            # pointer jumps
        g = g[g]
        return g, jnp.any(g != f)

    f0 = jnp.arange(n, dtype=jnp.int32)
    f, _ = lax.while_loop(lambda c: c[1], step, (f0, jnp.bool_(True)))
    return f


def compact_labels(roots: jax.Array, keep_root: jax.Array) -> jax.Array:
    """Renumbers kept groups 0..C-1 in order of their root index; others -> -1.

    roots: int32[N] a root node per node (roots[r] == r for a root); keep_root: bool[N],
    read at root positions.
    """
    n = roots.shape[0]
    is_kept_root = (roots == jnp.arange(n)) & keep_root
    ids = jnp.cumsum(is_kept_root.astype(jnp.int32)) - 1
    return jnp.where(keep_root[roots], ids[roots], -1).astype(jnp.int32)


def group_sizes(roots: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """int32[N]: at a root's position the number of (unmasked) nodes pointing to it."""
    w = jnp.ones_like(roots) if mask is None else mask.astype(jnp.int32)
    return jnp.zeros_like(roots).at[roots].add(w)


def connected_components(adj: jax.Array, min_size: int = 1,
                         mask: jax.Array | None = None) -> jax.Array:
    """Connected components with at least ``min_size`` (t) nodes -> labels int32[N].

    Components are numbered 0..C-1 in order of their smallest node; nodes in smaller
    components (and masked-out nodes) get -1. This is SR-FCA's ONE_SHOT / MERGE graph step.
    """
    if not isinstance(min_size, int) or min_size < 1:
        raise ValueError(f"minimum component size t must be an integer >= 1, got {min_size!r}")
    roots = component_roots(adj, mask)
    sizes = group_sizes(roots, mask)
    keep = sizes >= min_size
    if mask is not None:
        keep = keep & mask
    return compact_labels(roots, keep)


def pivot_clustering(key, adj: jax.Array, min_size: int = 1,
                     mask: jax.Array | None = None) -> jax.Array:
    """Greedy random-pivot clustering (the SR-FCA authors' code's graph step) -> int32[N].

    Visits nodes in a random order; an unclustered node becomes a pivot and forms a
    cluster with its still-unclustered neighbours. Clusters with fewer than ``min_size``
    nodes are dropped (-1); the rest are numbered 0..C-1 in order of their pivot's index.
    (The authors' code keeps clusters of size > size_threshold, i.e. min_size = t + 1.)
    """
    if not isinstance(min_size, int) or min_size < 1:
        raise ValueError(f"minimum cluster size must be an integer >= 1, got {min_size!r}")
    adj = _clean(adj, mask)
    n = adj.shape[0]
    order = jax.random.permutation(key, n)
    free0 = jnp.ones((n,), bool) if mask is None else mask.astype(bool)

    def body(k, carry):
        roots, free = carry
        v = order[k]
        take = free[v] & (adj[v] | (jnp.arange(n) == v)) & free
        return jnp.where(take, v, roots), free & ~take

    roots, _ = lax.fori_loop(0, n, body, (jnp.arange(n, dtype=jnp.int32), free0))
    sizes = group_sizes(roots, None if mask is None else mask)
    keep = sizes >= min_size
    if mask is not None:
        keep = keep & mask
    return compact_labels(roots, keep)


def relabel_by_size(labels: jax.Array, max_clusters: int) -> jax.Array:
    """Renumbers clusters by decreasing size (ties: lower old id first); clusters beyond
    the ``max_clusters`` largest become -1. labels int32[N] in [-1, N)."""
    n = labels.shape[0]
    sizes = jnp.zeros((n,), jnp.int32).at[jnp.where(labels >= 0, labels, n)].add(1, mode="drop")
    order = jnp.argsort(-sizes, stable=True)             # old ids, biggest first
    rank = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
    new = jnp.where(labels >= 0, rank[jnp.clip(labels, 0, n - 1)], -1)
    return jnp.where(new < max_clusters, new, -1).astype(jnp.int32)
