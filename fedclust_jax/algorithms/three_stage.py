"""Three-Stage (Ghosh et al. 2019), the BR-IFCA paper's baseline.

Stage 1 (one shot, in ``init``): every machine computes its local ERM by ``erm_steps`` GD
  steps from one common initial model (Byzantine machines: on their own data; gradient
  attacks replace their ERM by the attack's vector).
Stage 2 (in ``init``): trimmed k-means on the flattened ERMs: k-means++ seeding, then
  ``kmeans_iters`` (paper: 100) iterations of nearest-center assignment and a per-cluster
  coordinate-wise trim_frac-trimmed mean as the center update (Ghosh et al.'s rule).
  The papers are silent on seeding. k-means++ (default) samples by squared distance, so it
  almost always seeds a center on far Byzantine ERMs and then merges two true clusters;
  ``kmeans_seeding="random"`` (k distinct uniform points) avoids that with probability
  about (1 - byz_frac)^k. ``kmeans_restarts`` R > 1: R seedings (a vmap axis), keeping the
  run of lowest trimmed cost, the sum of the smallest ceil((1 - trim_frac) N) squared
  distances to the nearest center.
Stage 3 (``round``, paper: 300 rounds): trimmed-mean GD within the fixed clusters,
  theta_j <- theta_j - gamma trmean_beta({g_i : i in cluster j}), g_i at theta_{c_i}.
Byzantine machines are the last round(byz_frac m); they keep their stage-2 cluster.

Every stage reads a client's data by id inside the chunk (``core.clients.map_client_data``),
so on ``FederatedViews`` no array of every client's examples is built. Memory: the N
stage-1 ERMs [N, P] (stage 2 clusters them) and the N stage-3 uploads [N, P] (trimmed mean).
"""

from __future__ import annotations

import dataclasses
import typing
import math

import jax
import jax.numpy as jnp
from jax import lax

from fedclust_jax.algorithms.base import (Algorithm, ClusterState, ScoresClusters, check_chunk, check_clusters, evaluate_clusters)
from fedclust_jax.attacks import ByzantineSetting, attack_from_config
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.attacks.rounds import byzantine_gradients, client_labels
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.kmeans import kmeans_plus_plus
from fedclust_jax.core.pairwise import sq_distances
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked, unflatten_stacked
from fedclust_jax.core.robust import cluster_trimmed_mean
from fedclust_jax.core.traced import concrete
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.core.keys import THREE_STAGE_KEYS
from fedclust_jax.bounds import Positive, Size, TrimFraction
from fedclust_jax.config_check import check_config


SEEDINGS = ("kmeans++", "random")


def seed_centers(key, points, k: int, seeding: str):
    """[k, P] initial centers: k-means++ or k distinct points drawn uniformly."""
    if seeding == "kmeans++":
        return kmeans_plus_plus(key, points, k)
    return points[jax.random.choice(key, points.shape[0], (k,), replace=False)]


def trimmed_kmeans(key, points, k: int, trim_frac: float, iters: int, init=None,
                   seeding: str = "kmeans++"):
    """(centers [k, P], labels int32[N]): Lloyd iterations with trimmed-mean centers from
    ``init`` [k, P] (default: ``seed_centers`` by ``seeding``)."""
    centers = seed_centers(key, points, k, seeding) if init is None else init

    def step(c, _):
        labels = jnp.argmin(sq_distances(points, c), axis=1).astype(jnp.int32)
        return cluster_trimmed_mean(points, labels, c, trim_frac), None

    centers = lax.scan(step, centers, None, length=iters)[0]
    return centers, jnp.argmin(sq_distances(points, centers), axis=1).astype(jnp.int32)


def trimmed_cost(points, centers, trim_frac: float):
    """Sum of the ceil((1 - trim_frac) N) smallest squared distances to the nearest center.
    A traced ``trim_frac`` keeps a mask over the sorted distances; its count is computed in
    float32 with a tolerance of 1e-6 N, so that float32's rounding of trim_frac does not
    add a point where (1 - trim_frac) N is an integer."""
    n = points.shape[0]
    d = jnp.sort(jnp.min(sq_distances(points, centers), axis=1))
    if concrete(trim_frac):
        return jnp.sum(d[:max(1, math.ceil((1 - trim_frac) * n - 1e-9))])
    keep = jnp.maximum(1, jnp.ceil((1 - trim_frac) * n - 1e-6 * n))
    return jnp.sum(jnp.where(jnp.arange(n) < keep, d, 0.0))


def best_trimmed_kmeans(key, points, k: int, trim_frac: float, iters: int, restarts: int,
                        seeding: str = "kmeans++"):
    """``trimmed_kmeans`` from ``restarts`` seedings (vmapped); the run of lowest
    ``trimmed_cost`` is kept."""
    if restarts == 1:
        return trimmed_kmeans(key, points, k, trim_frac, iters, seeding=seeding)
    centers, labels = jax.vmap(
        lambda kk: trimmed_kmeans(kk, points, k, trim_frac, iters, seeding=seeding))(
        jax.random.split(key, restarts))
    best = jnp.argmin(jax.vmap(lambda c: trimmed_cost(points, c, trim_frac))(centers))
    return centers[best], labels[best]


@dataclasses.dataclass(frozen=True)
class ThreeStageConfig(ByzantineSetting):
    """Three-Stage's settings (the Byzantine fields are ``ByzantineSetting``'s; placement is
    unused: clusters are fixed).

    num_clusters: number of clusters k;
    erm_steps: stage-1 full-batch GD steps; erm_lr: their step size;
    kmeans_iters: stage-2 iterations;
    kmeans_seeding: stage-2 seeding, "kmeans++" or "random";
    kmeans_restarts: stage-2 seedings, the run of best trimmed cost kept;
    trim_frac: beta of stages 2 and 3;
    local: stage-3 lr = gamma;
    chunk: clients per vectorized chunk ("auto": chosen per backend, None: all at once).
    Static: byz_frac (which clients are Byzantine, a count)."""

    num_clusters: Size = 2
    erm_steps: Size = 100
    erm_lr: Positive = 0.1
    kmeans_iters: Size = 100
    kmeans_seeding: str = "kmeans++"
    kmeans_restarts: Size = 1
    trim_frac: TrimFraction = 0.05
    local: LocalTraining = LocalTraining(steps=1, lr=0.01)
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("erm_lr", "trim_frac") + ByzantineSetting.TRACED

    def __post_init__(self):
        check_config(self)
        if self.kmeans_seeding not in SEEDINGS:
            raise ValueError(f"kmeans_seeding must be one of {SEEDINGS}, got {self.kmeans_seeding!r}")
        attack_from_config(self)
        check_chunk(self.chunk)


class ThreeStage(ScoresClusters, Algorithm):
    """Three-Stage (Ghosh et al., 2019): local ERM, trimmed k-means, trimmed-mean GD."""

    name = "three-stage"
    client_vectors = 1
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
        keys = client_keys(THREE_STAGE_KEYS.key(key, "clients"), jnp.arange(n, dtype=jnp.int32))
        erm_cfg = LocalTraining(steps=cfg.erm_steps, lr=cfg.erm_lr)

        def client_erm(i, x, y, count, ki):
            y = client_labels(self.attack, y, byz[i], data.num_classes)
            return local_train(self.model, erm_cfg, start, x, y, count, ki, cfg.erm_lr)

        erm = map_client_data(client_erm, data, None, keys, chunk=cfg.chunk)
        erm = self.attack.corrupt(THREE_STAGE_KEYS.key(key, "attack"), erm, jnp.zeros((n,), jnp.int32),
                                  byz, 1, num_byzantine(n, cfg.byz_frac))
        centers, labels = best_trimmed_kmeans(THREE_STAGE_KEYS.key(key, "kmeans"), flatten_stacked(erm), k,
                                              cfg.trim_frac, cfg.kmeans_iters, cfg.kmeans_restarts,
                                              cfg.kmeans_seeding)
        return ClusterState(params=unflatten_stacked(centers, erm), assign=labels,
                            round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        cfg, n = self.cfg, data.num_clients
        byz = byzantine_mask(n, cfg.byz_frac)
        grads = byzantine_gradients(self.model, cfg.local, self.attack, THREE_STAGE_KEYS.key(key, "attack"),
                                    state.params, state.assign, data,
                                    client_keys(key, jnp.arange(n, dtype=jnp.int32)), byz,
                                    num_byz=num_byzantine(n, cfg.byz_frac), chunk=cfg.chunk)
        zeros = jax.tree.map(jnp.zeros_like, state.params)
        agg = cluster_trimmed_mean(grads, state.assign, zeros, cfg.trim_frac)
        lr = cfg.local.lr_at(state.round)
        params = jax.tree.map(lambda p, g: p - lr * g, state.params, agg)
        return state.replace(params=params, round=state.round + 1), {}

    def objective(self, state, data):
        loss, _ = loss_matrix_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)
        return loss.min(axis=1).mean()

    def evaluate(self, state, data) -> dict:
        return dict(evaluate_clusters(self.model, state.params, state.assign, data,
                                      chunk=self.cfg.chunk),
                    assign=state.assign, cluster_params=state.params)
