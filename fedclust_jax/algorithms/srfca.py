"""SR-FCA (Vardhan, Ghosh, Mazumdar): ONE_SHOT, then R x REFINE (Algorithms 1-4).

``init`` runs ONE_SHOT (core.oneshot); each ``round`` is one REFINE step:
  1. TrimmedMeanGD per cluster: ``rounds_per_refine`` FedAvg rounds whose server step is the
     coordinate-wise beta-trimmed mean of the participants' models after ``local.steps``
     local steps (equal to the trimmed mean of their updates: they start from one point).
     FedAvg round j of REFINE r (0-based) uses lr * lr_decay^(r * rounds_per_refine + j).
  2. RECLUSTER: every client (unassigned ones included) joins the nearest active cluster,
     dist(w_i, omega_c) with w_i its ONE_SHOT model.
  3. MERGE: clusters whose models are within lambda form a graph; each connected component
     becomes one cluster whose model is the plain average of its members' models.
Clusters live on a static K_max axis with an ``active`` mask; active clusters always
occupy slots 0..C-1. The MERGE "size >= t" filter is not applied (a typo in the paper;
the authors' code keeps all components).

``variant`` sets five choices together; a field set explicitly overrides it (ablations):

  field          "paper" (default)                  "authors-code"
  graph          "components": connected components "pivot": greedy random-pivot
                                                    clustering (its size rule keeps > t
                                                    clients: give t + 1 to match)
  refine_init    "continue": cluster models carry   "fresh": every REFINE restarts the
                 over, merged = averaged            cluster models from a new random init
  one_shot_init  "common": all clients start        "independent": every client's model
                 ONE_SHOT from one w_0              has its own random init
  sequential     False: a cluster's participants    True: they train one after another on
                 train in parallel from its model   one model (the code's server hands all
                                                    of them the same tensors); the trimmed
                                                    mean is over the sequence's checkpoints
                                                    (``core.clients.chain_clients``)
  drop_small     False                              True: clusters with fewer than t
                                                    clients after RECLUSTER are dropped,
                                                    their clients unassigned until the
                                                    next RECLUSTER

Hyperparameters outside the variant (the paper leaves their values open; the authors'
code tunes them per data set): lam or lam_quantile (the code's
lambda = q-quantile of the ONE_SHOT pairwise distances), t, beta, one_shot_steps,
rounds_per_refine, clients_per_cluster (None = all members train each round, as the
paper; the code draws S = 10 per cluster per round) and max_participants (with
clients_per_cluster, at most M clients train per round, a static buffer filled
round-robin over clusters; None = min(N, K_max * S), which never drops a drawn client).
refine_init="common" (every REFINE restarts from the common w_0) is a third option.
With "sequential" the code's REFINE schedule (5 local steps x 10 clients per round)
trains as far as the paper reports.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from fedclust_jax.algorithms.base import (Algorithm, check_chunk, evaluate_clusters)
from fedclust_jax.core.aggregate import combine
from fedclust_jax.core.clients import chain_clients, map_clients
from fedclust_jax.core.graph import connected_components
from fedclust_jax.core.losses import loss_matrix_ids, own_loss_ids
from fedclust_jax.core.oneshot import ONE_SHOT_INITS, check_graph_options, one_shot, replace_steps
from fedclust_jax.core.pairwise import (client_cluster_cross_loss, cluster_cross_loss,
                                        l2_distances)
from fedclust_jax.core.participation import client_keys, pack_slots, per_cluster_participants
from fedclust_jax.core.pytree import flatten_stacked, take
from fedclust_jax.core.robust import cluster_trimmed_mean
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.core.keys import SRFCA_KEYS
from fedclust_jax.bounds import NonNegative, Probability, Size, TrimFraction
from fedclust_jax.config_check import check_config

REFINE_INITS = ("continue", "common", "fresh")
VARIANTS = {
    "paper": dict(graph="components", refine_init="continue", one_shot_init="common",
                  sequential=False, drop_small=False),
    "authors-code": dict(graph="pivot", refine_init="fresh", one_shot_init="independent",
                         sequential=True, drop_small=True),
}


@dataclasses.dataclass(frozen=True)
class SRFCAConfig:
    """variant: "paper" | "authors-code", the five code choices of the module docstring
    (graph, refine_init, one_shot_init, sequential, drop_small: None keeps the variant's
    value, a value overrides it); lam: threshold lambda on the distance's scale (mean
    cross-entropy here; the code's lambdas are on mean CE / batch size); lam_quantile:
    lambda = this quantile of the ONE_SHOT pairwise distances instead (authors' code);
    t: minimum ONE_SHOT component size; beta: trimming fraction of TrimmedMeanGD, in
    [0, 0.5); metric: "cross_loss" (Def. 5.1, the experiments) or "l2" (the theory);
    one_shot_steps: T local steps of ONE_SHOT; rounds_per_refine: FedAvg rounds of
    TrimmedMeanGD per REFINE, each ``local.steps`` local steps; k_max: size of the cluster
    axis (None = N // t, enough for any ONE_SHOT outcome; smaller is faster and keeps only
    the k_max largest ONE_SHOT clusters); clients_per_cluster: members of each cluster that
    train per REFINE round (None: all); max_participants: cap on the clients training per
    round with clients_per_cluster (None: none); graph: ONE_SHOT's threshold-graph
    clustering, "components" (paper) or "pivot" (code); refine_init: cluster models at each
    REFINE, "continue", "common" or "fresh"; one_shot_init: ONE_SHOT's start, "common" w_0
    or "independent" inits; sequential: REFINE's participants train one after another on
    one shared model (code); drop_small: drop clusters smaller than t after RECLUSTER
    (code); chunk: clients per vectorized chunk ("auto": chosen per backend, None: all at
    once).

    ``resolved()`` gives the config with the variant's values filled in;
    static: lam_quantile (an index into the sorted distances, from float64 rounding)."""

    variant: str = "paper"
    lam: NonNegative | None = 1.0
    lam_quantile: Probability | None = None
    t: Size = 2
    beta: TrimFraction = 0.15
    metric: str = "cross_loss"
    one_shot_steps: Size = 100
    rounds_per_refine: Size = 10
    clients_per_cluster: Size | None = None
    max_participants: Size | None = None
    graph: str | None = None
    refine_init: str | None = None
    one_shot_init: str | None = None
    sequential: bool | None = None
    drop_small: bool | None = None
    k_max: Size | None = None
    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lam", "beta")

    def resolved(self) -> "SRFCAConfig":
        """This config with every variant-controlled field that is None set by ``variant``."""
        fill = {k: v for k, v in VARIANTS[self.variant].items() if getattr(self, k) is None}
        return dataclasses.replace(self, **fill) if fill else self

    def __post_init__(self):
        check_config(self)
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {tuple(VARIANTS)}, got {self.variant!r}")
        for name in ("sequential", "drop_small"):
            if getattr(self, name) not in (None, True, False):
                raise ValueError(f"{name} must be true, false or None (as the variant), "
                                 f"got {getattr(self, name)!r}")
        check_graph_options(lam=self.lam, lam_quantile=self.lam_quantile, t=self.t,
                            metric=self.metric, graph=self.graph or "components")
        if self.refine_init is not None and self.refine_init not in REFINE_INITS:
            raise ValueError(f"refine_init must be one of {REFINE_INITS}, got {self.refine_init!r}")
        if self.one_shot_init is not None and self.one_shot_init not in ONE_SHOT_INITS:
            raise ValueError(f"one_shot_init must be one of {ONE_SHOT_INITS}, got {self.one_shot_init!r}")
        check_chunk(self.chunk)


@struct.dataclass
class SRFCAState:
    """params: [K_max, ...] cluster models omega_c; active: bool[K_max]; assign: int32[N]
    (-1 = unassigned); local: [N, ...] ONE_SHOT models w_i; client_loss: [N, N] f_i(w_j);
    w0: the common init; lam: threshold; one_shot_assign: int32[N] C_0; round: REFINEs done."""

    params: object
    active: jax.Array
    assign: jax.Array
    local: object
    client_loss: jax.Array
    w0: object
    lam: jax.Array
    one_shot_assign: jax.Array
    round: jax.Array


def _bcast(tree, k):
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape), tree)


def _mask_leading(mask, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old)


class SRFCA(Algorithm):
    """SR-FCA (Vardhan et al.): ONE_SHOT threshold-graph clustering, then REFINE steps (rounds)."""

    name = "srfca"
    client_vectors = 1
    pairwise_clients = True
    clusters_clients = True

    def models_scored(self, num_clients: int) -> int:
        """ONE_SHOT scores every client's data on every client's model: N."""
        return num_clients

    def __init__(self, model, cfg: SRFCAConfig = SRFCAConfig()):
        self.model, self.cfg = model, cfg.resolved()

    def k_max(self, num_clients: int) -> int:
        return self.cfg.k_max or max(1, num_clients // self.cfg.t)

    def check_data(self, data):
        if self.cfg.t > data.num_clients:
            raise ValueError(f"t = {self.cfg.t} is more than the {data.num_clients} clients")

    # ------------------------------------------------------------------ ONE_SHOT
    def init(self, key, data) -> SRFCAState:
        cfg, n = self.cfg, data.num_clients
        k = self.k_max(n)
        res = one_shot(key, self.model, data, local=replace_steps(cfg.local, cfg.one_shot_steps),
                       lam=cfg.lam, lam_quantile=cfg.lam_quantile, t=cfg.t, metric=cfg.metric,
                       graph=cfg.graph, k_max=k, init=cfg.one_shot_init, chunk=cfg.chunk)
        active = jnp.zeros((k,), bool).at[jnp.where(res.labels >= 0, res.labels, k)].set(
            True, mode="drop")
        return SRFCAState(params=_bcast(res.w0, k), active=active, assign=res.labels,
                          local=res.local, client_loss=res.client_loss, w0=res.w0,
                          lam=res.lam, one_shot_assign=res.labels,
                          round=jnp.zeros((), jnp.int32))

    # ------------------------------------------------------------------ REFINE
    def _train(self, params, assign, active, key, data, lr):
        """One TrimmedMeanGD (FedAvg) round for all clusters with step size ``lr`` ->
        params [K_max, ...]."""
        cfg, n = self.cfg, data.num_clients
        k = jax.tree.leaves(params)[0].shape[0]
        assign = jnp.where((assign >= 0) & active[jnp.clip(assign, 0, k - 1)], assign, -1)

        def train(p, i, kk):
            return local_train(self.model, cfg.local, p, *data.train_client(i), kk, lr)

        def run(ids, group):
            """[M, ...] models of clients ``ids`` trained from cluster ``group`` (-1: none)."""
            keys = client_keys(key, ids)
            if cfg.sequential:
                return chain_clients(train, params, group, ids, keys,
                                     order_key=SRFCA_KEYS.key(key, "order"))
            start = take(params, jnp.clip(group, 0, k - 1))
            return map_clients(lambda i, p, kk: train(p, i, kk), ids, start, keys, chunk=cfg.chunk)

        if cfg.clients_per_cluster is None:
            trained = run(jnp.arange(n), assign)
            return cluster_trimmed_mean(trained, assign, params, cfg.beta)
        ids, valid = per_cluster_participants(SRFCA_KEYS.key(key, "cluster_draws"), assign, k,
                                              cfg.clients_per_cluster)
        s = ids.shape[1]
        slots = pack_slots(valid, min(k * s, n, cfg.max_participants or n))
        valid = valid.reshape(-1)
        trained = run(ids.reshape(-1)[slots], jnp.where(valid[slots], slots // s, -1))
        trained = jax.tree.map(
            lambda a: jnp.zeros((k * s,) + a.shape[1:], a.dtype).at[slots].set(a).reshape(
                (k, s) + a.shape[1:]), trained)
        valid = jnp.zeros((k * s,), bool).at[slots].set(valid[slots]).reshape(k, s)

        def per_cluster(vals, ok, prev):
            one = jax.tree.map(lambda a: a[None], prev)
            out = cluster_trimmed_mean(vals, jnp.where(ok, 0, -1).astype(jnp.int32), one, cfg.beta)
            return jax.tree.map(lambda a: a[0], out)

        return jax.vmap(per_cluster)(trained, valid, params)

    def _client_cluster_dist(self, state, cluster_loss, params, member):
        if self.cfg.metric == "l2":
            return l2_distances(flatten_stacked(state.local), flatten_stacked(params))
        return client_cluster_cross_loss(state.client_loss, cluster_loss, member)

    def _cluster_dist(self, cluster_loss, params, member):
        if self.cfg.metric == "l2":
            return l2_distances(flatten_stacked(params))
        return cluster_cross_loss(cluster_loss, member)

    def round(self, state: SRFCAState, key, data):
        cfg, n = self.cfg, data.num_clients
        k = state.active.shape[0]
        k_start, k_train = jax.random.split(key)
        if cfg.refine_init == "continue":
            start = state.params
        elif cfg.refine_init == "common":
            start = _bcast(state.w0, k)
        else:
            start = jax.vmap(self.model.init)(jax.random.split(k_start, k))

        def body(p, r):
            lr = cfg.local.lr_at(state.round * cfg.rounds_per_refine + r)
            return self._train(p, state.assign, state.active, jax.random.fold_in(k_train, r),
                               data, lr), None

        params, _ = lax.scan(body, start, jnp.arange(cfg.rounds_per_refine))
        params = _mask_leading(state.active, params, state.params)

        # RECLUSTER (all clients) with the clusters C_{r-1} that trained the models
        cluster_loss = jnp.zeros((n, k), jnp.float32)
        if cfg.metric == "cross_loss":
            cluster_loss, _ = loss_matrix_ids(self.model, params, data, None, chunk=cfg.chunk)
        old_member = state.assign[None, :] == jnp.arange(k)[:, None]
        d = self._client_cluster_dist(state, cluster_loss, params, old_member)
        d = jnp.where(state.active[None, :], d, jnp.inf)
        assign = jnp.argmin(d, axis=1).astype(jnp.int32)
        sizes = jnp.zeros((k,), jnp.int32).at[assign].add(1)
        active = state.active & (sizes > 0)
        if cfg.drop_small:
            active = active & (sizes >= cfg.t)
            assign = jnp.where(active[assign], assign, -1)

        # MERGE clusters within lambda; merged model = plain average
        member = assign[None, :] == jnp.arange(k)[:, None]
        dc = self._cluster_dist(cluster_loss, params, member)
        labels = connected_components(dc <= state.lam, 1, mask=active)      # [K] in [-1, C)
        groups = (labels[None, :] == jnp.arange(k)[:, None]).astype(jnp.float32)  # [K new, K old]
        merged = combine(groups / jnp.maximum(groups.sum(1, keepdims=True), 1.0), params)
        num = jnp.max(labels) + 1
        new_active = jnp.arange(k) < num
        params = _mask_leading(new_active, merged, params)
        assign = jnp.where(assign >= 0, labels[jnp.clip(assign, 0, k - 1)], -1).astype(jnp.int32)

        new = state.replace(params=params, active=new_active, assign=assign, round=state.round + 1)
        return new, dict(num_clusters=num, unassigned=jnp.sum(assign < 0))

    # ------------------------------------------------------------------ evaluation
    def objective(self, state, data):
        loss, _ = loss_matrix_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)
        loss = jnp.where(state.active[None, :], loss, jnp.inf)
        safe = jnp.clip(state.assign, 0, loss.shape[1] - 1)
        own = jnp.where(state.assign >= 0, loss[jnp.arange(loss.shape[0]), safe], loss.min(1))
        return own.mean()

    def evaluate(self, state, data) -> dict:
        """The "assigned" protocol (client i scored with cluster assign[i]); "best" over
        active clusters only. After ONE_SHOT (round 0) see ``evaluate_local``."""
        ev = evaluate_clusters(self.model, state.params, state.assign, data,
                               chunk=self.cfg.chunk, active=state.active)
        return dict(ev, assign=state.assign, cluster_params=state.params,
                    num_clusters=jnp.sum(state.active))

    def evaluate_local(self, state, data) -> dict:
        """Test loss / accuracy [N] of each client's ONE_SHOT model (Table 5, "After
        ONE_SHOT", which equals the Local baseline)."""
        loss, acc = own_loss_ids(self.model, state.local, data, None, chunk=self.cfg.chunk,
                                 test=True)
        return dict(test_loss=loss, test_acc=acc, assign=state.one_shot_assign)
