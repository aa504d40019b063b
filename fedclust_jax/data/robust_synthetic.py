"""Synthetic data of the two robust clustered-FL papers.

``brifca_regression``: the BR-IFCA paper's mixed linear regression with Byzantine machines
  (its Section 6): y = <x, theta*_j> + eps, x ~ N(0, I_d), eps ~ N(0, sigma^2), sigma^2 = 0.2,
  theta*_j ~ Bernoulli(0.5)^d rescaled to norm 1; Byzantine machine b holds the same kind of
  data for its own theta_b of norm ``byz_norm`` (3): the paper's outlier attack data.
``threshold_blobs``: the threshold-clustering paper's Section 4.3 points (90 points in 10-D
  from 10 isotropic Gaussian blobs with fixed centers and std sigma), one point per client.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from fedclust_jax.data.defaults import paper_defaults
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.synthetic import regression_draws
from fedclust_jax.bounds import BelowOne, NonNegative, Seed, Size


def num_byzantine(num_clients: int, byz_frac: float) -> int:
    """m_b = round(byz_frac * N) (half up): the Byzantine clients are the last m_b (the
    generators here put them last; ``attacks.byzantine`` reads the same rule). Errors if
    byz_frac is outside [0, 1) or no honest client would remain."""
    if not 0 <= byz_frac < 1:
        raise ValueError(f"byz_frac (Byzantine fraction) must be in [0, 1), got {byz_frac}")
    b = int(math.floor(byz_frac * num_clients + 0.5))
    if b >= num_clients:
        raise ValueError(f"byz_frac = {byz_frac} makes {b} of {num_clients} clients Byzantine; "
                         "at least one client must be honest")
    return b


def unit_bernoulli(key, k: int, d: int, norm: float = 1.0, tries: int = 8) -> jax.Array:
    """[k, d] Bernoulli(0.5)^d vectors rescaled to l2 norm ``norm``; an all-zero draw is
    redrawn (as the BR-IFCA code), up to ``tries`` times (a zero survives w.p. 2^(-tries d))."""
    b = jax.random.bernoulli(key, 0.5, (tries, k, d)).astype(jnp.float32)
    nonzero = b.sum(-1) > 0                                            # [tries, k]
    first = jnp.argmax(nonzero, axis=0)                                # [k]
    b = b[first, jnp.arange(k)]
    n = jnp.linalg.norm(b, axis=1, keepdims=True)
    return norm * b / jnp.where(n > 0, n, 1.0)


@paper_defaults(
    model="linear",
    rounds=300,
    training={"lr": 0.01, "steps": 1},
    algorithms={
        "brifca": {"num_clusters": 5},
        "ifca": {"num_clusters": 5, "option": "gradient"},
        "three-stage": {"num_clusters": 5},
    },
    source="BR-IFCA paper Fig. 1: k=5, m=200, d=50, 300 iterations, lr 0.01 (code)")
def brifca_regression(key, *, num_clients: Size = 200, num_clusters: Size = 5,
                      byz_frac: BelowOne = 0.05, dim: Size = 50, samples_per_client: Size = 100,
                      test_samples_per_client: Size = 100, noise_var: NonNegative = 0.2,
                      byz_norm: float = 3.0) -> FederatedData:
    """BR-IFCA synthetic regression (m machines, k clusters, fraction alpha Byzantine).

    m_b = round(byz_frac * m) Byzantine machines come last (true cluster -1); the m - m_b
    honest machines are split equally over the k clusters (the paper: 38 per cluster, e.g.
    m = 200, k = 5, alpha = 0.05). ``true_params``: theta* [k, d]. x [m, n, d], y [m, n].

    num_clients: number of clients m
    num_clusters: number of true clusters k
    byz_frac: fraction of Byzantine machines
    dim: feature dimension d
    samples_per_client: training examples per client
    test_samples_per_client: test examples per client
    noise_var: label noise variance sigma^2
    byz_norm: norm of the Byzantine machines' parameters
    """
    if num_clusters < 1 or dim < 1 or samples_per_client < 1 or test_samples_per_client < 1:
        raise ValueError("num_clusters, dim and sample counts must be >= 1")
    if noise_var < 0:
        raise ValueError(f"noise_var must be >= 0, got {noise_var}")
    b = num_byzantine(num_clients, byz_frac)
    honest = num_clients - b
    if honest % num_clusters:
        raise ValueError(f"{honest} honest machines (m = {num_clients}, {b} Byzantine) cannot be "
                         f"split equally over k = {num_clusters} clusters")
    cluster = jnp.concatenate([jnp.arange(honest, dtype=jnp.int32) // (honest // num_clusters),
                               jnp.full((b,), -1, jnp.int32)])
    k_theta, k_byz, k_train, k_test = jax.random.split(key, 4)
    theta = unit_bernoulli(k_theta, num_clusters, dim)
    theta_byz = unit_bernoulli(k_byz, max(b, 1), dim, byz_norm)[:b]
    per_client = jnp.concatenate([theta[cluster[:honest]], theta_byz])  # [m, d]
    std = jnp.sqrt(noise_var)
    x, y = regression_draws(k_train, per_client, samples_per_client, std)
    x_test, y_test = regression_draws(k_test, per_client, test_samples_per_client, std)
    return FederatedData(
        x=x, y=y, count=jnp.full(num_clients, samples_per_client, jnp.int32),
        x_test=x_test, y_test=y_test,
        count_test=jnp.full(num_clients, test_samples_per_client, jnp.int32),
        cluster=cluster, true_params=theta, task="regression", num_classes=0)


def blob_centers(num_clusters: int = 10, dim: int = 10, center_seed: int = 0,
                 box: float = 10.0) -> jax.Array:
    """[K, dim] centers uniform in [-box, box]^dim from a fixed seed (sklearn make_blobs'
    default box), so they stay fixed while sigma changes."""
    return jax.random.uniform(jax.random.key(center_seed), (num_clusters, dim),
                              minval=-box, maxval=box)


def blobs(key, *, num_points: int = 90, num_clusters: int = 10, dim: int = 10,
          std: float = 1.0, center_seed: int = 0):
    """(points [n, dim], labels int32[n], centers [K, dim]): labels as make_blobs (equal
    shares, the first n mod K clusters one more), points = center + std * N(0, I)."""
    if std < 0:
        raise ValueError(f"std must be >= 0, got {std}")
    centers = blob_centers(num_clusters, dim, center_seed)
    labels = jnp.arange(num_points, dtype=jnp.int32) % num_clusters
    labels = jnp.sort(labels)
    points = centers[labels] + std * jax.random.normal(key, (num_points, dim))
    return points, labels, centers


@paper_defaults(
    unsupported=("it is the threshold-clustering paper's point set (Fig. 4, one point per client); use "
        "fedclust_jax.core.threshold_clustering.threshold_clustering on it"))
def threshold_blobs(key, *, num_points: Size = 90, num_clusters: Size = 10, dim: Size = 10,
                    std: NonNegative = 1.0, center_seed: Seed = 0) -> FederatedData:
    """The blobs as federated data: client i holds one point x [N, 1, dim] (target 0);
    ``cluster`` = blob label, ``true_params`` = centers [K, dim].

    num_points: number of points (clients)
    num_clusters: number of true clusters k
    dim: feature dimension d
    std: blob standard deviation
    center_seed: seed of the blob centres"""
    points, labels, centers = blobs(key, num_points=num_points, num_clusters=num_clusters,
                                    dim=dim, std=std, center_seed=center_seed)
    x = points[:, None, :]
    y = jnp.zeros((num_points, 1), jnp.float32)
    one = jnp.ones(num_points, jnp.int32)
    return FederatedData(x=x, y=y, count=one, x_test=x, y_test=y, count_test=one,
                         cluster=labels, true_params=centers, task="regression", num_classes=0)
