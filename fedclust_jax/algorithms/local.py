"""Local: every client trains alone on its own data (no communication).

A model with BatchNorm statistics (``models.resnet9.StatefulModel``) keeps one set per
client, ``LocalState.model_state`` [N, ...], trained with the client's params and used with
its running statistics (train=False) for the losses and ``evaluate``.

pretrain_rounds / pretrain_participation / weighting / freeze_body (the authors' FEMNIST
code's pipeline, ``algorithms.ifca``): every client starts from one model pre-trained by
FedAvg and, with freeze_body, trains its head only.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, check_chunk, check_weighting)
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig, frozen_body
from fedclust_jax.config_check import check_config, check_model_state
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import client_loss_accuracy, own_loss_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.train import LocalTraining, join_state, local_train, split_state
from fedclust_jax.models.resnet9 import is_stateful, running_view
from fedclust_jax.bounds import Count, Fraction, Size


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """local: training per round (``local.steps`` steps each round, so R rounds give
    R * steps steps); chunk: clients per vectorized chunk; pretrain_rounds /
    pretrain_participation / weighting: a FedAvg pre-training of the common start (0: none);
    freeze_body: train the head only."""

    local: LocalTraining = LocalTraining()
    chunk: Size | typing.Literal["auto"] | None = "auto"
    pretrain_rounds: Count = 0
    pretrain_participation: Fraction = 1.0
    weighting: typing.Literal["equal", "samples"] = "equal"
    freeze_body: bool = False

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_config(self)
        check_chunk(self.chunk)
        check_weighting(self.weighting)

    def model_state_refusal(self):
        """None: every configuration carries a model's BatchNorm statistics."""
        return None


@struct.dataclass
class LocalState:
    params: object  # leading axis N: one model per client
    round: jax.Array
    model_state: object = None  # [N, ...] each client's BatchNorm statistics, else None


class Local(Algorithm):
    """Local: every client trains alone.

    All clients start from one common initialisation and never communicate. Each client
    is evaluated with its own model on its own test split.

    BatchNorm statistics (a ``StatefulModel``) are per client too, from one common start.

    Memory: the N per-client models are the state, O(N*P) (twice during a round: read
    and written), plus chunk*(P + activations); data read by id, never copied."""

    name = "local"
    clusters_clients = False

    def __init__(self, model, cfg: LocalConfig = LocalConfig()):
        self.model, self.cfg = model, cfg
        check_model_state(self.name, cfg, model.name, is_stateful(model))
        if cfg.freeze_body and not model.splits:
            raise ValueError(f"freeze_body needs a model split into a body and a head; {model.name} "
                             "is not; set freeze_body=False")

    def init(self, key, data) -> LocalState:
        if self.cfg.pretrain_rounds:
            pre = IFCA(self.model, IFCAConfig(
                num_clusters=1, local=self.cfg.local, chunk=self.cfg.chunk,
                weighting=self.cfg.weighting, pretrain_rounds=self.cfg.pretrain_rounds,
                pretrain_participation=self.cfg.pretrain_participation))
            p = jax.tree.map(lambda a: a[0], pre.init(key, data).params)
        else:
            p = self.model.init(key)
        every = lambda tree: jax.tree.map(
            lambda a: jnp.broadcast_to(a, (data.num_clients,) + a.shape), tree)
        ms = every(self.model.init_state(key)) if is_stateful(self.model) else None
        return LocalState(params=every(p), round=jnp.zeros((), jnp.int32), model_state=ms)

    def round(self, state: LocalState, key, data):
        """One pass over the clients: the loss before training and the trained model of
        each, its data read by id inside the chunk."""
        keys = client_keys(key, jnp.arange(data.num_clients))
        lr = self.cfg.local.lr_at(state.round)

        ms = state.model_state

        def client(i, x, y, c, v, k):
            p, s = split_state(v, ms)
            loss = client_loss_accuracy(*running_view(self.model, p, s), x, y, c)[0]
            return loss, local_train(self.train_model, self.cfg.local, p, x, y, c, k, lr, state=s)

        loss, new = map_client_data(client, data, None, join_state(state.params, ms), keys,
                                    chunk=self.cfg.chunk)
        params, ms = split_state(new, ms)
        return (LocalState(params=params, round=state.round + 1, model_state=ms),
                dict(train_loss=loss.mean()))

    @property
    def train_model(self):
        """The model local training differentiates (the body frozen with ``freeze_body``)."""
        return frozen_body(self.model) if self.cfg.freeze_body else self.model

    def objective(self, state, data):
        return own_loss_ids(*running_view(self.model, state.params, state.model_state), data,
                            None, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        """Client i's own model (with its running statistics, train=False) on its test data."""
        loss, acc = own_loss_ids(*running_view(self.model, state.params, state.model_state),
                                 data, None, chunk=self.cfg.chunk, test=True)
        assign = jnp.arange(data.num_clients, dtype=jnp.int32)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss,
                    assigned_test_acc=acc, assign=assign, cluster_params=state.params)
