"""BR-IFCA (Tao, Yang, Kulkarni), Algorithm 1: Byzantine-robust IFCA.

Every round, with all m machines:
  normal i:    jhat_i = argmin_j F_i(theta_j) (full local loss, ties to the lowest index),
               g_i = grad F_i(theta_{jhat_i})
  Byzantine b: jhat_b, g_b from the attack (``fedclust_jax.attacks``)
  theta_j <- Proj(theta_j - gamma * agg({g_i : jhat_i = j}))
agg: coordinate-wise median (option I) or beta-trimmed mean (option II, beta = trim_frac,
floor(beta |G_j|) trimmed per side), or any rule of ``core.robust.RULES`` for comparison.
An empty cluster is not updated.

step="paper": theta_j - gamma * agg (the paper). step="ifca": theta_j - gamma (|G_j| / m) agg,
the IFCA code's scaling (the sum of assigned gradients divided by all m); with agg = mean
(or trim_frac = 0) and no Byzantine machine this is exactly IFCA option I.
Byzantine machines are the last round(byz_frac * m) (``attacks.byzantine_mask``).
Projection onto the ball of radius ``projection_radius`` (None: none, as the code).
init="model": the model's own initialisation; "unit_bernoulli": every cluster model a
Bernoulli(0.5) vector of norm 1 (the authors' code, for linear models); "near_truth":
theta_j = theta*_j + init_radius u_j, u_j a uniform random unit vector (the theory's good
initialisation; needs the data's true parameters and a model with one parameter array).

Memory: the robust rules need every upload at once: O(m*P) gradients (plus the sort's
working copy) and chunk*(K + P + activations); the data arrays are read in place (all m
machines participate, nothing is gathered).
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.base import (Algorithm, ClusterState, ScoresClusters, check_chunk, check_clusters, score_clusters)
from fedclust_jax.attacks import ByzantineSetting, attack_from_config
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.attacks.rounds import byzantine_assign, byzantine_gradients
from fedclust_jax.core.losses import loss_matrix_ids, train_test_loss_matrices
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.robust import MEDIANS, METHODS, check_rule, cluster_aggregate
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.core.keys import BRIFCA_KEYS, BRIFCA_INIT_KEYS
from fedclust_jax.bounds import BelowOne, Count, NonNegative, Positive, Size, TrimFraction
from fedclust_jax.config_check import check_config

STEPS = ("paper", "ifca")
INITS = ("model", "unit_bernoulli", "near_truth")


def near_truth(params, truth, key, radius):
    """The one parameter array of ``params`` [K, ...] set to ``truth`` [K, ...] plus
    ``radius`` times a uniform random unit vector per cluster."""
    leaves, tree = jax.tree.flatten(params)
    if len(leaves) != 1 or truth is None or leaves[0].shape != truth.shape:
        raise ValueError('init="near_truth" needs data with true parameters of the shape of '
                         "a one-array model's [K, ...] parameters; use init=\"model\"")
    u = jax.random.normal(key, truth.shape).reshape(truth.shape[0], -1)
    u = (u / jnp.linalg.norm(u, axis=1, keepdims=True)).reshape(truth.shape)
    return jax.tree.unflatten(tree, [(truth + radius * u).astype(leaves[0].dtype)])


def robust_init(model, key, k: int, init: str, truth=None, radius: float = 0.0):
    """[K, ...] initial cluster params (see module docstring for ``init``; ``truth`` and
    ``radius``: "near_truth"'s theta* [K, ...] and offset norm)."""
    params = jax.vmap(model.init)(jax.random.split(key, k))
    if init == "model":
        return params
    if init == "near_truth":
        return near_truth(params, truth, BRIFCA_INIT_KEYS.key(key, "noise"), radius)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(BRIFCA_INIT_KEYS.key(key, "noise"), len(leaves))
    out = []
    for kk, a in zip(keys, leaves):
        b = jax.random.bernoulli(kk, 0.5, (8,) + a.shape).astype(jnp.float32)
        b = b.reshape(8, k, -1)
        first = jnp.argmax(b.sum(-1) > 0, axis=0)
        b = b[first, jnp.arange(k)]
        b = b / jnp.maximum(jnp.linalg.norm(b, axis=1, keepdims=True), 1e-30)
        out.append(b.reshape(a.shape).astype(a.dtype))
    return jax.tree.unflatten(tree, out)


def project(params, radius):
    """Each cluster's params (all leaves jointly) projected onto the l2 ball of ``radius``."""
    if radius is None:
        return params
    sq = sum(jnp.sum(a.reshape(a.shape[0], -1) ** 2, axis=1) for a in jax.tree.leaves(params))
    f = jnp.minimum(1.0, radius / jnp.maximum(jnp.sqrt(sq), 1e-30))
    return jax.tree.map(lambda a: a * f.reshape((-1,) + (1,) * (a.ndim - 1)), params)


@dataclasses.dataclass(frozen=True)
class BRIFCAConfig(ByzantineSetting):
    """BR-IFCA's settings (the Byzantine fields are ``ByzantineSetting``'s).

    num_clusters: number of cluster models k;
    aggregator: "median" (option I), "trimmed_mean" (option II) or another
    ``core.robust.RULES`` entry; trim_frac: beta, the fraction trimmed at each end;
    median: "mid" (paper) or "lower" (the code's torch.median);
    local: lr = gamma (code 0.01), batch_size None = full local loss;
    step: server step, "paper" (theta - gamma agg) or "ifca" (scaled by |G_j| / m);
    init: cluster models' start, "model", "unit_bernoulli" or "near_truth";
    init_radius: "near_truth"'s offset norm;
    projection_radius: radius of the ball each step is projected on (None: no projection);
    krum_frac: fraction of uploads Krum treats as Byzantine; clip_tau: centered clipping's
    radius tau; clip_iters: centered clipping's iterations; gm_iters: Weiszfeld iterations
    of the geometric median; method: coordinate-wise sorting backend ("auto", "packed",
    "masked" or "numpy"); chunk: clients per vectorized chunk ("auto": chosen per backend, None:
    all at once);
    static: byz_frac (which clients are Byzantine, a count)."""

    num_clusters: Size = 2
    aggregator: str = "trimmed_mean"
    trim_frac: TrimFraction = 0.05
    median: str = "mid"
    local: LocalTraining = LocalTraining(steps=1, lr=0.01)
    step: str = "paper"
    init: str = "model"
    init_radius: NonNegative = 0.25
    projection_radius: Positive | None = None
    krum_frac: BelowOne = 0.1
    clip_tau: float = 1.0
    clip_iters: Count = 1
    gm_iters: Count = 10
    method: str = "auto"
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = (
        ("trim_frac", "projection_radius", "krum_frac", "clip_tau") + ByzantineSetting.TRACED)

    def __post_init__(self):
        check_config(self)
        check_rule(self.aggregator)
        if self.median not in MEDIANS:
            raise ValueError(f"median must be one of {MEDIANS}, got {self.median!r}")
        if self.step not in STEPS:
            raise ValueError(f"step must be one of {STEPS}, got {self.step!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        attack_from_config(self)
        check_chunk(self.chunk)


def aggregate_uploads(cfg, grads, assign, params):
    """Per-cluster robust aggregate [K, ...] of the uploads; zeros for empty clusters."""
    zeros = jax.tree.map(jnp.zeros_like, params)
    return cluster_aggregate(cfg.aggregator, grads, assign, zeros, trim_frac=cfg.trim_frac,
                             median=cfg.median, krum_frac=cfg.krum_frac, clip_tau=cfg.clip_tau,
                             clip_iters=cfg.clip_iters, gm_iters=cfg.gm_iters, method=cfg.method)


def check_population(cfg, num_clients: int):
    """Errors before compute: K > clients, or Byzantine machines >= machines."""
    check_clusters(cfg.num_clusters, num_clients)
    num_byzantine(num_clients, cfg.byz_frac)


class BRIFCA(ScoresClusters, Algorithm):
    """BR-IFCA (Tao et al.): IFCA option I with robust per-cluster aggregation, attacks."""

    name = "brifca"
    fused_end_of_run = True
    client_vectors = 1
    clusters_clients = True

    def __init__(self, model, cfg: BRIFCAConfig = BRIFCAConfig()):
        self.model, self.cfg = model, cfg
        self.attack = attack_from_config(cfg)

    def check_data(self, data):
        check_population(self.cfg, data.num_clients)
        if self.cfg.init == "near_truth":
            near_truth(jax.eval_shape(lambda: jax.vmap(self.model.init)(
                jax.random.split(jax.random.key(0), self.cfg.num_clusters))),
                data.true_params, jax.random.key(0), 0.0)

    def init(self, key, data, params=None) -> ClusterState:
        if params is None:
            params = robust_init(self.model, key, self.cfg.num_clusters, self.cfg.init,
                                 data.true_params, self.cfg.init_radius)
        return ClusterState(params=params, assign=jnp.full((data.num_clients,), -1, jnp.int32),
                            round=jnp.zeros((), jnp.int32))

    def round(self, state: ClusterState, key, data):
        n = data.num_clients
        return self.step(state, key, data, byzantine_mask(n, self.cfg.byz_frac),
                         num_byzantine(n, self.cfg.byz_frac))

    def step(self, state: ClusterState, key, data, byz, num_byz):
        """One round with an explicit Byzantine mask bool[m] and count (may be traced, so
        one compiled program serves several Byzantine fractions)."""
        cfg, n = self.cfg, data.num_clients
        ids = jnp.arange(n, dtype=jnp.int32)
        assign, loss = byzantine_assign(self.model, self.attack, state.params, data, byz,
                                        chunk=cfg.chunk)
        grads = byzantine_gradients(self.model, cfg.local, self.attack, BRIFCA_KEYS.key(key, "attack"),
                                    state.params, assign, data, client_keys(key, ids), byz,
                                    num_byz=num_byz, chunk=cfg.chunk)
        agg = aggregate_uploads(cfg, grads, assign, state.params)
        lr = cfg.local.lr_at(state.round)
        if cfg.step == "ifca":
            frac = jnp.sum(jax.nn.one_hot(assign, cfg.num_clusters), axis=0) / n
            agg = jax.tree.map(lambda g: g * frac.reshape((-1,) + (1,) * (g.ndim - 1)), agg)
        params = project(jax.tree.map(lambda p, g: p - lr * g, state.params, agg),
                         cfg.projection_radius)
        honest_loss = jnp.where(byz, jnp.nan, loss.min(axis=1))
        return (ClusterState(params=params, assign=assign, round=state.round + 1),
                dict(train_loss=jnp.nanmean(honest_loss)))

    def _assign(self, params, data):
        loss, _ = loss_matrix_ids(self.model, params, data, None, chunk=self.cfg.chunk)
        return jnp.argmin(loss, axis=1).astype(jnp.int32), loss

    def objective(self, state, data):
        """Mean over honest machines of min_j F_i(theta_j)."""
        return self._honest_mean(self._assign(state.params, data)[1], data)

    def _honest_mean(self, loss, data):
        """Mean over honest machines of min_j loss[i, j] (loss [N, K])."""
        byz = byzantine_mask(data.num_clients, self.cfg.byz_frac)
        loss = loss.min(axis=1)
        return jnp.sum(jnp.where(byz, 0.0, loss)) / jnp.maximum(jnp.sum(~byz), 1)

    def evaluate(self, state, data) -> dict:
        """Every machine re-assigned on its training data, in the pass that scores the test data."""
        return self.objective_and_evaluate(state, data)[1]

    def objective_and_evaluate(self, state, data):
        """(``objective``, ``evaluate``) from one pass over the clients (training and test
        data): the training-loss matrix is computed once for both."""
        train, loss, acc = train_test_loss_matrices(self.model, state.params, data,
                                                    chunk=self.cfg.chunk)
        assign = jnp.argmin(train, axis=1).astype(jnp.int32)
        return self._honest_mean(train, data), dict(
            score_clusters(loss, acc, assign), assign=assign, cluster_params=state.params)
