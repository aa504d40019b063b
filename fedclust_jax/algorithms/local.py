"""Local: every client trains alone on its own data (no communication)."""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import check_chunk
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import client_loss_accuracy, own_loss_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.train import LocalTraining, local_train


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """local: training per round (``local.steps`` steps each round, so R rounds give
    R * steps steps); chunk: clients per vectorized chunk."""

    local: LocalTraining = LocalTraining()
    chunk: int | str | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_chunk(self.chunk)


@struct.dataclass
class LocalState:
    params: object  # leading axis N: one model per client
    round: jax.Array


class Local:
    """All clients start from one common initialisation and never communicate. Each client
    is evaluated with its own model on its own test split.

    Memory: the N per-client models are the state, O(N*P) (twice during a round: read
    and written), plus chunk*(P + activations); data read by id, never copied."""

    name = "local"
    clusters_clients = False

    def __init__(self, model, cfg: LocalConfig = LocalConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> LocalState:
        p = self.model.init(key)
        params = jax.tree.map(lambda a: jnp.broadcast_to(a, (data.num_clients,) + a.shape), p)
        return LocalState(params=params, round=jnp.zeros((), jnp.int32))

    def round(self, state: LocalState, key, data):
        """One pass over the clients: the loss before training and the trained model of
        each, its data read by id inside the chunk."""
        keys = client_keys(key, jnp.arange(data.num_clients))
        lr = self.cfg.local.lr_at(state.round)

        def client(i, x, y, c, p, k):
            loss = client_loss_accuracy(self.model, p, x, y, c)[0]
            return loss, local_train(self.model, self.cfg.local, p, x, y, c, k, lr)

        loss, params = map_client_data(client, data, None, state.params, keys, chunk=self.cfg.chunk)
        return LocalState(params=params, round=state.round + 1), dict(train_loss=loss.mean())

    def objective(self, state, data):
        return own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        loss, acc = own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk,
                                 test=True)
        assign = jnp.arange(data.num_clients, dtype=jnp.int32)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss,
                    assigned_test_acc=acc, assign=assign, cluster_params=state.params)
