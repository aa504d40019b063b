"""IFCA (Ghosh et al.), Algorithm 2: iterative federated clustering.

Each round every participant picks the cluster model of lowest loss on its own training
data (ties to the lowest index) and uploads either its gradient at that model (option I,
"gradient") or its model after ``local.steps`` local steps (option II, "model").

Server (paper, and the authors' code):
  option I:  theta_j <- theta_j - (gamma / m) * sum_{i in M_t, s_i = j} g_i, m = ALL clients
             (not |M_t|, not |S_j|): cluster j's effective step is gamma |S_j| / m.
  option II: theta_j <- equal-weight mean of the assigned participants' models
             (weighting="samples" weights by sample count, as the code's FEMNIST runs).
An empty cluster keeps its params. With weight sharing the body (all parameter groups not
in ``model.head``) is averaged over all participants and only the heads per cluster; the
K models then share one body, so every loss of all K models on a batch (the cluster choice,
``objective``, ``evaluate``) runs the body once and the K heads on its features, for a
model that splits at its head (``Model.splits``; others run K full forward passes).

Memory: a round is one streamed pass (``core.train.cluster_pass``): every participant's
data is read once, by id, inside its chunk, to score the K models, train and add into
per-cluster sums. Live memory O(K*P + chunk*(K + P + activations)) plus the data and the
assignments int32[N]; no [M, P] array exists. The SR-FCA-code variants (``sequential``,
``clients_per_cluster``) hold every participant's trained model: O(M*P).

BatchNorm statistics (``models.resnet9.StatefulModel``; every option and variant, the
oracle included): ``ClusterState.model_state`` [K, ...] holds cluster j's statistics s_j.
A client carries s_{j_i} through its forward passes at its cluster's model: option II's
local steps, or option I's one gradient pass at theta_{j_i} (batch statistics of its real
rows, running averages updated once). The server sets s_j to the mean over the same members
with the same weights as the params: option II's weighting ("equal" or "samples"), option I
equal weights (its gradients' weights, normalised: s_j <- s_j + sum_{i in S_j} (s_i - s_j)
/ |S_j|). With weight sharing the body's statistics (leaves not under ``model.head``) are
shared like the body's params, the mean over all participants, and any head statistics per
cluster. Streamed: per-group sums of statistics deltas [G, S] next to the params' [G, P]
(G = K, or K + 1 with weight sharing), so a round's live memory is
O(G*(P + S) + chunk*(K + P + S + activations)); no [M, P] or [M, S] array. An empty
cluster keeps its statistics. Every loss (the cluster choice, ``evaluate``, ``objective``)
uses cluster j's running statistics (train=False, ``models.resnet9.running_view``).

A subclass changes the clients' local training without copying the round (an IFCA variant
with a proximal term toward the client's cluster model, ...): ``local_term`` and
``local_update`` are passed to every participant's local steps (``core.train``'s local-step
mechanism; option I takes the gradient of the loss plus the term). The pre-training and
warm start (below) are plain FedAvg.

The authors' FEMNIST code's pipeline (Table 2; off by default): ``pretrain_rounds`` rounds
of FedAvg of one whole model (``pretrain_participation`` of the clients a round, the same
local training and weighting) start all K models; ``warm_rounds`` rounds of a random-group
warm start follow (clients split at random into K equal groups, each group's model trained
by per-group FedAvg with ``warm_clients_per_cluster`` of its members a round); then IFCA.
``freeze_body``: only the head trains (the body's features carry no gradient, so SGD leaves
the pre-trained body as it is), in the warm start and in IFCA's rounds.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.base import (Algorithm, ClusterState, SamplesParticipants, ScoresClusters, check_chunk, check_clusters, check_weighting, client_weights, evaluate_clusters, score_clusters)
from fedclust_jax.config_check import check_config, check_model_state
from fedclust_jax.core.aggregate import cluster_mean, mean_from_sums, share_body
from fedclust_jax.core.clients import chain_clients, map_clients
from fedclust_jax.core.losses import loss_matrix, loss_matrix_ids, train_test_loss_matrices
from fedclust_jax.core.participation import (client_keys, pack_slots, participants,
                                              per_cluster_participants)
from fedclust_jax.core.pytree import head_mask, take
from fedclust_jax.core.train import (LocalTraining, cluster_pass, join_state, local_train,
                                     split_state)
from fedclust_jax.models.resnet9 import is_stateful, running_view
from fedclust_jax.core.keys import IFCA_INIT_KEYS, IFCA_KEYS
from fedclust_jax.bounds import Count, Fraction, Size

OPTIONS = ("gradient", "model")
ASSIGNMENTS = ("loss", "oracle", "fixed")


@dataclasses.dataclass(frozen=True)
class IFCAConfig:
    """num_clusters: number of cluster models k; option: "gradient" (I) or "model" (II); local: local training
    (option I uses only lr as gamma and batch_size); participation: fraction of clients per
    round in (0, 1]; weighting: option-II mean, "equal" (paper) or "samples";
    weight_sharing: average the body over all participants, heads per cluster;
    assignment: "loss" (IFCA), "oracle" (frozen to the true clusters: the known-cluster
    baseline) or "fixed" (frozen to the ``assign`` given to ``init``: per-cluster FedAvg
    after a one-shot clustering); chunk: clients per vectorized chunk ("auto": chosen per backend,
    None: all at once);
    sequential: (option II, the SR-FCA authors' code) a cluster's participants train one after another in
    random order on its one shared model and the cluster mean is over their checkpoints
    (``core.clients.chain_clients``);
    clients_per_cluster: (the SR-FCA authors' code, instead of ``participation``) every client is reassigned every round and S members
    of each cluster (all of a smaller one) train;
    pretrain_rounds: rounds of FedAvg pre-training of one whole model that starts all K
    (the authors' FEMNIST code, 0 for none); pretrain_participation: fraction of clients per
    pre-training round; warm_rounds: rounds of the random-group warm start after it (0 for
    none); warm_clients_per_cluster: members of each group that train per warm-start round
    (None: all); freeze_body: train the head only (the
    body as pre-trained);
    static: participation (the number of participants, a shape)."""

    num_clusters: Size = 2
    option: typing.Literal["gradient", "model"] = "model"
    local: LocalTraining = LocalTraining()
    participation: Fraction = 1.0
    weighting: typing.Literal["equal", "samples"] = "equal"
    weight_sharing: bool = False
    assignment: typing.Literal["loss", "oracle", "fixed"] = "loss"
    chunk: Size | typing.Literal["auto"] | None = "auto"
    sequential: bool = False
    clients_per_cluster: Size | None = None
    pretrain_rounds: Count = 0
    pretrain_participation: Fraction = 1.0
    warm_rounds: Count = 0
    warm_clients_per_cluster: Size | None = None
    freeze_body: bool = False

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_config(self)
        if self.option not in OPTIONS:
            raise ValueError(f"IFCA option must be one of {OPTIONS}, got {self.option!r}")
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {ASSIGNMENTS}, got {self.assignment!r}")
        check_weighting(self.weighting)
        check_chunk(self.chunk)
        if self.clients_per_cluster is not None and (
                self.participation != 1.0 or self.weight_sharing):
            raise ValueError("clients_per_cluster needs participation "
                             f"left at 1.0 and no weight sharing; got {self.clients_per_cluster!r}, "
                             f"participation {self.participation}, weight_sharing "
                             f"{self.weight_sharing}")
        if self.sequential and (self.option != "model" or self.weight_sharing):
            raise ValueError("sequential client training is defined for option=\"model\" "
                             "without weight sharing; set sequential=False")
        if self.warm_rounds and (self.assignment != "loss" or self.weight_sharing):
            raise ValueError("warm_rounds (the random-group warm start) is defined for "
                             "assignment=\"loss\" without weight sharing; set warm_rounds=0")

    def model_state_refusal(self):
        """None: every IFCA configuration carries a model's BatchNorm statistics (both
        options, with or without weight sharing; ``config_check.check_model_state``)."""
        return None


class IFCA(SamplesParticipants, ScoresClusters, Algorithm):
    """IFCA (Ghosh et al.): option gradient (I) or model (II), restarts, weight sharing."""

    name = "ifca"
    fused_end_of_run = True
    clusters_clients = True

    def __init__(self, model, cfg: IFCAConfig = IFCAConfig()):
        self.model, self.cfg = model, cfg
        if cfg.weight_sharing and not model.head:
            raise ValueError(f"weight sharing needs a model with a head; {model.name} names none")
        if cfg.freeze_body and not model.splits:
            raise ValueError(f"freeze_body needs a model split into a body and a head; {model.name} "
                             "is not; set freeze_body=False")
        check_model_state(self.name, cfg, model.name, is_stateful(model))

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)
        if self.cfg.assignment == "oracle" and data.num_true_clusters != self.cfg.num_clusters:
            raise ValueError("oracle assignment needs K equal to the data's number of true "
                             f"clusters ({data.num_true_clusters}), got {self.cfg.num_clusters}")

    def init(self, key, data, params=None, assign=None) -> ClusterState:
        """K independently initialised models (or ``params`` [K, ...] given); with weight
        sharing all K start from model 0's body. ``assign`` int32[N]: the frozen clustering
        when assignment="fixed"."""
        k = self.cfg.num_clusters
        if params is None and self.cfg.pretrain_rounds:
            params = self._pretrain(key, data)
        elif params is None:
            params = jax.vmap(self.model.init)(jax.random.split(key, k))
        if self.cfg.warm_rounds:
            params = self._warm_start(key, data, params)
        if self.cfg.weight_sharing:
            params = self._share_body(params)
        if self.cfg.assignment == "fixed" and assign is None:
            raise ValueError('assignment="fixed" needs the clustering: init(..., assign=...)')
        if self.cfg.assignment == "oracle":
            assign = data.cluster
        elif self.cfg.assignment == "loss":
            assign = jnp.full((data.num_clients,), -1, jnp.int32)
        ms = None
        if is_stateful(self.model):  # BatchNorm statistics from init_state, one per cluster
            ms = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape),
                              self.model.init_state(jax.random.key(0)))
        return ClusterState(params=params, assign=assign.astype(jnp.int32),
                            round=jnp.zeros((), jnp.int32), model_state=ms)

    def _pretrain(self, key, data):
        """[K, ...] copies of one model trained by ``pretrain_rounds`` FedAvg rounds."""
        cfg = self.cfg
        fedavg = IFCA(self.model, IFCAConfig(num_clusters=1, local=cfg.local,
                                             participation=cfg.pretrain_participation,
                                             weighting=cfg.weighting, chunk=cfg.chunk))
        state = fedavg.init(IFCA_INIT_KEYS.key(key, "pretrain"), data)
        parent = IFCA_INIT_KEYS.key(key, "pretrain_rounds")
        state = jax.lax.fori_loop(0, cfg.pretrain_rounds, lambda t, s: fedavg.round(
            s, jax.random.fold_in(parent, t), data)[0], state)
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (cfg.num_clusters,) + a.shape[1:]),
                            state.params)

    def _warm_start(self, key, data, params):
        """``params`` [K, ...] after ``warm_rounds`` rounds of per-group FedAvg on K random
        equal groups of clients."""
        cfg, n, k = self.cfg, data.num_clients, self.cfg.num_clusters
        order = jax.random.permutation(IFCA_INIT_KEYS.key(key, "groups"), n)
        groups = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32) % k)
        warm = IFCA(self.model, IFCAConfig(num_clusters=k, local=cfg.local, weighting=cfg.weighting,
                                           assignment="fixed", chunk=cfg.chunk,
                                           clients_per_cluster=cfg.warm_clients_per_cluster,
                                           freeze_body=cfg.freeze_body))
        state = warm.init(None, data, params=params, assign=groups)
        parent = IFCA_INIT_KEYS.key(key, "warm_rounds")
        state = jax.lax.fori_loop(0, cfg.warm_rounds, lambda t, s: warm.round(
            s, jax.random.fold_in(parent, t), data)[0], state)
        return state.params

    @property
    def train_model(self):
        """The model local training differentiates: with ``freeze_body`` the body's features
        are constants (``frozen_body``)."""
        return frozen_body(self.model) if self.cfg.freeze_body else self.model

    def _share_body(self, params):
        heads = head_mask(params, self.model.head)
        return jax.tree.map(lambda a, h: a if h else jnp.broadcast_to(a[:1], a.shape), params, heads)

    def _mean_body(self, means, previous, sums, totals):
        """``means`` [K, ...] (params or statistics) with the body's leaves (not under
        ``model.head``) set to the mean over all participants: ``previous``' shared body
        plus the last row of ``sums`` [K + 1, ...] over ``totals[K]``."""
        k = self.cfg.num_clusters
        first = jax.tree.map(lambda p: p[:1], previous)
        body = mean_from_sums(first, jax.tree.map(lambda s: s[k:], sums), totals[k:])
        return share_body(means, head_mask(means, self.model.head),
                          jax.tree.map(lambda b: b[0], body))

    def _assign_ids(self, params, data, ids, model_state=None):
        """(assignment int32[M], loss matrix [M, K]) on the training data of clients
        ``ids`` (None: all N), read by id inside the chunk; with ``model_state`` [K, ...]
        the models use their running statistics."""
        loss, _ = loss_matrix_ids(*running_view(self.model, params, model_state), data, ids,
                                  chunk=self.cfg.chunk, shared_body=self.cfg.weight_sharing)
        return jnp.argmin(loss, axis=1).astype(jnp.int32), loss

    def assign(self, params, x, y, count):
        """(assignment int32[M], loss matrix [M, K]) on the given clients' arrays."""
        loss, _ = loss_matrix(self.model, params, x, y, count, chunk=self.cfg.chunk,
                              shared_body=self.cfg.weight_sharing)
        return jnp.argmin(loss, axis=1).astype(jnp.int32), loss

    def local_term(self, state):
        """The term added to every participant's local loss this round, term(w, w_start)
        -> float32 scalar (w_start: its cluster's model theta_{j_i}), or None (IFCA: none)."""
        return None

    def local_update(self):
        """The participants' local update rule (option II): None (``cfg.local``'s
        optimizer), an ``optax.GradientTransformation``, or a function lr -> one."""
        return None

    def round(self, state: ClusterState, key, data):
        """One round, streamed (``core.train.cluster_pass``): each participant picks its
        cluster, trains and adds its upload into per-cluster sums inside the client chunk.
        The sequential and clients_per_cluster variants keep per-participant arrays."""
        cfg, n, k = self.cfg, data.num_clients, self.cfg.num_clusters
        if cfg.sequential or cfg.clients_per_cluster is not None:
            return self._round_per_client(state, key, data)
        ids, keys = participants(key, n, cfg.participation)
        full = ids.shape[0] == n
        lr = cfg.local.lr_at(state.round)
        ms = state.model_state
        sums, totals, loss, found = cluster_pass(
            self.train_model, cfg.local, state.params, data, None if full else ids, keys, lr,
            upload=cfg.option, fixed_assign=None if cfg.assignment == "loss" else state.assign,
            weighting=cfg.weighting, share_body=cfg.weight_sharing, chunk=cfg.chunk, state=ms,
            term=self.local_term(state), update=self.local_update())
        sums, stat_sums = split_state(sums, ms)   # params' [G, ...], statistics' [G, ...]
        clusters = jax.tree.map(lambda s: s[:k], sums)
        if cfg.option == "gradient":
            step = lambda p, g: (p.astype(jnp.float32) - (lr / n) * g).astype(p.dtype)
            params = jax.tree.map(step, state.params, clusters)
            if cfg.weight_sharing:
                body = jax.tree.map(lambda p, s: step(p[0], s[k]), state.params, sums)
                params = share_body(params, head_mask(state.params, self.model.head), body)
        else:
            params = mean_from_sums(state.params, clusters, totals[:k])
            if cfg.weight_sharing:
                params = self._mean_body(params, state.params, sums, totals)
        if ms is not None:   # the members' mean, with the weights of the params
            ms = mean_from_sums(ms, jax.tree.map(lambda s: s[:k], stat_sums), totals[:k])
            if cfg.weight_sharing:
                ms = self._mean_body(ms, state.model_state, stat_sums, totals)
        if cfg.assignment != "loss":
            assign = state.assign
        else:
            assign = found if full else state.assign.at[ids].set(found)
        new = ClusterState(params=params, assign=assign, round=state.round + 1, model_state=ms)
        return new, dict(train_loss=loss.min(axis=1).mean())

    def _select(self, state: ClusterState, key, data):
        """clients_per_cluster variant: (idx int32[M] participants, their keys, their
        clusters int32[M] (-1: an empty slot), the new assignment int32[N], loss [N, K]).
        M = min(K*S, N): with more slots than clients at least K*S - N are empty, so only
        N slots, the valid ones first (``pack_slots``), are trained."""
        cfg, k = self.cfg, self.cfg.num_clusters
        if cfg.clients_per_cluster is None:
            idx, keys = participants(key, data.num_clients, cfg.participation)
            found, loss = self._assign_ids(state.params, data, idx, state.model_state)
            assign = found if cfg.assignment == "loss" else state.assign[idx]
            return idx, keys, assign, state.assign.at[idx].set(assign), loss
        found, loss = self._assign_ids(state.params, data, None, state.model_state)
        everyone = found if cfg.assignment == "loss" else state.assign
        ids, valid = per_cluster_participants(IFCA_KEYS.key(key, "cluster_draws"), everyone, k,
                                              cfg.clients_per_cluster)
        idx = ids.reshape(-1)
        assign = jnp.where(valid, jnp.arange(k)[:, None], -1).reshape(-1).astype(jnp.int32)
        if idx.shape[0] > data.num_clients:
            slots = pack_slots(valid, data.num_clients)
            idx, assign = idx[slots], assign[slots]
        return idx, client_keys(key, idx), assign, everyone, loss

    def _round_per_client(self, state: ClusterState, key, data):
        """The SR-FCA-code variants (sequential chains, S members per cluster): option II
        with every participant's trained model held at once ([M, P], M = min(K*S, N) or the
        participants), so their live memory is O(M*P); data read by id in the chunk."""
        cfg = self.cfg
        idx, keys, assign, new_assign, loss = self._select(state, key, data)
        lr = cfg.local.lr_at(state.round)
        ms = state.model_state
        term, update = self.local_term(state), self.local_update()

        def train(v, i, kk):
            p, s = split_state(v, ms)
            return local_train(self.train_model, cfg.local, p, *data.train_client(i), kk, lr,
                               state=s, term=term, update=update)

        start = join_state(state.params, ms)
        if cfg.sequential:
            trained = chain_clients(train, start, assign, idx, keys,
                                    order_key=IFCA_KEYS.key(key, "order"))
        else:
            mine = take(start, jnp.clip(assign, 0, cfg.num_clusters - 1))
            trained = map_clients(train, mine, idx, keys, chunk=cfg.chunk)
        w = client_weights(cfg.weighting, data.count[idx])
        params, ms = split_state(cluster_mean(trained, assign, start, weights=w), ms)
        new = ClusterState(params=params, assign=new_assign, round=state.round + 1, model_state=ms)
        return new, dict(train_loss=loss.min(axis=1).mean())

    def objective(self, state, data):
        """mean_i min_j F_i(theta_j) on training data: picks a restart without ground truth."""
        return self._assign_ids(state.params, data, None, state.model_state)[1].min(axis=1).mean()

    def evaluate(self, state, data) -> dict:
        """Assignments recomputed for every client with the final models on training data
        (assignment="loss"), in the same pass over the clients as the test scores."""
        if self.cfg.assignment == "loss":
            return self.objective_and_evaluate(state, data)[1]
        return dict(evaluate_clusters(*running_view(self.model, state.params, state.model_state),
                                      state.assign, data, chunk=self.cfg.chunk,
                                      shared_body=self.cfg.weight_sharing),
                    assign=state.assign, cluster_params=state.params)

    def objective_and_evaluate(self, state, data):
        """(``objective``, ``evaluate``) from one pass over the clients that reads each
        one's training and test data: the training-loss matrix [N, K] both re-assigns and
        gives the objective, so it is computed once."""
        model, params = running_view(self.model, state.params, state.model_state)
        train, loss, acc = train_test_loss_matrices(model, params, data, chunk=self.cfg.chunk,
                                                    shared_body=self.cfg.weight_sharing)
        assign = (jnp.argmin(train, axis=1).astype(jnp.int32) if self.cfg.assignment == "loss"
                  else state.assign)
        return train.min(axis=1).mean(), dict(score_clusters(loss, acc, assign), assign=assign,
                                              cluster_params=state.params)


def frozen_body(model):
    """``model`` whose body gets no gradient: apply(p, x) = head_apply(p, stop_gradient(
    body_apply(p, x))), the same outputs; SGD on it changes only the head."""
    body = lambda p, x: jax.lax.stop_gradient(model.body_apply(p, x))
    return dataclasses.replace(model, name=f"{model.name}-frozen-body", body_apply=body,
                               apply=lambda p, x: model.head_apply(p, body(p, x)))
