"""Synthetic clustered data of the IFCA paper (mixed linear regression) and a Gaussian
mixture classification task for quick runs."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from fedclust_jax.data.defaults import paper_defaults
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.bounds import NonNegative, Positive, Size

THETA_SCALINGS = ("norm", "multiply")


def _check_positive(**kwargs):
    for name, value in kwargs.items():
        if value is None or value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")


def equal_cluster_ids(num_clients: int, num_clusters: int) -> jax.Array:
    """int32[N]: client i is in cluster floor(i / (N / k)), as in the IFCA code."""
    if num_clusters < 1 or num_clients % num_clusters:
        raise ValueError(f"num_clients ({num_clients}) must be a positive multiple of "
                         f"num_clusters ({num_clusters}) for equal cluster sizes")
    return jnp.arange(num_clients, dtype=jnp.int32) // (num_clients // num_clusters)


def bernoulli_theta(key, k: int, d: int, scale: float, scaling: str = "norm") -> jax.Array:
    """[k, d] vectors with Bernoulli(0.5) coordinates.

    scaling="norm": each vector rescaled to l2 norm ``scale`` (the paper's R, so the
    separation between two vectors is about R). scaling="multiply": multiplied by ``scale``
    (the authors' code's r; norm and separation then grow as r*sqrt(d/2)). An all-zero draw
    (probability 2^-d) is left at zero under "norm".
    """
    if scaling not in THETA_SCALINGS:
        raise ValueError(f"scaling must be one of {THETA_SCALINGS}, got {scaling!r}")
    b = jax.random.bernoulli(key, 0.5, (k, d)).astype(jnp.float32)
    if scaling == "multiply":
        return scale * b
    norm = jnp.linalg.norm(b, axis=1, keepdims=True)
    return scale * b / jnp.where(norm > 0, norm, 1.0)


@functools.partial(jax.jit, static_argnums=2)
def regression_draws(key, theta_per_client, n: int, noise_std):
    """Linear-regression samples for every client: x [m, n, d] ~ N(0, I_d) and
    y [m, n] = <x, theta_i> + N(0, noise_std^2), with theta_per_client [m, d]."""
    kx, ke = jax.random.split(key)
    m, d = theta_per_client.shape
    x = jax.random.normal(kx, (m, n, d))
    y = jnp.einsum("mnd,md->mn", x, theta_per_client) + noise_std * jax.random.normal(ke, (m, n))
    return x, y


@paper_defaults(
    model="linear",
    rounds=300,
    training={"lr": 0.01, "steps": 10},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 2, "option": "gradient", "lr": 0.1, "restarts": 10},
    },
    source=("IFCA paper Sec. 3.1 / Fig. 3(a): k=2, m=100, n=100, d=1000, 300 rounds, option I, "
        "gamma=0.1 from the sweep {0.01, 0.1, 1}, 10 random restarts"))
def mixed_linear_regression(key, *, num_clients: Size = 100, num_clusters: Size = 2,
                            samples_per_client: Size = 100, test_samples_per_client: Size = 100,
                            dim: Size = 1000, noise_std: NonNegative = 0.1,
                            separation: Positive = 1.0, scaling: str = "norm") -> FederatedData:
    """IFCA synthetic data: y = <x, theta*_j> + eps, x ~ N(0, I_d), eps ~ N(0, sigma^2).

    theta*_j: Bernoulli(0.5)^d scaled by ``separation`` under ``scaling`` (see
    ``bernoulli_theta``: "norm" is the paper's R, "multiply" the code's r). Equal cluster
    sizes; ``true_params`` holds theta* [k, d]. Shapes: x [m, n, d], y [m, n].

    num_clients: number of clients m
    num_clusters: number of true clusters k
    samples_per_client: training examples per client
    test_samples_per_client: test examples per client
    dim: feature dimension d
    noise_std: label / feature noise standard deviation
    separation: cluster separation R
    scaling: how the separation scales the centres: "norm" or "multiply"
    """
    _check_positive(num_clients=num_clients, samples_per_client=samples_per_client,
                    test_samples_per_client=test_samples_per_client, dim=dim,
                    separation=separation)
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    cluster = equal_cluster_ids(num_clients, num_clusters)
    k_theta, k_train, k_test = jax.random.split(key, 3)
    theta = bernoulli_theta(k_theta, num_clusters, dim, separation, scaling)
    x, y = regression_draws(k_train, theta[cluster], samples_per_client, noise_std)
    x_test, y_test = regression_draws(k_test, theta[cluster], test_samples_per_client, noise_std)
    return FederatedData(
        x=x, y=y, count=jnp.full(num_clients, samples_per_client, jnp.int32),
        x_test=x_test, y_test=y_test,
        count_test=jnp.full(num_clients, test_samples_per_client, jnp.int32),
        cluster=cluster, true_params=theta, task="regression", num_classes=0)


@functools.partial(jax.jit, static_argnums=3)
def mixture_draws(key, centres, cluster, n: int, noise_std):
    """n points per client of the mixture: class c uniform, x = centres[c] + N(0,
    noise_std^2 I), label (c + cluster_i) mod C. centres [C, d], cluster int32[m] ->
    x [m, n, d], y int32[m, n]. (Module level, so equal shapes reuse one program.)"""
    kc, kx = jax.random.split(key)
    num_classes, dim = centres.shape
    c = jax.random.randint(kc, (cluster.shape[0], n), 0, num_classes)
    x = centres[c] + noise_std * jax.random.normal(kx, (cluster.shape[0], n, dim))
    return x, ((c + cluster[:, None]) % num_classes).astype(jnp.int32)


@paper_defaults(
    model="mlp",
    model_args={"hidden": [64]},
    rounds=50,
    training={"lr": 0.1, "steps": 5},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 4, "option": "model", "restarts": 3},
        "oracle": {},
    },
    source="this package's concept-shift mixture (no paper): MLP 20-64-10, option II")
def gaussian_mixture_classification(key, *, num_clients: Size = 100, num_clusters: Size = 4,
                                    samples_per_client: Size = 100,
                                    test_samples_per_client: Size = 100, dim: Size = 20,
                                    num_classes: Size = 10, class_separation: Positive = 3.0,
                                    noise_std: NonNegative = 1.0) -> FederatedData:
    """Classification with concept shift: shared class centres mu_c ~ N(0, s^2 I_d / d) * sqrt(d)
    (norm about ``class_separation``); a point of class c is mu_c + N(0, noise_std^2 I), and
    in cluster j it is labelled (c + j) mod C. One model cannot fit two clusters; a model per
    cluster can. Equal cluster sizes, uniform classes. x [m, n, d], y int32[m, n].

    num_clients: number of clients m
    num_clusters: number of true clusters k
    samples_per_client: training examples per client
    test_samples_per_client: test examples per client
    dim: feature dimension d
    num_classes: number of classes
    class_separation: norm of the class centres
    noise_std: label / feature noise standard deviation
    """
    _check_positive(num_clients=num_clients, samples_per_client=samples_per_client,
                    test_samples_per_client=test_samples_per_client, dim=dim,
                    num_classes=num_classes, class_separation=class_separation)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    cluster = equal_cluster_ids(num_clients, num_clusters)
    k_mu, k_train, k_test = jax.random.split(key, 3)
    centres = class_separation * jax.random.normal(k_mu, (num_classes, dim)) / jnp.sqrt(dim)
    x, y = mixture_draws(k_train, centres, cluster, samples_per_client, noise_std)
    x_test, y_test = mixture_draws(k_test, centres, cluster, test_samples_per_client, noise_std)
    return FederatedData(
        x=x, y=y, count=jnp.full(num_clients, samples_per_client, jnp.int32),
        x_test=x_test, y_test=y_test,
        count_test=jnp.full(num_clients, test_samples_per_client, jnp.int32),
        cluster=cluster, task="classification", num_classes=num_classes)
