"""Small data and model builders shared by the tests."""

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.synthetic import gaussian_mixture_classification, mixed_linear_regression


def small_regression(seed=0, **kw):
    params = dict(num_clients=20, num_clusters=2, samples_per_client=30,
                  test_samples_per_client=10, dim=8, noise_std=0.1, separation=3.0)
    params.update(kw)
    return mixed_linear_regression(jax.random.key(seed), **params)


def small_classification(seed=0, **kw):
    params = dict(num_clients=12, num_clusters=2, samples_per_client=24,
                  test_samples_per_client=8, dim=6, num_classes=3)
    params.update(kw)
    return gaussian_mixture_classification(jax.random.key(seed), **params)


def orthogonal_design(theta_star, clients_per_cluster):
    """Noise-free regression whose empirical loss is the population loss ||theta - theta*||^2:
    each client holds x = sqrt(d) e_1..e_d (so X^T X / n = I) and y = <x, theta*_j>."""
    k, d = theta_star.shape
    x = jnp.sqrt(d) * jnp.eye(d)
    cluster = jnp.repeat(jnp.arange(k), clients_per_cluster).astype(jnp.int32)
    n = k * clients_per_cluster
    xs = jnp.broadcast_to(x, (n, d, d))
    ys = jnp.einsum("nsd,nd->ns", xs, theta_star[cluster])
    count = jnp.full((n,), d, jnp.int32)
    return FederatedData(x=xs, y=ys, count=count, x_test=xs, y_test=ys, count_test=count,
                         cluster=cluster, true_params=theta_star, task="regression")


def ragged_classification(num_clients=10):
    """Concept-shift mixture (2 clusters, 3 classes) with ragged counts: 4..12 real examples."""
    data = gaussian_mixture_classification(jax.random.key(0), num_clients=num_clients,
                                           num_clusters=2, samples_per_client=12,
                                           test_samples_per_client=4, dim=6, num_classes=3)
    counts = 4 + (jnp.arange(num_clients) * 5) % 9
    return data.replace(count=counts.astype(jnp.int32))


def assert_trees_close(a, b, tol=1e-6):
    """Every leaf of two pytrees equal within ``tol`` (absolute and relative)."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)
