"""FedAvg (McMahan et al.): one global model, the IFCA paper's "global" baseline.

A subclass changes the clients' local training without copying the round: ``local_term``
(a loss term term(w, w_start), e.g. FedProx's ``core.train.proximal_term(mu)``) and
``local_update`` (an optax rule, or a function of the step size returning one) are passed
to every participant's local steps (``core.train``'s local-step mechanism;
``examples/fedprox.py``).

A model with BatchNorm statistics (``models.resnet9.StatefulModel``) keeps them in
``GlobalState.model_state``: every participant trains them from the global statistics and
the server averages them with the params' weights (``core.train.cluster_pass``); the loss
and ``evaluate`` use the running statistics (``models.resnet9.running_view``).
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, SamplesParticipants, check_chunk, check_weighting, client_weights, evaluate_clusters)
from fedclust_jax.config_check import check_config, check_model_state
from fedclust_jax.core.aggregate import global_mean, mean_from_sums
from fedclust_jax.core.clients import chain_clients
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.participation import participants
from fedclust_jax.core.train import (LocalTraining, cluster_pass, join_state, local_train,
                                     split_state)
from fedclust_jax.models.resnet9 import is_stateful, running_view
from fedclust_jax.core.keys import FEDAVG_KEYS
from fedclust_jax.bounds import Fraction, Size


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
    """local: the clients' local training; participation: fraction of clients per round,
    in (0, 1]; weighting: "equal" mean of the participants' models (as IFCA's global
    baseline) or "samples" (weighted by sample count, McMahan et al.); chunk: clients per
    vectorized chunk ("auto": chosen per backend, None: all at once); sequential: the
    SR-FCA authors' code, where the participants train one after another on one shared model, in random order, and
    the server averages their checkpoints (``core.clients.chain_clients``; False = the
    paper's FedAvg, all from the global model);
    static: participation (the number of participants, a shape)."""

    local: LocalTraining = LocalTraining()
    participation: Fraction = 1.0
    weighting: typing.Literal["equal", "samples"] = "equal"
    chunk: Size | typing.Literal["auto"] | None = "auto"
    sequential: bool = False

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_config(self)
        check_weighting(self.weighting)
        check_chunk(self.chunk)

    def model_state_refusal(self):
        """None: every configuration carries a model's BatchNorm statistics."""
        return None


@struct.dataclass
class GlobalState:
    params: object  # one model's params
    round: jax.Array
    model_state: object = None  # one model's BatchNorm statistics (StatefulModel), else None


class FedAvg(SamplesParticipants, Algorithm):
    """FedAvg: one global model (IFCA paper's 'global' baseline).

    Each round: M participants train ``local.steps`` steps from the global model, the
    server averages the results.

    BatchNorm statistics (a ``StatefulModel``) are averaged as the params are, with the
    same weights (the sequential chain carries them from client to client as well).

    Memory: streamed (``core.train.cluster_pass`` with K = 1): live O(P + chunk*(P +
    activations)) plus the data; ``sequential`` holds the M checkpoints, O(M*P)."""

    name = "fedavg"
    clusters_clients = False

    def __init__(self, model, cfg: FedAvgConfig = FedAvgConfig()):
        self.model, self.cfg = model, cfg
        check_model_state(self.name, cfg, model.name, is_stateful(model))

    def init(self, key, data) -> GlobalState:
        ms = self.model.init_state(key) if is_stateful(self.model) else None
        return GlobalState(params=self.model.init(key), round=jnp.zeros((), jnp.int32),
                           model_state=ms)

    def local_term(self, state):
        """The term added to every participant's local loss this round, term(w, w_start)
        -> float32 scalar (w_start: the model it received), or None (FedAvg: none). A
        subclass may read ``state`` (its own fields included) and traced config values."""
        return None

    def local_update(self):
        """The participants' local update rule: None (``cfg.local``'s optimizer), an
        ``optax.GradientTransformation``, or a function lr -> GradientTransformation."""
        return None

    def round(self, state: GlobalState, key, data):
        cfg, n = self.cfg, data.num_clients
        term, update = self.local_term(state), self.local_update()
        idx, keys = participants(key, n, cfg.participation)
        full = idx.shape[0] == n
        lr = cfg.local.lr_at(state.round)
        one = jax.tree.map(lambda a: a[None], state.params)
        ms = jax.tree.map(lambda a: a[None], state.model_state)  # None: stateless
        if cfg.sequential:
            def train(v, i, k):
                p, s = split_state(v, ms)
                return local_train(self.model, cfg.local, p, *data.train_client(i), k, lr, state=s,
                                   term=term, update=update)
            loss = loss_matrix_ids(*running_view(self.model, one, ms), data,
                                   None if full else idx, chunk=cfg.chunk)[0]
            trained = chain_clients(train, join_state(one, ms), jnp.zeros(len(idx), jnp.int32),
                                    idx, keys, order_key=FEDAVG_KEYS.key(key, "order"))
            new = global_mean(trained, weights=client_weights(cfg.weighting, data.count[idx]))
        else:
            sums, totals, loss, _ = cluster_pass(self.model, cfg.local, one, data,
                                                 None if full else idx, keys, lr,
                                                 weighting=cfg.weighting, chunk=cfg.chunk,
                                                 state=ms, term=term, update=update)
            new = jax.tree.map(lambda a: a[0], mean_from_sums(join_state(one, ms), sums, totals))
        params, ms = split_state(new, ms)
        return (GlobalState(params=params, round=state.round + 1, model_state=ms),
                dict(train_loss=loss.mean()))

    def objective(self, state, data):
        one = jax.tree.map(lambda a: a[None], state.params)
        ms = jax.tree.map(lambda a: a[None], state.model_state)
        return loss_matrix_ids(*running_view(self.model, one, ms), data, None,
                               chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        """With BatchNorm statistics, scored with the running statistics (train=False)."""
        params = jax.tree.map(lambda a: a[None], state.params)
        ms = jax.tree.map(lambda a: a[None], state.model_state)
        assign = jnp.zeros((data.num_clients,), jnp.int32)
        return dict(evaluate_clusters(*running_view(self.model, params, ms), assign, data,
                                      chunk=self.cfg.chunk),
                    assign=assign, cluster_params=params)
