"""Local: every client trains alone on its own data (no communication)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import check_chunk
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.losses import own_loss
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.train import LocalTraining, local_train


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """local: training per round (``local.steps`` steps each round, so R rounds give
    R * steps steps); chunk: clients per vectorized chunk."""

    local: LocalTraining = LocalTraining()
    chunk: int | None = None

    def __post_init__(self):
        check_chunk(self.chunk)


@struct.dataclass
class LocalState:
    params: object  # leading axis N: one model per client
    round: jax.Array


class Local:
    """All clients start from one common initialisation and never communicate. Each client
    is evaluated with its own model on its own test split."""

    name = "local"
    clusters_clients = False

    def __init__(self, model, cfg: LocalConfig = LocalConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> LocalState:
        p = self.model.init(key)
        params = jax.tree.map(lambda a: jnp.broadcast_to(a, (data.num_clients,) + a.shape), p)
        return LocalState(params=params, round=jnp.zeros((), jnp.int32))

    def round(self, state: LocalState, key, data):
        keys = client_keys(key, jnp.arange(data.num_clients))
        lr = self.cfg.local.lr_at(state.round)
        loss, _ = own_loss(self.model, state.params, data.x, data.y, data.count, chunk=self.cfg.chunk)
        params = map_clients(
            lambda p, x, y, c, k: local_train(self.model, self.cfg.local, p, x, y, c, k, lr),
            state.params, data.x, data.y, data.count, keys, chunk=self.cfg.chunk)
        return LocalState(params=params, round=state.round + 1), dict(train_loss=loss.mean())

    def objective(self, state, data):
        return own_loss(self.model, state.params, data.x, data.y, data.count, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        loss, acc = own_loss(self.model, state.params, data.x_test, data.y_test,
                             data.count_test, chunk=self.cfg.chunk)
        assign = jnp.arange(data.num_clients, dtype=jnp.int32)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss,
                    assigned_test_acc=acc, assign=assign, cluster_params=state.params)
