"""ONE_SHOT-IFCA (a baseline of SR-FCA): IFCA started from SR-FCA's ONE_SHOT clustering.

``init`` runs ONE_SHOT (core.oneshot); its C clusters fix K = C, and cluster c's starting
model is the average of its members' ONE_SHOT models (all trained from one common init).
Each round is an IFCA round (model averaging, option II) over the active clusters: every
participant joins the active model of lowest training loss, trains ``local.steps`` steps
from it, and each cluster's model becomes the mean of its participants' models (an empty
cluster keeps its model). Clusters live on a static ``k_max`` axis with an ``active`` mask.

Memory: ``init`` (ONE_SHOT) holds the N local models and the [N, N] distances; rounds are
streamed (``core.train.cluster_pass``): O(K_max*P + chunk*(K_max + P + activations)) plus
the data.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, SamplesParticipants, check_chunk, score_clusters)
from fedclust_jax.core.aggregate import cluster_mean, mean_from_sums
from fedclust_jax.core.losses import loss_matrix_ids, train_test_loss_matrices
from fedclust_jax.core.oneshot import check_graph_options, one_shot, replace_steps
from fedclust_jax.core.participation import participants
from fedclust_jax.core.train import LocalTraining, cluster_pass
from fedclust_jax.bounds import Fraction, NonNegative, Probability, Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class OneShotIFCAConfig:
    """ONE_SHOT options as ``SRFCAConfig``. lam: threshold lambda; lam_quantile: lambda =
    this quantile of the pairwise distances instead; t: minimum ONE_SHOT component size;
    one_shot_steps: T local steps of ONE_SHOT; k_max: size of the cluster axis (None =
    N // t); metric: ONE_SHOT's distance, "cross_loss" or "l2"; graph: threshold-graph
    clustering, "components" (paper) or "pivot" (authors' code); participation: fraction of clients per IFCA round; local: the
    clients' training (ONE_SHOT uses it with one_shot_steps steps); chunk: clients per chunk;
    static: lam_quantile (an index into the sorted distances), participation (a shape)."""

    lam: NonNegative | None = 1.0
    lam_quantile: Probability | None = None
    t: Size = 2
    metric: str = "cross_loss"
    graph: str = "components"
    one_shot_steps: Size = 100
    k_max: Size | None = None
    participation: Fraction = 1.0
    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lam",)

    def __post_init__(self):
        check_config(self)
        check_graph_options(lam=self.lam, lam_quantile=self.lam_quantile, t=self.t,
                            metric=self.metric, graph=self.graph)
        check_chunk(self.chunk)


@struct.dataclass
class OneShotIFCAState:
    """params [K_max, ...]; active bool[K_max]; assign int32[N]; round."""

    params: object
    active: jax.Array
    assign: jax.Array
    round: jax.Array


class OneShotIFCA(SamplesParticipants, Algorithm):
    """ONE_SHOT-IFCA: IFCA started from SR-FCA's ONE_SHOT clusters (K from it)."""

    name = "oneshot-ifca"
    fused_end_of_run = True
    client_vectors = 1
    pairwise_clients = True
    clusters_clients = True

    def models_scored(self, num_clients: int) -> int:
        """ONE_SHOT scores every client's data on every client's model: N."""
        return num_clients

    def __init__(self, model, cfg: OneShotIFCAConfig = OneShotIFCAConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> OneShotIFCAState:
        cfg, n = self.cfg, data.num_clients
        k = cfg.k_max or max(1, n // cfg.t)
        res = one_shot(key, self.model, data, local=replace_steps(cfg.local, cfg.one_shot_steps),
                       lam=cfg.lam, lam_quantile=cfg.lam_quantile, t=cfg.t, metric=cfg.metric,
                       graph=cfg.graph, k_max=k, chunk=cfg.chunk)
        w0 = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), res.w0)
        params = cluster_mean(res.local, res.labels, w0)
        active = jnp.zeros((k,), bool).at[jnp.where(res.labels >= 0, res.labels, k)].set(
            True, mode="drop")
        return OneShotIFCAState(params=params, active=active, assign=res.labels,
                                round=jnp.zeros((), jnp.int32))

    def assign(self, state, data, ids=None):
        """(assignment int32[M] among active clusters, masked loss matrix [M, K_max]) on the
        training data of clients ``ids`` (None: all N), read by id."""
        loss, _ = loss_matrix_ids(self.model, state.params, data, ids, chunk=self.cfg.chunk)
        loss = jnp.where(state.active[None, :], loss, jnp.inf)
        return jnp.argmin(loss, axis=1).astype(jnp.int32), loss

    def round(self, state, key, data):
        """One streamed IFCA option-II pass (``core.train.cluster_pass``) over the active
        clusters."""
        cfg, n = self.cfg, data.num_clients
        idx, keys = participants(key, n, cfg.participation)
        full = idx.shape[0] == n
        lr = cfg.local.lr_at(state.round)
        sums, totals, loss, assign = cluster_pass(self.model, cfg.local, state.params, data,
                                                  None if full else idx, keys, lr,
                                                  active=state.active, chunk=cfg.chunk)
        loss = jnp.where(state.active[None, :], loss, jnp.inf)
        params = mean_from_sums(state.params, sums, totals)
        new = state.replace(params=params,
                            assign=assign if full else state.assign.at[idx].set(assign),
                            round=state.round + 1)
        return new, dict(train_loss=loss.min(axis=1).mean(), num_clusters=state.active.sum())

    def objective(self, state, data):
        return self.assign(state, data)[1].min(axis=1).mean()

    def evaluate(self, state, data) -> dict:
        """Every client re-assigned among the active clusters on its training data, in the
        pass that scores the test data; "best" over the active clusters."""
        return self.objective_and_evaluate(state, data)[1]

    def objective_and_evaluate(self, state, data):
        """(``objective``, ``evaluate``) from one pass over the clients (training and test
        data): the training-loss matrix is computed once for both."""
        train, loss, acc = train_test_loss_matrices(self.model, state.params, data,
                                                    chunk=self.cfg.chunk)
        train = jnp.where(state.active[None, :], train, jnp.inf)
        assign = jnp.argmin(train, axis=1).astype(jnp.int32)
        ev = score_clusters(loss, acc, assign, active=state.active)
        return train.min(axis=1).mean(), dict(ev, assign=assign, cluster_params=state.params,
                                              num_clusters=jnp.sum(state.active))
