"""One-shot clustering, the IFCA paper's Algorithm 1 baseline.

1. every client fits its own model (local ERM, approximated by ``erm_steps`` full-batch
   local steps from one common initialisation);
2. the server runs k-means (k-means++ seeding) once on the flattened local models;
3. per found cluster, FedAvg with that clustering frozen, started from the cluster's mean
   local model.

Assignment errors are never corrected (the drawback the paper names).

Memory: ``init`` holds the N local models for k-means, O(N*P) (data read by id); the
per-cluster FedAvg rounds are streamed IFCA rounds (fixed assignment): O(K*P +
chunk*(P + activations)) plus the data. The authors' FEMNIST
code fits liblinear logistic regression in step 1; here step 1 uses the task's own model.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.base import (Algorithm, SamplesParticipants, ScoresClusters, check_chunk, check_clusters, check_weighting)
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.aggregate import cluster_mean
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.train import LocalTraining, local_train


@dataclasses.dataclass(frozen=True)
class OneShotConfig:
    """num_clusters: k for k-means; erm_steps / erm_lr: the local ERM (full batch);
    kmeans_iters: Lloyd iterations; local, participation, weighting, chunk: the per-cluster
    FedAvg that follows (as IFCA option II);
    static: participation (the number of participants, a shape)."""

    num_clusters: int = 2
    erm_steps: int = 100
    erm_lr: float = 0.1
    kmeans_iters: int = 50
    local: LocalTraining = LocalTraining()
    participation: float = 1.0
    weighting: str = "equal"
    chunk: int | str | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("erm_lr",)

    def __post_init__(self):
        check_clusters(self.num_clusters)
        LocalTraining(steps=self.erm_steps, lr=self.erm_lr)
        if self.kmeans_iters < 1:
            raise ValueError(f"kmeans_iters must be >= 1, got {self.kmeans_iters}")
        check_weighting(self.weighting)
        check_chunk(self.chunk)


class OneShotKMeans(SamplesParticipants, ScoresClusters, Algorithm):
    name = "oneshot-kmeans"
    client_vectors = 1
    clusters_clients = True

    def __init__(self, model, cfg: OneShotConfig = OneShotConfig()):
        self.model, self.cfg = model, cfg
        self.fedavg = IFCA(model, IFCAConfig(
            num_clusters=cfg.num_clusters, option="model", local=cfg.local,
            participation=cfg.participation, weighting=cfg.weighting, assignment="fixed",
            chunk=cfg.chunk))

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)

    def init(self, key, data):
        """Local ERM for every client, k-means on the local models, cluster means."""
        k_init, k_erm, k_means = jax.random.split(key, 3)
        erm = LocalTraining(steps=self.cfg.erm_steps, lr=self.cfg.erm_lr)
        start = self.model.init(k_init)
        n = data.num_clients
        local = map_client_data(
            lambda i, x, y, c, k: local_train(self.model, erm, start, x, y, c, k, erm.lr),
            data, None, client_keys(k_erm, jnp.arange(n)), chunk=self.cfg.chunk)
        _, labels, _ = kmeans(k_means, flatten_stacked(local), self.cfg.num_clusters,
                              iters=self.cfg.kmeans_iters)
        previous = jax.tree.map(lambda a: jnp.broadcast_to(a, (self.cfg.num_clusters,) + a.shape), start)
        centres = cluster_mean(local, labels, previous)
        return self.fedavg.init(None, data, params=centres, assign=labels)

    def round(self, state, key, data):
        return self.fedavg.round(state, key, data)

    def objective(self, state, data):
        return self.fedavg.objective(state, data)

    def evaluate(self, state, data):
        return self.fedavg.evaluate(state, data)
