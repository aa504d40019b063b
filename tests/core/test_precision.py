"""Aggregation and distance contractions keep float32 precision whatever the backend's
default matmul precision is (GPUs round float32 operands to TF32 by default, TPUs to
bfloat16). Each check runs under ``jax.default_matmul_precision("bfloat16")``, the lowest
setting: on CPU it changes nothing, on a GPU or TPU it fails if a contraction lacks an
explicit ``precision=HIGHEST``. Reference: float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core.aggregate import cluster_mean, global_mean
from fedclust_jax.core.clients import _sum_rows
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.pairwise import cosine_similarity, sq_distances
from fedclust_jax.core.robust import cluster_trimmed_mean

RTOL = 2e-6


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    # values whose low mantissa bits matter: TF32 / bfloat16 would drop them
    values = (1.0 + rng.uniform(0, 1e-3, size=(7, 33))).astype(np.float32)
    assign = np.array([0, 1, 0, 2, 1, 0, 2], np.int32)
    weights = np.array([3, 1, 7, 2, 5, 11, 13], np.float32)
    return values, assign, weights


def low_precision():
    return jax.default_matmul_precision("bfloat16")


def test_cluster_and_global_means_are_float32_exact(problem):
    values, assign, weights = problem
    v64, w64 = values.astype(np.float64), weights.astype(np.float64)
    with low_precision():
        got = np.asarray(jax.jit(lambda v, a, w: cluster_mean(v, a, jnp.zeros((3, 33)), weights=w))(
            values, assign, weights))
        got_global = np.asarray(jax.jit(lambda v, w: global_mean(v, weights=w))(values, weights))
    for j in range(3):
        m = assign == j
        np.testing.assert_allclose(got[j], (w64[m] @ v64[m]) / w64[m].sum(), rtol=RTOL)
    np.testing.assert_allclose(got_global, (w64 @ v64) / w64.sum(), rtol=RTOL)


def test_streamed_sums_are_float32_exact(problem):
    values, assign, weights = problem
    rows = np.eye(3, dtype=np.float32)[assign] * weights[:, None] / 7.0           # [M, G]
    with low_precision():
        got = np.asarray(jax.jit(_sum_rows)(rows, values))
    np.testing.assert_allclose(got, rows.astype(np.float64).T @ values.astype(np.float64),
                               rtol=RTOL)


def test_trimmed_mean_with_nothing_trimmed_is_the_exact_mean(problem):
    values, assign, _ = problem
    with low_precision():
        got = np.asarray(jax.jit(lambda v, a: cluster_trimmed_mean(
            v, a, jnp.zeros((3, 33)), 0.0, method="packed"))(values, assign))
    for j in range(3):
        np.testing.assert_allclose(got[j], values[assign == j].astype(np.float64).mean(0),
                                   rtol=RTOL)


def test_distances_are_float32_exact(problem):
    values, _, _ = problem
    v64 = values.astype(np.float64)
    with low_precision():
        d2 = np.asarray(jax.jit(sq_distances)(values))
        cos = np.asarray(jax.jit(cosine_similarity)(values - 1.0))
    want = ((v64[:, None] - v64[None]) ** 2).sum(-1)
    np.testing.assert_allclose(d2, want, rtol=1e-3, atol=1e-9)   # differences of ~1e-3 entries
    c = v64 - 1.0
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    np.testing.assert_allclose(cos, c @ c.T, rtol=1e-5, atol=1e-6)


def test_kmeans_centres_are_float32_exact(problem):
    values, assign, _ = problem
    init = np.stack([values[assign == j].mean(0) for j in range(3)])
    with low_precision():
        centres, _, _ = kmeans(jax.random.key(0), jnp.asarray(values), 3, init=jnp.asarray(init),
                               iters=1)
    v64 = values.astype(np.float64)
    labels = np.argmin(((v64[:, None] - init[None].astype(np.float64)) ** 2).sum(-1), 1)
    for j in range(3):
        if (labels == j).any():
            np.testing.assert_allclose(np.asarray(centres)[j], v64[labels == j].mean(0), rtol=RTOL)
