"""Partial participation: a static number of clients per round, without replacement."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from fedclust_jax.core.keys import PARTICIPATION_KEYS


def check_participation(fraction: float, name: str = "participation") -> None:
    """ValueError unless ``fraction`` is in (0, 1]."""
    if not 0 < fraction <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {fraction}")


def num_participants(num_clients: int, fraction: float, name: str = "participation") -> int:
    """M = round(fraction * N) participants per round; fraction in (0, 1]. ValueError
    (nothing is clamped) when that rounds to no client at all."""
    check_participation(fraction, name)
    m = int(math.floor(fraction * num_clients + 0.5))
    if m < 1:
        least = 0.5 / num_clients
        raise ValueError(f"{name} {fraction:g} of {num_clients} clients rounds to 0 "
                         f"participants a round; use at least {least:.3g} (1 client) or more")
    return m


def sample_participants(key, num_clients: int, m: int) -> jax.Array:
    """int32[m]: distinct client ids drawn uniformly, sorted; all clients when m == N."""
    if m >= num_clients:
        return jnp.arange(num_clients, dtype=jnp.int32)
    return jnp.sort(jax.random.choice(key, num_clients, (m,), replace=False)).astype(jnp.int32)


def participants(key, num_clients: int, fraction: float):
    """(ids int32[M], per-client keys [M]) for one round from the round's key.

    Participants are drawn with ``fold_in(key, 0)``; client i's key is
    ``fold_in(fold_in(key, 1), i)`` with i its global id, so a client's randomness does not
    depend on who else participates or on how clients are chunked.
    """
    ids = sample_participants(PARTICIPATION_KEYS.key(key, "participants"), num_clients,
                              num_participants(num_clients, fraction))
    return ids, client_keys(key, ids)


def client_keys(key, ids) -> jax.Array:
    """Per-client keys [M] for global client ids ``ids`` in the round of ``key``."""
    base = PARTICIPATION_KEYS.key(key, "clients")
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(ids)


def per_cluster_participants(key, assign, num_clusters: int, per_cluster: int):
    """(ids int32[K, S], valid bool[K, S]): S = per_cluster members of each cluster drawn
    uniformly without replacement (all members of a smaller cluster; the rest of its row
    is invalid). assign: int32[N] cluster of each client (-1: none)."""
    prio = jax.random.uniform(key, assign.shape)
    score = jnp.where(assign[None, :] == jnp.arange(num_clusters)[:, None], prio[None, :], 2.0)
    neg, ids = lax.top_k(-score, min(per_cluster, assign.shape[0]))     # lowest scores
    return ids.astype(jnp.int32), -neg < 1.5


def pack_slots(valid, m: int) -> jax.Array:
    """int32[m]: flat indices into ``valid`` bool[K, S] (``per_cluster_participants``) of the
    m slots to train, the valid ones first, taken round-robin over clusters (slot 0 of every
    cluster, then slot 1, ...), then invalid ones. Each client is in at most one cluster, so
    with m >= the number of clients no valid slot is left out."""
    k, s = valid.shape
    pos = jnp.arange(k * s)
    return jnp.argsort(jnp.where(valid.reshape(-1), (pos % s) * k + pos // s, k * s))[:m]
