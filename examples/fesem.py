"""FeSEM as a user algorithm: one file, one registration.

FeSEM ("Multi-center federated learning", Xie et al., 2021) clusters clients by where their
models lie in parameter space, not by loss (IFCA) or by a graph (SR-FCA). Every client keeps
its own model w_i (all start from one common init); each round:

  1. every client i trains ``local.steps`` steps of its own w_i;
  2. E-step: client i joins the nearest centre, k_i = argmin_k ||w_i - c_k||^2;
  3. M-step: each centre becomes the mean of its members' models (an empty cluster keeps
     its centre).

In the first round the K centres are the trained models of K distinct random clients
(k-means' random seeding). Run it with
``fedclust-jax --plugin examples/fesem.py run --algorithm fesem ...`` or, from Python,
``import examples.fesem`` before ``run_experiment``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from fedclust_jax import register_algorithm
from fedclust_jax import Size
from flax import struct

from fedclust_jax.algorithms.base import Algorithm, ScoresClusters, check_chunk, evaluate_clusters
from fedclust_jax.config_check import check_config
from fedclust_jax.core.aggregate import cluster_mean
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.train import LocalTraining, local_train


@dataclasses.dataclass(frozen=True)
class FeSEMConfig:
    """num_clusters: K centres; local: every client's training from its centre (steps, lr,
    batch_size, optimizer, ...; a sweep may trace lr); chunk: clients per vectorized chunk
    ("auto": chosen per backend, None: all at once)."""

    num_clusters: Size = 2
    local: LocalTraining = LocalTraining()
    chunk: Size | str | None = "auto"

    def __post_init__(self):
        check_config(self)            # the annotations' ranges, for a config built in Python
        check_chunk(self.chunk)


@struct.dataclass
class FeSEMState:
    """params: the K centres [K, ...]; local: every client's own model [N, ...]; assign:
    int32[N] each client's centre; round: int32, rounds done."""

    params: object
    local: object
    assign: jax.Array
    round: jax.Array


class FeSEM(ScoresClusters, Algorithm):
    """FeSEM: clients cluster by the L2 distance of their trained models to K centres."""

    name = "fesem"
    clusters_clients = True
    client_vectors = 1          # every client's own model [N, P]

    def __init__(self, model, cfg: FeSEMConfig = FeSEMConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> FeSEMState:
        k_common, k_centres = jax.random.split(key)
        n = data.num_clients
        common = self.model.init(k_common)
        local = jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), common)
        centres = jax.vmap(self.model.init)(jax.random.split(k_centres, self.cfg.num_clusters))
        return FeSEMState(params=centres, local=local, assign=jnp.zeros((n,), jnp.int32),
                          round=jnp.zeros((), jnp.int32))

    def round(self, state: FeSEMState, key, data):
        cfg, n = self.cfg, data.num_clients
        lr = cfg.local.lr_at(state.round)

        def client(i, x, y, count, k_i, own):
            return local_train(self.model, cfg.local, own, x, y, count, k_i, lr)

        ids = jnp.arange(n, dtype=jnp.int32)
        trained = map_client_data(client, data, None, client_keys(key, ids), state.local,
                                  chunk=cfg.chunk)                                 # [N, ...]
        seeds = jax.random.choice(jax.random.fold_in(key, n), n, (cfg.num_clusters,),
                                  replace=False)           # a stream no client id reaches
        first = jax.tree.map(lambda a: a[seeds], trained)
        previous = jax.tree.map(lambda f, c: jnp.where(state.round == 0, f, c), first,
                                state.params)
        w = flatten_stacked(trained, jnp.float32)                                  # [N, P]
        c = flatten_stacked(previous, jnp.float32)                                 # [K, P]
        mean = c.mean(axis=0)                 # centred: the Gram form keeps its precision
        w, c = w - mean, c - mean
        dist = (jnp.sum(w * w, 1)[:, None] - 2 * w @ c.T + jnp.sum(c * c, 1)[None, :])
        assign = jnp.argmin(dist, axis=1).astype(jnp.int32)                        # E-step
        centres = cluster_mean(trained, assign, previous)                          # M-step
        new = FeSEMState(params=centres, local=trained, assign=assign, round=state.round + 1)
        return new, {"distance": jnp.mean(jnp.min(dist, axis=1))}

    def objective(self, state: FeSEMState, data):
        """mean_i F_i(c_{k_i}), each client's training loss at its centre."""
        loss = loss_matrix_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)[0]
        return jnp.take_along_axis(loss, state.assign[:, None], axis=1).mean()

    def evaluate(self, state: FeSEMState, data) -> dict:
        scores = evaluate_clusters(self.model, state.params, state.assign, data,
                                   chunk=self.cfg.chunk)
        return dict(scores, assign=state.assign, cluster_params=state.params)


register_algorithm("fesem", FeSEM, FeSEMConfig, replace=True,
                   help="FeSEM (Xie et al. 2021): clients clustered by the L2 distance of their models")
