"""Threshold-Clustering (core.threshold_clustering): known answers, robustness bound,
invariances, and the "points" and "gram" methods agreeing."""

import jax
import numpy as np
import pytest

from fedclust_jax.core.threshold_clustering import threshold_clustering

RNG = np.random.default_rng(0)


def test_tc_large_radius_gives_mean_in_one_step():
    z = RNG.normal(size=(20, 5)).astype(np.float32)
    v0 = RNG.normal(size=(2, 5)).astype(np.float32)
    far = np.linalg.norm(z[:, None] - v0[None], axis=-1).max()
    for out in (threshold_clustering(z, v0, iters=1, radius=far + 1e-3),
                threshold_clustering(z, v0, iters=1, quantile=1.0)):
        np.testing.assert_allclose(out, np.broadcast_to(z.mean(0), (2, 5)), atol=1e-5)


def test_tc_small_radius_leaves_center():
    z = RNG.normal(size=(20, 5)).astype(np.float32) + 10
    v0 = np.zeros((1, 5), np.float32)
    near = np.linalg.norm(z, axis=1).min()
    np.testing.assert_array_equal(threshold_clustering(z, v0, iters=3, radius=near * 0.99), v0)


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e8])
def test_tc_bad_points_move_center_at_most_b_tau_over_n(scale):
    """Replacing b points by arbitrary ones changes one TC iteration by at most b tau / N."""
    n, b, tau = 30, 4, 1.5
    good = RNG.normal(size=(n - b, 6)).astype(np.float32) * 0.7
    v0 = RNG.normal(size=(1, 6)).astype(np.float32) * 0.3
    bad = RNG.normal(size=(b, 6)).astype(np.float32) * scale
    u = bad[:1] / np.linalg.norm(bad[:1])
    edge = np.repeat(v0 + 0.999 * tau * u, b, 0)         # all just inside, one direction
    ref = threshold_clustering(np.concatenate([good, np.repeat(v0, b, 0)]), v0, iters=1, radius=tau)
    for pts in (bad, edge):
        out = threshold_clustering(np.concatenate([good, pts]), v0, iters=1, radius=tau)
        assert np.linalg.norm(out - ref) <= b * tau / n * (1 + 1e-5)
    out = threshold_clustering(np.concatenate([good, edge]), v0, iters=1, radius=tau)
    assert np.linalg.norm(out - ref) > 0.99 * b * tau / n         # the bound is attained


def test_tc_permutation_invariant_and_mask_is_subgroup():
    z = RNG.normal(size=(12, 3)).astype(np.float32)
    v0 = z[:1]
    a = threshold_clustering(z, v0, iters=5, quantile=0.3)
    b = threshold_clustering(z[RNG.permutation(12)], v0, iters=5, quantile=0.3)
    np.testing.assert_allclose(a, b, atol=1e-6)
    mask = np.arange(12) < 7
    c = threshold_clustering(np.where(mask[:, None], z, 1e9), v0, iters=5, quantile=0.3, mask=mask)
    np.testing.assert_allclose(c, threshold_clustering(z[:7], v0, iters=5, quantile=0.3), atol=1e-6)


# one compiled program per shape instead of one per operation (radius / quantile traced)
TC_JIT = jax.jit(threshold_clustering, static_argnames=("iters", "method"))


@pytest.mark.parametrize("k", [1, 3])
def test_tc_gram_equals_points(k):
    """The Gram-space iterations give the point-space result: fixed and quantile radius,
    masks, centers inside and outside the points' span, points sharing a large offset."""
    rng = np.random.default_rng(k)
    for case in range(12):
        n, p = rng.integers(3, 25), rng.integers(2, 40)
        offset = rng.normal(size=p) * (0.0, 1.0, 100.0)[case % 3]
        z = (rng.normal(size=(n, p)) * rng.uniform(0.2, 3) + offset).astype(np.float32)
        v0 = (z[rng.integers(0, n, k)] + rng.normal(size=(k, p)) * (case % 2)).astype(np.float32)
        mask = rng.uniform(size=n) < 0.8
        mask[0] = True
        kw = (dict(quantile=float(rng.uniform(0.1, 1))) if case % 4 < 2
              else dict(radius=float(rng.uniform(0.5, 3) * np.sqrt(p))))
        a = TC_JIT(z, v0, iters=6, mask=mask, **kw)
        b = TC_JIT(z, v0, iters=6, mask=mask, method="gram", **kw)
        np.testing.assert_allclose(b, a, atol=1e-5 * np.abs(z).max())
        moved = np.abs(np.asarray(a) - v0).max()
        assert moved > 0 or case % 4 >= 2                    # the quantile cases move
