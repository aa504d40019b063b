"""FedAvg (McMahan et al.): one global model, the IFCA paper's "global" baseline."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (check_chunk, check_weighting, client_weights,
                                          evaluate_clusters)
from fedclust_jax.core.aggregate import global_mean
from fedclust_jax.core.clients import chain_clients, map_clients
from fedclust_jax.core.losses import own_loss
from fedclust_jax.core.participation import num_participants, participants
from fedclust_jax.core.train import LocalTraining, local_train


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
    """local: the clients' local training; participation: fraction of clients per round,
    in (0, 1]; weighting: "equal" mean of the participants' models (as IFCA's global
    baseline) or "samples" (weighted by sample count, McMahan et al.); chunk: clients per
    vectorized chunk (None = all at once); sequential: the SR-FCA authors' code, where
    the participants train one after another on one shared model, in random order, and
    the server averages their checkpoints (``core.clients.chain_clients``; False = the
    paper's FedAvg, all from the global model)."""

    local: LocalTraining = LocalTraining()
    participation: float = 1.0
    weighting: str = "equal"
    chunk: int | None = None
    sequential: bool = False

    def __post_init__(self):
        num_participants(1, self.participation)
        check_weighting(self.weighting)
        check_chunk(self.chunk)


@struct.dataclass
class GlobalState:
    params: object  # one model's params
    round: jax.Array


class FedAvg:
    """Each round: M participants train ``local.steps`` steps from the global model, the
    server averages the results."""

    name = "fedavg"
    clusters_clients = False

    def __init__(self, model, cfg: FedAvgConfig = FedAvgConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> GlobalState:
        return GlobalState(params=self.model.init(key), round=jnp.zeros((), jnp.int32))

    def round(self, state: GlobalState, key, data):
        n = data.num_clients
        idx, keys = participants(key, n, self.cfg.participation)
        part = data.take(idx)
        lr = self.cfg.local.lr_at(state.round)
        start = jax.tree.map(lambda a: jnp.broadcast_to(a, (len(idx),) + a.shape), state.params)
        loss, _ = own_loss(self.model, start, part.x, part.y, part.count, chunk=self.cfg.chunk)

        def train(p, x, y, c, k):
            return local_train(self.model, self.cfg.local, p, x, y, c, k, lr)

        if self.cfg.sequential:
            trained = chain_clients(train, jax.tree.map(lambda a: a[None], state.params),
                                    jnp.zeros(len(idx), jnp.int32), part.x, part.y, part.count, keys,
                                    order_key=jax.random.fold_in(key, 2))
        else:
            trained = map_clients(train, start, part.x, part.y, part.count, keys, chunk=self.cfg.chunk)
        params = global_mean(trained, weights=client_weights(self.cfg.weighting, part.count))
        return GlobalState(params=params, round=state.round + 1), dict(train_loss=loss.mean())

    def objective(self, state, data):
        params = jax.tree.map(lambda a: jnp.broadcast_to(a, (data.num_clients,) + a.shape), state.params)
        return own_loss(self.model, params, data.x, data.y, data.count, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        params = jax.tree.map(lambda a: a[None], state.params)
        assign = jnp.zeros((data.num_clients,), jnp.int32)
        return dict(evaluate_clusters(self.model, params, assign, data, chunk=self.cfg.chunk),
                    assign=assign, cluster_params=params)
