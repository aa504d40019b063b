"""Robust per-cluster reductions: agreement with numpy, the trimmed-mean lemma, breakdown."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core import robust as R


def _reference(v, a, prev, kind, beta=0.0, median="mid"):
    out = np.array(prev, np.float64)
    for j in range(prev.shape[0]):
        g = np.sort(v[a == j].astype(np.float64), axis=0)
        c = len(g)
        if c == 0:
            continue
        if kind == "median":
            lo = (c - 1) // 2
            hi = lo if median == "lower" else c // 2
            out[j] = 0.5 * (g[lo] + g[hi])
        else:
            t = int(np.floor(beta * c))
            out[j] = g[t:c - t].mean(0)
    return out


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    v = rng.standard_t(2, size=(41, 30)).astype(np.float32) * 10
    v[5] = -0.0
    v[6] = 0.0
    v[7, :3] = [np.inf, -np.inf, 1e30]
    a = rng.integers(-1, 3, size=41).astype(np.int32)       # cluster 3 of 4 is empty
    prev = np.full((4, 30), 7.0, np.float32)
    return v, a, prev


@pytest.mark.parametrize("method", ["packed", "masked", "numpy"])
def test_coordinatewise_matches_numpy(case, method):
    v, a, prev = case
    for median in ("mid", "lower"):
        out = jax.jit(lambda v, a, p: R.cluster_median(v, a, p, median=median, method=method))(v, a, prev)
        np.testing.assert_allclose(out, _reference(v, a, prev, "median", median=median), rtol=1e-6)
    for beta in (0.0, 0.1, 0.3):
        out = jax.jit(lambda v, a, p: R.cluster_trimmed_mean(v, a, p, beta, method=method))(
            v[:, 3:], a, prev[:, 3:])
        np.testing.assert_allclose(out, _reference(v[:, 3:], a, prev[:, 3:], "trmean", beta),
                                   rtol=1e-5, atol=1e-4)
    assert np.all(np.asarray(out)[3] == 7.0)                 # empty cluster keeps previous


@pytest.mark.parametrize("method", ["packed", "masked", "numpy"])
def test_coordinatewise_under_nested_vmap(method):
    """Batch axes (trials, settings) in front: every method equals the reference per element,
    the numpy callback included (it receives the batch axes on the host)."""
    rng = np.random.default_rng(3)
    v = rng.normal(size=(2, 3, 17, 5)).astype(np.float32)
    a = rng.integers(-1, 3, size=(2, 3, 17)).astype(np.int32)
    prev = np.full((3, 5), -2.0, np.float32)                   # shared, not batched
    med = jax.jit(jax.vmap(jax.vmap(
        lambda v, a: R.cluster_median(v, a, prev, method=method))))(v, a)
    trm = jax.jit(jax.vmap(jax.vmap(
        lambda v, a: R.cluster_trimmed_mean(v, a, prev, 0.2, method=method))))(v, a)
    for i in np.ndindex(2, 3):
        np.testing.assert_allclose(med[i], _reference(v[i], a[i], prev, "median"), rtol=1e-6)
        np.testing.assert_allclose(trm[i], _reference(v[i], a[i], prev, "trmean", 0.2),
                                   rtol=1e-5, atol=1e-6)


def test_pytree_and_shapes(case):
    v, a, prev = case
    tree = {"w": v[:, 3:].reshape(41, 9, 3), "b": v[:, :3]}
    ptree = {"w": prev[:, 3:].reshape(4, 9, 3), "b": prev[:, :3]}
    out = R.cluster_median(tree, a, ptree)
    np.testing.assert_allclose(out["w"].reshape(4, 27), _reference(v[:, 3:], a, prev[:, 3:], "median"))


def test_trimmed_mean_lemma_random_cases():
    """|trmean - mu| <= (t + 3 beta s) / (1 - 2 beta) with <= beta m corrupted values, and
    every kept value within the good range (Lemma B.3). Trials are clusters of one call."""
    rng = np.random.default_rng(1)
    for beta in (0.1, 0.2, 0.3):
        cases, rows, ids = [], [], []
        for trial in range(12):
            m = int(rng.integers(10, 60))
            bad = int(np.floor(beta * m))
            mu = rng.normal()
            good = mu + rng.normal(size=(m - bad, 8)) * rng.uniform(0.1, 3)
            corrupt = rng.choice([-1, 1], size=(bad, 8)) * 10.0 ** rng.uniform(0, 8, size=(bad, 8))
            z = np.concatenate([good, corrupt])
            rng.shuffle(z)
            cases.append((mu, good))
            rows.append(z)
            ids.append(np.full(m, trial))
        out = np.asarray(R.cluster_trimmed_mean(np.concatenate(rows).astype(np.float32),
                                                np.concatenate(ids).astype(np.int32),
                                                np.zeros((12, 8), np.float32), beta))
        for trial, (mu, good) in enumerate(cases):
            t = np.abs(good.mean(0) - mu)
            s = np.abs(good - mu).max(0)
            bound = (t + 3 * beta * s) / (1 - 2 * beta)
            assert np.all(np.abs(out[trial] - mu) <= bound * (1 + 1e-4) + 1e-5), (beta, trial)
            assert np.all(out[trial] >= good.min(0) - 1e-4) and np.all(out[trial] <= good.max(0) + 1e-4)


@pytest.mark.parametrize("bad", [1, 5, 9])
def test_median_stays_in_good_range_below_half(bad):
    rng = np.random.default_rng(bad)
    good = rng.normal(size=(19 - bad, 5))
    z = np.concatenate([good, np.full((bad, 5), 1e9)]).astype(np.float32)
    out = np.asarray(R.cluster_median(z, np.zeros(19, np.int32), np.zeros((1, 5), np.float32)))[0]
    assert np.all(out >= good.min(0) - 1e-6) and np.all(out <= good.max(0) + 1e-6)


def test_breakdown_mean_one_point_trimmed_mean_beyond_beta():
    rng = np.random.default_rng(2)
    good = rng.normal(size=(20, 3)).astype(np.float32)
    zero = np.zeros((1, 3), np.float32)
    assign = np.zeros(21, np.int32)
    for scale in (1e3, 1e6):
        z = np.concatenate([good, np.full((1, 3), scale, np.float32)])
        assert np.abs(np.asarray(R.cluster_plain_mean(z, assign, zero))).max() > scale / 30
        assert np.abs(np.asarray(R.cluster_trimmed_mean(z, assign, zero, 0.1))).max() < 3
    # more than beta * m corrupted on one side: the trimmed mean moves without bound
    z = np.concatenate([good[:16], np.full((5, 3), 1e6, np.float32)])
    assert np.asarray(R.cluster_trimmed_mean(z, assign, zero, 0.1)).min() > 1e4


def test_geometric_median_krum_clipping_resist_outliers():
    rng = np.random.default_rng(3)
    good = rng.normal(size=(30, 6)).astype(np.float32) + 5.0
    z = np.concatenate([good, np.full((6, 6), 1e4, np.float32)])
    assign = np.array([0] * 18 + [1] * 12 + [0] * 3 + [1] * 3, np.int32)
    prev = np.zeros((3, 6), np.float32)
    for out in (R.cluster_geometric_median(z, assign, prev, iters=50),
                R.cluster_krum(z, assign, prev, byz_frac=0.2),
                R.cluster_krum(z, assign, prev, byz_frac=0.2, multi=True)):
        out = np.asarray(out)
        assert np.all(np.abs(out[:2] - 5.0) < 1.5) and np.all(out[2] == 0)
    # Krum returns one of the members
    k = np.asarray(R.cluster_krum(z, assign, prev, byz_frac=0.2))[0]
    assert np.min(np.abs(good[:18] - k).sum(1)) < 1e-5
    # centered clipping moves each center by at most tau per iteration
    cc = np.asarray(R.cluster_centered_clipping(z, assign, prev, tau=0.5, iters=3))
    assert np.all(np.linalg.norm(cc[:2], axis=1) <= 1.5 + 1e-5)


def test_geometric_median_matches_numpy_weiszfeld():
    rng = np.random.default_rng(4)
    z = rng.normal(size=(15, 4)).astype(np.float64)
    v = z.mean(0)
    for _ in range(200):
        w = 1 / np.maximum(np.linalg.norm(z - v, axis=1), 1e-6)
        v = (w[:, None] * z).sum(0) / w.sum()
    out = np.asarray(R.cluster_geometric_median(z.astype(np.float32), np.zeros(15, np.int32),
                                                np.zeros((1, 4), np.float32), iters=200))[0]
    np.testing.assert_allclose(out, v, atol=1e-4)


def test_validation():
    z = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="beta"):
        R.cluster_trimmed_mean(z, np.zeros(3, np.int32), z[:1], 0.5)
    with pytest.raises(ValueError, match="method"):
        R.cluster_median(z, np.zeros(3, np.int32), z[:1], method="fast")
    with pytest.raises(ValueError, match="rule"):
        R.cluster_aggregate("mode", z, np.zeros(3, np.int32), z[:1])
