"""FedSoft (Ruan and Joe-Wong 2022) as run by the SR-FCA authors: soft-clustered IFCA.

Importance weights u_ik [N, K]: the fraction of client i's training samples on which
cluster k's model has the lowest loss, floored at sigma and renormalised to sum to 1.
Each round, for every cluster k, S clients are drawn without replacement with probability
proportional to u_ik * n_i; each trains ``local.steps`` steps from theta_k and theta_k
becomes the plain mean of their models (the draw already weights by u_ik n_i). No proximal
term (as the SR-FCA authors' code). Client i is evaluated with cluster argmax_k u_ik.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, ScoresClusters, check_chunk, check_clusters, evaluate_clusters)
from fedclust_jax.core.aggregate import cluster_mean
from fedclust_jax.core.clients import map_client_data, map_clients
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import take
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.data.federated import example_mask
from fedclust_jax.core.keys import FEDSOFT_KEYS
from fedclust_jax.bounds import Probability, Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class FedSoftConfig:
    """num_clusters: number of cluster models K; sigma: importance floor in [0, 1/K]; clients_per_cluster: S
    clients drawn per cluster per round; local: client training; chunk: clients per chunk."""

    num_clusters: Size = 2
    sigma: Probability = 0.05
    clients_per_cluster: Size = 10
    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("sigma",)

    def __post_init__(self):
        check_config(self)
        if not self.sigma <= 1.0 / self.num_clusters:
            raise ValueError(f"sigma must be in [0, 1/K = {1.0 / self.num_clusters:.3g}], "
                             f"got {self.sigma}")
        check_chunk(self.chunk)


@struct.dataclass
class FedSoftState:
    """params [K, ...]; importance [N, K] (u_ik, rows sum to 1); round."""

    params: object
    importance: jax.Array
    round: jax.Array


def importance_weights(example_losses: jax.Array, mask: jax.Array, sigma: float) -> jax.Array:
    """u [N, K] from per-example losses [N, K, n] and real-example mask [N, n]: the share
    of each client's examples whose lowest-loss model is k (ties to the lowest k), floored
    at sigma, rows renormalised to 1."""
    k = example_losses.shape[1]
    best = jax.nn.one_hot(jnp.argmin(example_losses, axis=1), k, axis=1)       # [N, K, n]
    share = (best * mask[:, None, :]).sum(-1) / jnp.maximum(mask.sum(-1), 1)[:, None]
    u = jnp.maximum(share, sigma)
    return u / u.sum(1, keepdims=True)


class FedSoft(ScoresClusters, Algorithm):
    """FedSoft (Ruan and Joe-Wong): soft cluster importance weights, floored at sigma."""

    name = "fedsoft"
    clusters_clients = True

    def __init__(self, model, cfg: FedSoftConfig = FedSoftConfig()):
        self.model, self.cfg = model, cfg

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)

    def init(self, key, data) -> FedSoftState:
        k, n = self.cfg.num_clusters, data.num_clients
        params = jax.vmap(self.model.init)(jax.random.split(key, k))
        return FedSoftState(params=params, importance=jnp.full((n, k), 1.0 / k),
                            round=jnp.zeros((), jnp.int32))

    def importance(self, params, data):
        def per_client(i, x, y, c):
            return jax.vmap(lambda p: self.model.example_losses(p, x, y))(params)   # [K, n]
        losses = map_client_data(per_client, data, None, chunk=self.cfg.chunk)
        return importance_weights(losses, example_mask(data.count, data.n_max), self.cfg.sigma)

    def round(self, state, key, data):
        cfg, n, k = self.cfg, data.num_clients, self.cfg.num_clusters
        s = min(cfg.clients_per_cluster, n)
        u = self.importance(state.params, data)
        logits = jnp.log(u * data.count[:, None].astype(jnp.float32) + 1e-30).T      # [K, N]
        gumbel = jax.random.gumbel(FEDSOFT_KEYS.key(key, "cluster_draws"), (k, n))
        _, ids = jax.lax.top_k(logits + gumbel, s)                                   # [K, S]
        flat = ids.reshape(-1)
        owner = jnp.repeat(jnp.arange(k, dtype=jnp.int32), s)
        lr = cfg.local.lr_at(state.round)
        keys = jax.vmap(lambda c, i: jax.random.fold_in(c, i))(
            client_keys(key, flat), owner)
        trained = map_clients(
            lambda i, p, kk: local_train(self.model, cfg.local, p, *data.train_client(i), kk, lr),
            flat, take(state.params, owner), keys, chunk=cfg.chunk)
        params = cluster_mean(trained, owner, state.params)
        return FedSoftState(params=params, importance=u, round=state.round + 1), dict(
            importance_max=u.max(1).mean())

    def objective(self, state, data):
        loss, _ = loss_matrix_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)
        return loss.min(1).mean()

    def evaluate(self, state, data) -> dict:
        u = self.importance(state.params, data)
        assign = jnp.argmax(u, axis=1).astype(jnp.int32)
        ev = evaluate_clusters(self.model, state.params, assign, data, chunk=self.cfg.chunk)
        return dict(ev, assign=assign, importance=u, cluster_params=state.params)
