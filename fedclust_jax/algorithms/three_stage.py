"""Three-Stage (Ghosh et al. 2019), the BR-IFCA paper's baseline.

Stage 1 (one shot, in ``init``): every machine computes its local ERM by ``erm_steps`` GD
  steps from one common initial model (Byzantine machines: on their own data; gradient
  attacks replace their ERM by the attack's vector).
Stage 2 (in ``init``): trimmed k-means on the flattened ERMs: k-means++ seeding, then
  ``kmeans_iters`` (paper: 100) iterations of nearest-center assignment and a per-cluster
  coordinate-wise trim_frac-trimmed mean as the center update (Ghosh et al.'s rule).
Stage 3 (``round``, paper: 300 rounds): trimmed-mean GD within the fixed clusters,
  theta_j <- theta_j - gamma trmean_beta({g_i : i in cluster j}), g_i at theta_{c_i}.
Byzantine machines are the last round(byz_frac m); they keep their stage-2 cluster.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from fedclust_jax.algorithms.base import ClusterState, check_chunk, check_clusters, evaluate_clusters
from fedclust_jax.attacks import ByzantineSetting, attack_from_config
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.attacks.rounds import byzantine_gradients
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.kmeans import kmeans_plus_plus, sq_distances
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.robust import cluster_trimmed_mean
from fedclust_jax.core.train import LocalTraining, local_train


def _unflatten(flat, like_one, k):
    leaves, tree = jax.tree.flatten(like_one)
    out, start = [], 0
    for a in leaves:
        out.append(flat[:, start:start + a.size].reshape((k,) + a.shape).astype(a.dtype))
        start += a.size
    return jax.tree.unflatten(tree, out)


def trimmed_kmeans(key, points, k: int, trim_frac: float, iters: int, init=None):
    """(centers [k, P], labels int32[N]): Lloyd iterations with trimmed-mean centers from
    ``init`` [k, P] (default: k-means++ seeding, which far outliers can capture)."""
    centers = kmeans_plus_plus(key, points, k) if init is None else init

    def step(c, _):
        labels = jnp.argmin(sq_distances(points, c), axis=1).astype(jnp.int32)
        return cluster_trimmed_mean(points, labels, c, trim_frac), None

    centers = lax.scan(step, centers, None, length=iters)[0]
    return centers, jnp.argmin(sq_distances(points, centers), axis=1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class ThreeStageConfig(ByzantineSetting):
    """num_clusters: k; erm_steps, erm_lr: stage-1 full-batch GD; kmeans_iters: stage-2
    iterations; trim_frac: beta of stages 2 and 3; local: stage-3 lr = gamma; byz_frac and
    attack fields: see ``fedclust_jax.attacks`` (placement unused: clusters are fixed)."""

    num_clusters: int = 2
    erm_steps: int = 100
    erm_lr: float = 0.1
    kmeans_iters: int = 100
    trim_frac: float = 0.05
    local: LocalTraining = LocalTraining(steps=1, lr=0.01)
    chunk: int | None = None

    def __post_init__(self):
        check_clusters(self.num_clusters)
        if not 0 <= self.trim_frac < 0.5:
            raise ValueError(f"trim_frac (beta) must be in [0, 0.5), got {self.trim_frac}")
        if not 0 <= self.byz_frac < 1:
            raise ValueError(f"byz_frac must be in [0, 1), got {self.byz_frac}")
        LocalTraining(steps=self.erm_steps, lr=self.erm_lr)
        if self.kmeans_iters < 1:
            raise ValueError(f"kmeans_iters must be >= 1, got {self.kmeans_iters}")
        attack_from_config(self)
        check_chunk(self.chunk)


class ThreeStage:
    name = "three-stage"
    clusters_clients = True

    def __init__(self, model, cfg: ThreeStageConfig = ThreeStageConfig()):
        self.model, self.cfg = model, cfg
        self.attack = attack_from_config(cfg)

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)
        num_byzantine(data.num_clients, self.cfg.byz_frac)

    def init(self, key, data, params=None) -> ClusterState:
        """Stages 1 and 2; ``params`` (one model) overrides the common ERM start."""
        cfg, n, k = self.cfg, data.num_clients, self.cfg.num_clusters
        byz = byzantine_mask(n, cfg.byz_frac)
        start = self.model.init(key) if params is None else params
        keys = client_keys(jax.random.fold_in(key, 1), jnp.arange(n, dtype=jnp.int32))
        y = self.attack.flip_labels(data.y, byz, data.num_classes)
        erm_cfg = LocalTraining(steps=cfg.erm_steps, lr=cfg.erm_lr)
        erm = map_clients(lambda x, yy, c, kk: local_train(self.model, erm_cfg, start, x, yy, c, kk,
                                                            cfg.erm_lr),
                          data.x, y, data.count, keys, chunk=cfg.chunk)
        erm = self.attack.corrupt(jax.random.fold_in(key, 2), erm, jnp.zeros((n,), jnp.int32),
                                  byz, 1, num_byzantine(n, cfg.byz_frac))
        centers, labels = trimmed_kmeans(jax.random.fold_in(key, 3), flatten_stacked(erm), k,
                                         cfg.trim_frac, cfg.kmeans_iters)
        return ClusterState(params=_unflatten(centers, start, k), assign=labels,
                            round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        cfg, n = self.cfg, data.num_clients
        byz = byzantine_mask(n, cfg.byz_frac)
        y = self.attack.flip_labels(data.y, byz, data.num_classes)
        grads = byzantine_gradients(self.model, cfg.local, self.attack, jax.random.fold_in(key, 2),
                                    state.params, state.assign, data.x, y, data.count,
                                    client_keys(key, jnp.arange(n, dtype=jnp.int32)), byz,
                                    num_byz=num_byzantine(n, cfg.byz_frac), chunk=cfg.chunk)
        zeros = jax.tree.map(jnp.zeros_like, state.params)
        agg = cluster_trimmed_mean(grads, state.assign, zeros, cfg.trim_frac)
        lr = cfg.local.lr_at(state.round)
        params = jax.tree.map(lambda p, g: p - lr * g, state.params, agg)
        return state.replace(params=params, round=state.round + 1), {}

    def objective(self, state, data):
        loss, _ = loss_matrix(self.model, state.params, data.x, data.y, data.count, chunk=self.cfg.chunk)
        return loss.min(axis=1).mean()

    def evaluate(self, state, data) -> dict:
        return dict(evaluate_clusters(self.model, state.params, state.assign, data,
                                      chunk=self.cfg.chunk),
                    assign=state.assign, cluster_params=state.params)
