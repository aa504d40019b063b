"""CFL (Sattler, Mueller, Samek 2021): clustered FL by recursive bipartition.

Each round every client trains ``local.steps`` steps from its cluster's model theta_c and
uploads the update dtheta_i; theta_c <- theta_c + mean of its members' updates. A cluster c
with more than ``min_size`` members is split in two when, after ``warmup`` rounds,
  ||mean_{i in c} dtheta_i|| < eps1   (near a stationary point of the cluster objective)
  and max_{i in c} ||dtheta_i|| > eps2   (some clients are still far from theirs).
The split is the optimal bipartition of the cosine similarities alpha_ij of the members'
updates: the two groups whose largest cross similarity max_{i in c1, j in c2} alpha_ij is
smallest (Sattler et al., Algorithm 1), which single-linkage agglomerative clustering into
two groups finds (``linkage="single"``); ``linkage="complete"`` is the complete-linkage
split of Sattler et al.'s released code, which need not attain that minimum. Both halves
start from theta_c.

``target_clusters`` (the SR-FCA authors' code, which overrides the criterion with
``or True``): the norm criterion is ignored and clusters split until there are that many.
Clusters live on a static ``k_max`` axis with an ``active`` prefix mask.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from fedclust_jax.algorithms.base import (Algorithm, check_chunk, evaluate_clusters)
from fedclust_jax.core.aggregate import cluster_mean, membership
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.pairwise import cosine_similarity
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked, take
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.bounds import Count, NonNegative, Size
from fedclust_jax.config_check import check_config


LINKAGES = ("single", "complete")


@dataclasses.dataclass(frozen=True)
class CFLConfig:
    """eps1, eps2: the split criterion's norm thresholds; min_size: clusters of more than
    this many clients may split (Sattler's code: 2); warmup: rounds before any split;
    target_clusters: None (criterion) or K (split until K clusters, the SR-FCA code);
    linkage: "single" (the optimal bipartition of the paper, also the SR-FCA authors'
    code) or "complete" (Sattler et al.'s released code); k_max: size of the cluster axis;
    local: client training; chunk: clients per chunk."""

    eps1: NonNegative = 0.4
    eps2: NonNegative = 1.6
    min_size: Size = 2
    warmup: Count = 20
    target_clusters: Size | None = None
    linkage: typing.Literal["single", "complete"] = "single"
    k_max: Size = 8
    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("eps1", "eps2")

    def __post_init__(self):
        check_config(self)
        if self.target_clusters is not None and self.target_clusters > self.k_max:
            raise ValueError(f"target_clusters must be an integer in [1, k_max={self.k_max}], "
                             f"got {self.target_clusters!r}")
        check_chunk(self.chunk)


@struct.dataclass
class CFLState:
    """params [K_max, ...]; active bool[K_max] (a prefix); assign int32[N]; round."""

    params: object
    active: jax.Array
    assign: jax.Array
    round: jax.Array


def bipartition(sim: jax.Array, member: jax.Array, linkage: str = "single") -> jax.Array:
    """bool[N]: the second group of the agglomerative split of ``member`` into two.

    sim: [N, N] similarities (distance = -sim); member: bool[N]. Groups merge in order of
    their linkage distance until two remain: with ``linkage="single"`` a group pair's
    distance is that of its closest pair of members (the split then minimises the largest
    cross similarity, Sattler et al.'s optimal bipartition), with "complete" that of its
    farthest pair. The group holding the lowest member index is the first. Fewer than two
    members: all False.
    """
    if linkage not in LINKAGES:
        raise ValueError(f"linkage must be one of {LINKAGES}, got {linkage!r}")
    join = jnp.minimum if linkage == "single" else jnp.maximum
    n = sim.shape[0]
    eye = jnp.eye(n, dtype=bool)
    dist = jnp.where(member[:, None] & member[None, :], -sim, jnp.inf)

    def body(_, carry):
        g, alive, label = carry
        pair = jnp.where(alive[:, None] & alive[None, :] & ~eye, g, jnp.inf)
        flat = jnp.argmin(pair)
        a, b = flat // n, flat % n
        a, b = jnp.minimum(a, b), jnp.maximum(a, b)
        row = join(g[a], g[b])
        merged = (g.at[a, :].set(row).at[:, a].set(row), alive.at[b].set(False),
                  jnp.where(label == b, a, label))
        go = alive.sum() > 2
        return jax.tree.map(lambda x, y: jnp.where(go, x, y), merged, carry)

    init = (dist, member, jnp.arange(n))
    _, _, label = lax.fori_loop(0, max(n - 2, 0), body, init)
    first = jnp.argmax(member)
    return member & (label != label[first])


class CFL(Algorithm):
    """CFL (Sattler et al.): recursive bipartition by cosine similarity of updates."""

    name = "cfl"
    client_vectors = 1
    pairwise_clients = True
    clusters_clients = True

    def __init__(self, model, cfg: CFLConfig = CFLConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> CFLState:
        k = self.cfg.k_max
        p = self.model.init(key)
        params = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), p)
        return CFLState(params=params, active=jnp.arange(k) < 1,
                        assign=jnp.zeros((data.num_clients,), jnp.int32),
                        round=jnp.zeros((), jnp.int32))

    def client_updates(self, state: CFLState, key, data):
        """(trained params [N, ...], updates dtheta_i [N, P]): every client's ``local.steps``
        steps of round ``key`` from its cluster's model theta_c, and the flat difference."""
        cfg, ids = self.cfg, jnp.arange(data.num_clients)
        start = take(state.params, state.assign)
        lr = cfg.local.lr_at(state.round)
        trained = map_client_data(
            lambda i, x, y, c, p, kk: local_train(self.model, cfg.local, p, x, y, c, kk, lr),
            data, None, start, client_keys(key, ids), chunk=cfg.chunk)
        return trained, flatten_stacked(trained) - flatten_stacked(start)

    def round(self, state: CFLState, key, data):
        cfg, k = self.cfg, self.cfg.k_max
        trained, delta = self.client_updates(state, key, data)                    # delta [N, P]
        params = cluster_mean(trained, state.assign, state.params)

        member = membership(state.assign, k) > 0                                 # [K, N]
        size = member.sum(1)
        mean_update = (jnp.dot(member.astype(delta.dtype), delta, precision=lax.Precision.HIGHEST)
                       / jnp.maximum(size, 1)[:, None])
        mean_norm = jnp.sqrt((mean_update ** 2).sum(1))
        norms = jnp.sqrt((delta ** 2).sum(1))
        max_norm = jnp.max(jnp.where(member, norms[None, :], 0.0), axis=1)
        can = state.active & (size > cfg.min_size) & (state.round >= cfg.warmup)
        n_active = state.active.sum()
        if cfg.target_clusters is None:
            want = can & (mean_norm < cfg.eps1) & (max_norm > cfg.eps2)
            room = k - n_active
        else:
            want = can
            room = cfg.target_clusters - n_active
        rank = jnp.cumsum(want) - 1
        split = want & (rank < room)
        new_id = n_active + rank                                                   # [K]

        sim = cosine_similarity(delta)
        second = jax.vmap(lambda m: bipartition(sim, m, cfg.linkage))(member & split[:, None])  # [K, N]
        moved = second.any(0)
        src = jnp.argmax(second, axis=0)                                           # old cluster
        assign = jnp.where(moved, new_id[src], state.assign).astype(jnp.int32)
        # new slots copy their parent's model
        parent = jnp.full((k,), -1, jnp.int32).at[jnp.where(split, new_id, k)].set(
            jnp.arange(k, dtype=jnp.int32), mode="drop")
        params = jax.tree.map(
            lambda a: jnp.where((parent >= 0).reshape((-1,) + (1,) * (a.ndim - 1)),
                                a[jnp.clip(parent, 0, k - 1)], a), params)
        active = state.active | (parent >= 0)
        new = CFLState(params=params, active=active, assign=assign, round=state.round + 1)
        return new, dict(num_clusters=active.sum(), mean_norm=jnp.max(jnp.where(state.active, mean_norm, 0.0)),
                         max_norm=jnp.max(max_norm))

    def objective(self, state, data):
        loss, _ = loss_matrix_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)
        return loss[jnp.arange(loss.shape[0]), state.assign].mean()

    def evaluate(self, state, data) -> dict:
        ev = evaluate_clusters(self.model, state.params, state.assign, data,
                               chunk=self.cfg.chunk, active=state.active)
        return dict(ev, assign=state.assign, cluster_params=state.params,
                    num_clusters=jnp.sum(state.active))
