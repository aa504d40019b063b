"""Point-clustered data (UIFCA, [T] chapter 4): points, not clients, carry clusters.

Heterogeneity recipe ([T] section 4.1), level p in [0, 1]: a client with s points has its
first round(s p) points from its dominant cluster and the other s - round(s p) from
clusters drawn uniformly at random (the dominant one included). p = 0 is i.i.d., p = 1 one
cluster per client. Client i's dominant cluster is i mod K (unspecified in [T]; this makes
dominant clusters balanced when N is a multiple of K). Cluster sizes are therefore equal
only in expectation (m/K each when N is a multiple of K).

Generators return ``FederatedData`` with x [N, s, d], point_cluster int32[N, s] (the
truth, never read by the algorithms), y = zeros, an empty test split (count_test 0) and
cluster[i] = the dominant cluster when p = 1, else -1 (clients have no single cluster).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.synthetic import bernoulli_theta


def check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity):
    if not isinstance(num_clusters, (int, np.integer)) or num_clusters < 1:
        raise ValueError(f"number of clusters K must be an integer >= 1, got {num_clusters!r}")
    for name, v in (("num_clients", num_clients), ("points_per_client", points_per_client)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not 0.0 <= heterogeneity <= 1.0:
        raise ValueError(f"heterogeneity level p must be in [0, 1], got {heterogeneity!r}")


def dominant_count(points_per_client: int, heterogeneity: float) -> int:
    """round(s p): the number of leading points a client draws from its dominant cluster."""
    return int(round(points_per_client * heterogeneity))


def heterogeneous_clusters(key, num_clients: int, points_per_client: int, num_clusters: int,
                           heterogeneity: float, dominant=None) -> jax.Array:
    """int32[N, s] true cluster of every point under the recipe (module docstring).

    dominant: int[N] dominant cluster per client (default i mod K).
    """
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    dom = (jnp.arange(num_clients) % num_clusters if dominant is None
           else jnp.asarray(dominant, jnp.int32))
    n_dom = dominant_count(points_per_client, heterogeneity)
    rand = jax.random.randint(key, (num_clients, points_per_client), 0, num_clusters)
    first = jnp.arange(points_per_client)[None, :] < n_dom
    return jnp.where(first, dom[:, None], rand).astype(jnp.int32)


def _point_data(x, labels, heterogeneity, num_clusters) -> FederatedData:
    n, s = labels.shape
    cluster = (jnp.arange(n, dtype=jnp.int32) % num_clusters if heterogeneity == 1.0
               else jnp.full((n,), -1, jnp.int32))
    return FederatedData(
        x=x, y=jnp.zeros((n, s), jnp.int32), count=jnp.full((n,), s, jnp.int32),
        x_test=jnp.zeros((n, 1) + x.shape[2:], x.dtype), y_test=jnp.zeros((n, 1), jnp.int32),
        count_test=jnp.zeros((n,), jnp.int32), cluster=cluster, point_cluster=labels,
        task="classification", num_classes=0)


def gaussian_clusters(key, *, num_clients: int = 4, points_per_client: int = 1000,
                      num_clusters: int = 4, dim: int = 32, separation: float = 5.0,
                      noise_std: float = 1.0, heterogeneity: float = 1.0,
                      scaling: str = "multiply") -> FederatedData:
    """Gaussian clusters ([T] 4.3): centre_k = Bernoulli(0.5)^d "scaled by R", point =
    centre + N(0, sigma^2 I). scaling="multiply" (default): centre = R b, separation about
    R sqrt(d/2) (20 for d = 32, R = 5: no overlap, consistent with the reported 100% for
    k-FED); it also fits [T]'s "R represents minimum separation between each center":
    two distinct centres differ in at least one coordinate, so R is exactly their least
    possible distance. scaling="norm": ||centre|| = R, separation about R and sometimes
    less (overlapping at sigma = 1: k-FED 97.2 / 97.9 / 100% at p = 0 / 0.5 / 1 on seed 0,
    below [T]'s 100%).
    true_params holds the centres [K, d]."""
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    if dim < 1 or separation <= 0 or noise_std < 0:
        raise ValueError(f"need dim >= 1, separation > 0, noise_std >= 0; got {dim}, "
                         f"{separation}, {noise_std}")
    k_c, k_lab, k_x = jax.random.split(key, 3)
    centres = bernoulli_theta(k_c, num_clusters, dim, separation, scaling)
    labels = heterogeneous_clusters(k_lab, num_clients, points_per_client, num_clusters,
                                    heterogeneity)
    x = centres[labels] + noise_std * jax.random.normal(k_x, labels.shape + (dim,))
    return _point_data(x, labels, heterogeneity, num_clusters).replace(true_params=centres)


def subspace_clusters(key, *, num_clients: int = 4, points_per_client: int = 1000,
                      num_clusters: int = 4, dim: int = 32, subspace_dim: int = 16,
                      coef_std: float = 1.0, jitter: float = 0.05,
                      heterogeneity: float = 1.0) -> FederatedData:
    """Subspace clusters ([T] 4.3): cluster k has a random orthonormal basis U_k [d, r]
    (QR of a Gaussian matrix); point = U_k c + jitter * N(0, I_d), c ~ N(0, coef_std^2 I_r).
    The jitter makes the rank-r covariance non-singular ([T] leaves it out; its density
    would be degenerate). All clusters have mean 0, so centroid methods cannot separate
    them. true_params holds the bases [K, d, r]."""
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    if not 1 <= subspace_dim <= dim:
        raise ValueError(f"need 1 <= subspace_dim <= dim, got {subspace_dim}, {dim}")
    if jitter < 0 or coef_std <= 0:
        raise ValueError(f"need jitter >= 0 and coef_std > 0, got {jitter}, {coef_std}")
    k_b, k_lab, k_c, k_j = jax.random.split(key, 4)
    bases = jnp.linalg.qr(jax.random.normal(k_b, (num_clusters, dim, subspace_dim)))[0]
    labels = heterogeneous_clusters(k_lab, num_clients, points_per_client, num_clusters,
                                    heterogeneity)
    coef = coef_std * jax.random.normal(k_c, labels.shape + (subspace_dim,))
    x = jnp.einsum("nsdr,nsr->nsd", bases[labels], coef)
    x = x + jitter * jax.random.normal(k_j, x.shape)
    return _point_data(x, labels, heterogeneity, num_clusters).replace(true_params=bases)


def points_from_pools(key, pools, *, num_clients: int, points_per_client: int,
                      heterogeneity: float) -> FederatedData:
    """Distributes real points by the recipe: pools is a list of K arrays [n_k, ...] (the
    points of each true cluster, e.g. one digit or one rotation); every point is used at
    most once (drawn without replacement from its cluster's pool). Host-side numpy.

    Raises if some cluster needs more points than its pool holds (lower
    points_per_client)."""
    k = len(pools)
    check_point_setup(num_clients, points_per_client, k, heterogeneity)
    k_lab, k_perm = jax.random.split(key)
    labels = np.asarray(heterogeneous_clusters(k_lab, num_clients, points_per_client, k,
                                               heterogeneity))
    rng = np.random.default_rng(np.asarray(jax.random.key_data(k_perm)).ravel())
    x = np.zeros(labels.shape + np.asarray(pools[0]).shape[1:], np.float32)
    for c in range(k):  # host-side data preparation, once
        where = labels == c
        need, pool = int(where.sum()), np.asarray(pools[c])
        if need > len(pool):
            raise ValueError(f"cluster {c} needs {need} points but its pool has {len(pool)}; "
                             "lower points_per_client")
        x[where] = pool[rng.permutation(len(pool))[:need]]
    return _point_data(jnp.asarray(x), jnp.asarray(labels), heterogeneity, k)


def true_points(data) -> np.ndarray:
    """int[N, n_max] true cluster of every point (``data.point_cluster``) with -1 on
    padding (host numpy); errors if the data carry no point clusters."""
    if data.point_cluster is None:
        raise ValueError("these data carry no point clusters (point_cluster is None); use a "
                         "point dataset such as uifca-gaussian or uifca-subspace")
    count = np.asarray(data.count)
    mask = np.arange(data.x.shape[1])[None, :] < count[:, None]
    return np.where(mask, np.asarray(data.point_cluster), -1)
