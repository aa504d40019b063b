"""One-shot clustering, the IFCA paper's Algorithm 1 baseline.

1. every client fits its own model (local ERM, approximated by ``erm_steps`` full-batch
   local steps from one common initialisation);
2. the server runs k-means (k-means++ seeding) once on the flattened local models;
3. per found cluster, FedAvg with that clustering frozen, started from the cluster's mean
   local model.

Assignment errors are never corrected (the drawback the paper names).

features="logreg" (the authors' FEMNIST code): step 1 fits every client's multinomial
logistic regression on its raw inputs instead ([C, D] coefficients, full-batch GD at
1 / (a Lipschitz bound of the loss), L2 strength as sklearn's default C = 1, rows of classes
the client lacks set to 0), k-means runs on those, and the clusters' models start from K
fresh initialisations (or the pre-trained model, ``pretrain_rounds``) of the task model.
pretrain_rounds, pretrain_participation, freeze_body: the code's FedAvg pre-training and
head-only training (``algorithms.ifca``), for the per-cluster FedAvg.

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
from fedclust_jax.bounds import Count, Fraction, Positive, Size
from fedclust_jax.config_check import check_config


FEATURES = ("model", "logreg")


@dataclasses.dataclass(frozen=True)
class OneShotConfig:
    """The IFCA paper's one-shot baseline's settings.

    num_clusters: k for k-means;
    erm_steps: local ERM steps (full batch); erm_lr: their step size;
    kmeans_iters: Lloyd iterations;
    features: what k-means clusters, "model" (the local models) or "logreg" (per-client
    logistic regression on raw inputs, the authors' FEMNIST code);
    local: the clients' training in the per-cluster FedAvg that follows (as IFCA option II);
    participation: fraction of clients per round of that FedAvg, in (0, 1];
    weighting: its mean, "equal" or "samples";
    chunk: clients per vectorized chunk ("auto": chosen per backend, None: all at once);
    pretrain_rounds: rounds of FedAvg pre-training of one model that starts all k (0 for none);
    pretrain_participation: fraction of clients per pre-training round;
    freeze_body: train the head only after pre-training.
    Static: participation (the number of participants, a shape)."""

    num_clusters: Size = 2
    erm_steps: Size = 100
    erm_lr: Positive = 0.1
    kmeans_iters: Size = 50
    local: LocalTraining = LocalTraining()
    participation: Fraction = 1.0
    weighting: typing.Literal["equal", "samples"] = "equal"
    chunk: Size | typing.Literal["auto"] | None = "auto"
    features: str = "model"
    pretrain_rounds: Count = 0
    pretrain_participation: Fraction = 1.0
    freeze_body: bool = False

    TRACED: typing.ClassVar[tuple[str, ...]] = ("erm_lr",)

    def __post_init__(self):
        check_config(self)
        check_weighting(self.weighting)
        check_chunk(self.chunk)
        if self.features not in FEATURES:
            raise ValueError(f"features must be one of {FEATURES}, got {self.features!r}")
        if self.pretrain_rounds and self.features == "model":
            raise ValueError("pretrain_rounds starts the clusters' models from a pre-trained one, "
                             "which features=\"model\" replaces by the local models' means; use "
                             "features=\"logreg\" or pretrain_rounds=0")


class OneShotKMeans(SamplesParticipants, ScoresClusters, Algorithm):
    """IFCA paper's one-shot baseline: local ERM, k-means once, per-cluster FedAvg."""

    name = "oneshot-kmeans"
    client_vectors = 1
    clusters_clients = True

    def __init__(self, model, cfg: OneShotConfig = OneShotConfig()):
        self.model, self.cfg = model, cfg
        self.fedavg = IFCA(model, IFCAConfig(
            num_clusters=cfg.num_clusters, option="model", local=cfg.local,
            participation=cfg.participation, weighting=cfg.weighting, assignment="fixed",
            chunk=cfg.chunk, pretrain_rounds=cfg.pretrain_rounds,
            pretrain_participation=cfg.pretrain_participation, freeze_body=cfg.freeze_body))

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)
        if self.cfg.features == "logreg" and data.num_classes < 2:
            raise ValueError('features="logreg" needs classification data; use features="model"')

    def init(self, key, data):
        """Local ERM for every client, k-means on the local models, cluster means (or, with
        features="logreg", k-means on the logistic-regression coefficients, fresh models)."""
        k_init, k_erm, k_means = jax.random.split(key, 3)
        if self.cfg.features == "logreg":
            coef = jax.lax.map(lambda a: logreg_coefficients(*a, data.num_classes, self.cfg.erm_steps),
                               (data.x, data.y, data.count))
            labels = kmeans(k_means, coef, self.cfg.num_clusters, iters=self.cfg.kmeans_iters)[1]
            # ``key`` itself: a pre-trained start is the one IFCA and Local draw from it
            return self.fedavg.init(key, data, assign=labels.astype(jnp.int32))
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


def logreg_coefficients(x, y, count, num_classes: int, steps: int):
    """One client's multinomial logistic regression on its raw inputs x [n, ...] (rows past
    ``count`` are padding): [C * D] coefficients after ``steps`` full-batch GD steps at
    1 / L (L = max ||x_i||^2 / 2 + 1 / n, a bound of the loss's curvature), L2 strength
    1 / (2 n) (sklearn's C = 1 over the mean loss), rows of absent classes set to 0."""
    x = x.reshape(x.shape[0], -1).astype(jnp.float32)
    mask = (jnp.arange(x.shape[0]) < count).astype(jnp.float32)
    n = jnp.maximum(count, 1).astype(jnp.float32)
    lip = 0.5 * jnp.max(jnp.sum(x * x, 1) * mask) + 1.0 / n
    onehot = jax.nn.one_hot(y, num_classes)

    def loss(w):
        logp = jax.nn.log_softmax(x @ w.T)
        return -jnp.sum(mask * jnp.sum(onehot * logp, 1)) / n + 0.5 * jnp.sum(w * w) / n

    w = jax.lax.fori_loop(0, steps, lambda _, w: w - jax.grad(loss)(w) / lip,
                          jnp.zeros((num_classes, x.shape[1]), jnp.float32))
    present = jnp.sum(onehot * mask[:, None], 0) > 0
    return jnp.where(present[:, None], w, 0.0).reshape(-1)
