"""SCAFFOLD as a user algorithm: per-client state carried across rounds, one file.

SCAFFOLD ("Stochastic Controlled Averaging for Federated Learning", Karimireddy et al.,
ICML 2020), Algorithm 1 with option II control variates. State: the global model x, the
server control variate c and one control variate c_i per client, all starting at 0.
Round t, participants S (|S| = M of N clients, drawn uniformly):

  client i:  y_i <- x;  K times:  y_i <- y_i - eta_l (g_i(y_i) - c_i + c)
             c_i+ <- c_i - c + (x - y_i) / (K eta_l)                      (option II)
             uploads (Delta y_i, Delta c_i) = (y_i - x, c_i+ - c_i);  c_i <- c_i+
  server:    x <- x + eta_g mean_S Delta y_i;   c <- c + (M / N) mean_S Delta c_i

K = ``local.steps``, eta_l = the round's ``local.lr``, g_i a full-batch or minibatch
gradient (``local.batch_size``), eta_g = ``global_lr``. With c = c_i = 0 (the first round)
a round is FedAvg's.

The local step is a composition (``fedclust_jax.core.train``): the correction is the loss
term <c - c_i, y> (``linear_term``), whose gradient is c - c_i, so plain SGD on the client's
loss plus the term takes exactly the step above. The c_i are per-client state [N, ...]
under the client axis: ``core.clients.stream_clients`` hands each participant its row,
adds its uploads into the server's sums and returns its new row, all in one pass that reads
the client's data once, by id. Run it with
``fedclust-jax --plugin examples/scaffold.py run --algorithm scaffold ...``.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax import register_algorithm
from fedclust_jax import Fraction, Positive, Size
from fedclust_jax.algorithms.base import (Algorithm, SamplesParticipants, check_chunk,
                                          evaluate_clusters)
from fedclust_jax.core.clients import stream_clients
from fedclust_jax.core.losses import client_loss_accuracy, loss_matrix_ids
from fedclust_jax.core.participation import num_participants, participants
from fedclust_jax.core.pytree import take
from fedclust_jax.core.traced import concrete
from fedclust_jax.core.train import LocalTraining, linear_term, local_train


@dataclasses.dataclass(frozen=True)
class ScaffoldConfig:
    """local: the clients' local steps (K = steps, eta_l = lr; optimizer "sgd" without
    momentum: option II's control variates assume plain SGD steps); global_lr: eta_g, the
    server's step on the mean model delta (> 0; 1 takes the mean, as FedAvg);
    participation: fraction of clients per round, in (0, 1]; chunk: clients per vectorized
    chunk; static: participation (the number of participants, a shape)."""

    local: LocalTraining = LocalTraining()
    global_lr: Positive = 1.0
    participation: Fraction = 1.0
    chunk: Size | str | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("global_lr",)

    def __post_init__(self):
        if self.local.optimizer != "sgd" or (concrete(self.local.momentum)
                                             and self.local.momentum != 0):
            raise ValueError("SCAFFOLD's local steps are plain SGD (option II's control "
                             f"variates assume them); got optimizer {self.local.optimizer!r} "
                             f"with momentum {self.local.momentum}")
        if concrete(self.global_lr) and not self.global_lr > 0:
            raise ValueError(f"global_lr must be > 0, got {self.global_lr}")
        num_participants(1, self.participation)
        check_chunk(self.chunk)


@struct.dataclass
class ScaffoldState:
    """params: the global model x; control: the server's c (float32, x's shapes);
    client_control: every client's c_i [N, ...] float32; round: int32, rounds done."""

    params: object
    control: object
    client_control: object
    round: jax.Array


class Scaffold(SamplesParticipants, Algorithm):
    """SCAFFOLD, option II: local steps corrected by control variates c - c_i."""

    name = "scaffold"
    clusters_clients = False
    client_vectors = 2          # c_i [N, P] in the state and their new values

    def __init__(self, model, cfg: ScaffoldConfig = ScaffoldConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data) -> ScaffoldState:
        params = self.model.init(key)
        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float32), params)
        n = data.num_clients
        return ScaffoldState(params=params, control=zeros,
                             client_control=jax.tree.map(
                                 lambda a: jnp.zeros((n,) + a.shape, a.dtype), zeros),
                             round=jnp.zeros((), jnp.int32))

    def round(self, state: ScaffoldState, key, data):
        cfg, model, n = self.cfg, self.model, data.num_clients
        ids, keys = participants(key, n, cfg.participation)
        full = ids.shape[0] == n
        lr = cfg.local.lr_at(state.round)
        x, c = state.params, state.control
        mine = state.client_control if full else take(state.client_control, ids)   # [M, ...]

        def client(i, xs, ys, count, k, c_i):
            loss = client_loss_accuracy(model, x, xs, ys, count)[0]
            y = local_train(model, cfg.local, x, xs, ys, count, k, lr,
                            term=linear_term(jax.tree.map(jnp.subtract, c, c_i)))
            dy = jax.tree.map(lambda a, b: a.astype(jnp.float32) - b.astype(jnp.float32), y, x)
            c_new = jax.tree.map(lambda ci, cc, d: ci - cc - d / (cfg.local.steps * lr),
                                 c_i, c, dy)
            dc = jax.tree.map(jnp.subtract, c_new, c_i)
            return jnp.ones((1,), jnp.float32), (dy, dc), (c_new, loss)

        sums, totals, (c_new, loss) = stream_clients(client, data, None if full else ids, keys,
                                                     mine, num_groups=1, chunk=cfg.chunk)
        m = totals[0]
        dy, dc = jax.tree.map(lambda s: s[0] / m, sums)
        params = jax.tree.map(lambda a, d: (a.astype(jnp.float32) + cfg.global_lr * d).astype(a.dtype),
                              x, dy)
        control = jax.tree.map(lambda a, d: a + (m / n) * d, c, dc)
        client_control = c_new if full else jax.tree.map(
            lambda all_, new: all_.at[ids].set(new), state.client_control, c_new)
        new = ScaffoldState(params=params, control=control, client_control=client_control,
                            round=state.round + 1)
        return new, dict(train_loss=loss.mean())

    def objective(self, state: ScaffoldState, data):
        """mean_i F_i(x), every client's training loss at the global model."""
        one = jax.tree.map(lambda a: a[None], state.params)
        return loss_matrix_ids(self.model, one, data, None, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state: ScaffoldState, data) -> dict:
        one = jax.tree.map(lambda a: a[None], state.params)
        assign = jnp.zeros((data.num_clients,), jnp.int32)
        return dict(evaluate_clusters(self.model, one, assign, data, chunk=self.cfg.chunk),
                    assign=assign, cluster_params=one)


register_algorithm("scaffold", Scaffold, ScaffoldConfig, replace=True,
                   help="SCAFFOLD (Karimireddy et al. 2020), option II control variates")
