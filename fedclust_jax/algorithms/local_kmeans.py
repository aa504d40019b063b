"""Local-KMeans (Ghosh et al. 2019, as a baseline of SR-FCA): k-means on local models.

Every client trains alone (``rounds`` x ``local.steps`` steps) from one common init
(``init="common"``, the paper's reading) or from its own random init (``init=
"independent"``, the SR-FCA authors' code, whose local models are ONE_SHOT's); at
evaluation the server runs k-means (k-means++ seeding, best of ``n_init``) on the flattened
local weights [N, P]. Cluster j's model is its centroid (the average of its members'
weights), with no further training, as the SR-FCA authors' code; client i is scored
with the centroid of its cluster.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, ScoresClusters, check_chunk, check_clusters, evaluate_clusters)
from fedclust_jax.algorithms.local import Local, LocalConfig, LocalState
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.oneshot import ONE_SHOT_INITS
from fedclust_jax.core.pytree import flatten_stacked, unflatten_stacked
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.bounds import Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class LocalKMeansConfig:
    """num_clusters: number of clusters k; kmeans_iters: Lloyd iterations; n_init: k-means restarts (lowest
    inertia kept); init: "common" (one w_0 for every client) or "independent" (a random
    init per client); local: the clients' training per round; chunk: clients per chunk."""

    num_clusters: Size = 2
    kmeans_iters: Size = 50
    n_init: Size = 4
    init: str = "common"
    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_config(self)
        if self.init not in ONE_SHOT_INITS:
            raise ValueError(f"init must be one of {ONE_SHOT_INITS}, got {self.init!r}")
        check_chunk(self.chunk)


@struct.dataclass
class LocalKMeansState:
    params: object  # [N, ...] local models
    key: jax.Array  # for the k-means seeding at evaluation
    round: jax.Array


class LocalKMeans(ScoresClusters, Algorithm):
    """Local-KMeans: k-means on local models, centroid models."""

    name = "local-kmeans"
    clusters_clients = True

    def __init__(self, model, cfg: LocalKMeansConfig = LocalKMeansConfig()):
        self.model, self.cfg = model, cfg
        self.local = Local(model, LocalConfig(local=cfg.local, chunk=cfg.chunk))

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)

    def init(self, key, data) -> LocalKMeansState:
        k_init, k_means = jax.random.split(key)
        local = self.local.init(k_init, data)
        if self.cfg.init == "independent":
            keys = jax.random.split(k_init, data.num_clients)
            local = local.replace(params=jax.vmap(self.model.init)(keys))
        return LocalKMeansState(params=local.params, key=k_means, round=local.round)

    def round(self, state, key, data):
        """One round of ``Local``: every client trains alone."""
        local, metrics = self.local.round(LocalState(params=state.params, round=state.round), key, data)
        return state.replace(params=local.params, round=local.round), metrics

    def cluster(self, state):
        """(centroid params [k, ...], labels int32[N]) of k-means on the local weights."""
        flat = flatten_stacked(state.params)
        keys = jax.random.split(state.key, self.cfg.n_init)
        centres, labels, inertia = jax.vmap(
            lambda k: kmeans(k, flat, self.cfg.num_clusters, iters=self.cfg.kmeans_iters))(keys)
        best = jnp.argmin(inertia)
        like = jax.tree.map(lambda a: a[: self.cfg.num_clusters], state.params)
        return unflatten_stacked(centres[best], like), labels[best]

    def objective(self, state, data):
        return self.local.objective(LocalState(params=state.params, round=state.round), data)

    def evaluate(self, state, data) -> dict:
        centroids, labels = self.cluster(state)
        ev = evaluate_clusters(self.model, centroids, labels, data, chunk=self.cfg.chunk)
        return dict(ev, assign=labels, cluster_params=centroids)
