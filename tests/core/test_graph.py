"""Graph clusterings (core.graph) and distance matrices (core.pairwise)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core import graph, pairwise


def reference_components(adj, min_size=1, mask=None):
    """Plain-Python BFS; components numbered by smallest node, small ones -> -1."""
    adj = np.asarray(adj, bool)
    n = len(adj)
    mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
    seen, comps = np.zeros(n, bool), []
    for s in range(n):
        if seen[s] or not mask[s]:
            continue
        stack, comp = [s], []
        seen[s] = True
        while stack:
            v = stack.pop()
            comp.append(v)
            for u in range(n):
                if adj[v, u] and u != v and mask[u] and not seen[u]:
                    seen[u] = True
                    stack.append(u)
        comps.append(sorted(comp))
    labels, c = -np.ones(n, int), 0
    for comp in sorted(comps):
        if len(comp) >= min_size:
            labels[comp] = c
            c += 1
    return labels


def sym(edges, n):
    a = np.zeros((n, n), bool)
    for i, j in edges:
        a[i, j] = a[j, i] = True
    return a


CASES = {
    "chain": (sym([(i, i + 1) for i in range(39)], 40), 1),
    "reversed_chain": (sym([(39 - i, 38 - i) for i in range(39)], 40)[::-1, ::-1].copy(), 1),
    "two_cliques": (sym([(i, j) for i in range(5) for j in range(5)] +
                        [(i, j) for i in range(5, 9) for j in range(5, 9)], 9), 1),
    "isolated_below_t": (sym([(0, 3), (3, 6), (1, 4), (2, 2)], 8), 2),
    "empty": (np.zeros((5, 5), bool), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_components_match_reference(name):
    adj, t = CASES[name]
    want = reference_components(adj, t)
    got = graph.connected_components(jnp.asarray(adj), t)
    np.testing.assert_array_equal(np.asarray(got), want)
    jitted = jax.jit(graph.connected_components, static_argnums=1)(jnp.asarray(adj), t)
    np.testing.assert_array_equal(np.asarray(jitted), want)


def test_components_random_graphs_with_mask():
    rng = np.random.default_rng(0)
    f = jax.jit(graph.connected_components, static_argnums=1)
    for trial in range(12):
        n = int(rng.integers(5, 60))
        p = rng.uniform(0.0, 0.08)
        a = rng.uniform(size=(n, n)) < p
        a = a | a.T
        perm = rng.permutation(n)             # scramble the labels: long paths in any order
        a = a[perm][:, perm]
        mask = rng.uniform(size=n) < 0.85
        t = int(rng.integers(1, 4))
        want = reference_components(a, t, mask)
        got = f(jnp.asarray(a), t, jnp.asarray(mask))
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"trial {trial}")


def test_components_rejects_bad_t():
    with pytest.raises(ValueError, match="t must be"):
        graph.connected_components(jnp.zeros((3, 3), bool), 0)


def test_pivot_clustering_partitions_cliques_and_drops_small():
    adj = sym([(i, j) for i in range(4) for j in range(4)] +
              [(i, j) for i in range(4, 7) for j in range(4, 7)] + [(7, 8)], 10)
    for seed in range(4):
        got = np.asarray(graph.pivot_clustering(jax.random.key(seed), jnp.asarray(adj), 3))
        np.testing.assert_array_equal(got, [0] * 4 + [1] * 3 + [-1] * 3)


def test_pivot_clusters_are_pivot_neighbourhoods():
    # a path 0-1-2-3-4: each cluster is a pivot and some of its neighbours (a star)
    adj = jnp.asarray(sym([(i, i + 1) for i in range(4)], 5))
    for seed in range(6):
        lab = np.asarray(graph.pivot_clustering(jax.random.key(seed), adj, 1))
        assert (lab >= 0).all()
        for c in np.unique(lab):
            members = np.flatnonzero(lab == c)
            assert members.max() - members.min() <= 2      # diameter <= 2 on a path


def test_relabel_by_size():
    lab = jnp.asarray([0, 1, 1, 2, 2, 2, -1, 0], jnp.int32)
    np.testing.assert_array_equal(np.asarray(graph.relabel_by_size(lab, 2)),
                                  [1, -1, -1, 0, 0, 0, -1, 1])


def test_l2_distances_centred_precision():
    rng = np.random.default_rng(1)
    a = (1000.0 + rng.normal(size=(6, 50)) * 1e-2).astype(np.float32)
    want = np.linalg.norm(a[:, None].astype(np.float64) - a[None].astype(np.float64), axis=-1)
    got = np.asarray(pairwise.l2_distances(jnp.asarray(a)))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)
    b = a[:3] + 0.5
    want_ab = np.linalg.norm(a[:, None].astype(np.float64) - b[None], axis=-1)
    np.testing.assert_allclose(np.asarray(pairwise.l2_distances(jnp.asarray(a), jnp.asarray(b))),
                               want_ab, rtol=2e-3, atol=1e-3)


def test_cosine_similarity():
    a = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    np.testing.assert_allclose(np.asarray(pairwise.cosine_similarity(a)),
                               [[1, 0, -1], [0, 1, 0], [-1, 0, 1]], atol=1e-6)


def test_upper_quantile():
    d = jnp.asarray([[0, 1, 2, 3], [1, 0, 4, 5], [2, 4, 0, 6], [3, 5, 6, 0]], jnp.float32)
    assert float(pairwise.upper_quantile(d, 0.0)) == 1.0
    assert float(pairwise.upper_quantile(d, 0.5)) == 4.0     # sorted[ceil(3)] = 4
    assert float(pairwise.upper_quantile(d, 1.0)) == 6.0
