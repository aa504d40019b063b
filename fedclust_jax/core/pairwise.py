"""Distance matrices between clients and clusters.

The one home of distance computations. Vector distances take flattened models ``[N, P]``
(``pytree.flatten_stacked``). Loss-based
distances are SR-FCA's cross-cluster loss (Def. 5.1), built from loss matrices where entry
``[a, b]`` is model b's training loss on client a's data (``losses.loss_matrix``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def sq_distances(a: jax.Array, b: jax.Array | None = None, *,
                 precision=lax.Precision.HIGHEST) -> jax.Array:
    """[N, M] squared Euclidean distances between rows of a [N, P] and b [M, P] (b = a if
    None), through Gram terms after subtracting a's mean (float32 loses the small
    differences of vectors that share a large offset otherwise); clipped at 0.
    ``precision``: of the matmul; HIGHEST (default) keeps float32 on GPU/TPU, whose default
    rounds to TF32/bfloat16 (pass None for the backend default)."""
    shift = a.mean(axis=0)
    x = a - shift
    y = x if b is None else b - shift
    cross = jnp.dot(x, y.T, precision=precision)
    d2 = (x * x).sum(1)[:, None] - 2.0 * cross + (y * y).sum(1)[None, :]
    return jnp.maximum(d2, 0.0)


def exact_sq_distances(points: jax.Array, centers: jax.Array) -> jax.Array:
    """[N, K] ||z_i - v_k||^2 computed directly (one [N, P] pass per center, ``lax.map``
    over the K centers): no Gram-term cancellation, for the few centers of robust rules."""
    return lax.map(lambda c: jnp.sum((points - c) ** 2, axis=1), centers).T


def l2_distances(a: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """[N, M] Euclidean distances between rows of a [N, P] and b [M, P] (b = a if None;
    then exactly symmetric with a zero diagonal). See ``sq_distances``."""
    d = jnp.sqrt(sq_distances(a, b))
    if b is None:
        d = 0.5 * (d + d.T) * (1.0 - jnp.eye(d.shape[0], dtype=d.dtype))
    return d


def cosine_similarity(a: jax.Array, eps: float = 1e-12) -> jax.Array:
    """[N, N] cosine similarities between rows of a [N, P] (not centred: CFL compares
    update directions, whose common offset matters). Zero rows have similarity 0."""
    norm = jnp.sqrt((a * a).sum(1))
    u = a / jnp.maximum(norm, eps)[:, None]
    return jnp.dot(u, u.T, precision=lax.Precision.HIGHEST)


def client_cross_loss(loss: jax.Array) -> jax.Array:
    """Client-client cross-cluster loss dist(w_i, w_j) = (f_i(w_j) + f_j(w_i)) / 2.

    loss: [N, N], loss[i, j] = f_i(w_j) (client i's training data, client j's model).
    Returns [N, N] symmetric, diagonal = f_i(w_i).
    """
    return 0.5 * (loss + loss.T)


def _member_mean(member: jax.Array, values: jax.Array) -> jax.Array:
    """[K, N] 0/1 membership x [N, M] -> per-cluster mean over members [K, M] (0 if empty)."""
    m = member.astype(values.dtype)
    return jnp.dot(m, values, precision=lax.Precision.HIGHEST) / jnp.maximum(m.sum(1), 1.0)[:, None]


def client_cluster_cross_loss(client_loss: jax.Array, cluster_loss: jax.Array,
                              member: jax.Array) -> jax.Array:
    """Client-cluster distance dist(w_i, omega_c) = (f_i(omega_c) + f_c(w_i)) / 2, [N, K].

    client_loss: [N, N], f_a(w_b) of client models; cluster_loss: [N, K], f_a(omega_c);
    member: bool[K, N], cluster c's clients (f_c = mean of the members' losses).
    """
    f_c_of_client = _member_mean(member, client_loss)        # [K, N]: f_c(w_i)
    return 0.5 * (cluster_loss + f_c_of_client.T)


def cluster_cross_loss(cluster_loss: jax.Array, member: jax.Array) -> jax.Array:
    """Cluster-cluster distance (f_c(omega_c') + f_c'(omega_c)) / 2, [K, K].

    cluster_loss: [N, K], f_a(omega_c); member: bool[K, N].
    """
    f = _member_mean(member, cluster_loss)                   # [K, K]: f_c(omega_c')
    return 0.5 * (f + f.T)


def upper_quantile(dist: jax.Array, q: float) -> jax.Array:
    """The authors' code's threshold: sorted pairwise distances (i < j) at index
    ceil(q * #pairs) (clipped to the last). dist: [N, N] symmetric; q in [0, 1]."""
    n = dist.shape[0]
    i, j = jnp.triu_indices(n, k=1)
    d = jnp.sort(dist[i, j])
    k = min(int(-(-q * d.shape[0] // 1)), d.shape[0] - 1)
    return d[k]
