"""Ditto (Li et al. 2021): FedAvg for a global model w, plus one personal model per client.

Round t: every client runs ``local`` on f_i from w^t and the server averages (FedAvg, equal
weights); client i also runs ``personal_steps`` steps of
    v_i <- v_i - eta_p (grad f_i(v_i) + lambda (v_i - w^t))
(SGD on the personal objective f_i(v) + (lambda/2) ||v - w^t||^2, Li et al.'s Algorithm 1):
local training (``core.train.local_train``) from v_i with the proximal term
``proximal_term(lambda, anchor=w^t)`` and plain SGD as its update rule, minibatches and
weight decay as ``local``. The personal models v [N, ...] are per-client state carried
across rounds under the client axis.
lambda = 1 in the threshold-clustering paper's MNIST table; lambda -> 0 is Local, large
lambda is FedAvg. Clients are evaluated with their personal models.

Memory: one streamed pass per round (``core.clients.stream_clients``): the global model's
sum is O(P); the personal models are per-client state, O(N*P) (read and written), plus
chunk*(P + activations); data read by id, never copied.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
import optax
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, check_chunk)
from fedclust_jax.core.aggregate import mean_from_sums
from fedclust_jax.core.clients import stream_clients
from fedclust_jax.core.losses import own_loss_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.train import LocalTraining, local_train, proximal_term
from fedclust_jax.core.keys import DITTO_CLIENT_KEYS
from fedclust_jax.bounds import NonNegative, Positive, Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class DittoConfig:
    """local: the global model's local training; lam: lambda, the proximal weight of the
    personal objective; personal_steps / personal_lr: the personal model's plain-SGD steps
    and step size (None: local.steps / local.lr); chunk: clients per vectorized chunk
    ("auto": chosen per backend, None: all at once)."""

    local: LocalTraining = LocalTraining()
    lam: NonNegative = 1.0
    personal_steps: Size | None = None
    personal_lr: Positive | None = None
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lam", "personal_lr")

    def __post_init__(self):
        check_config(self)
        check_chunk(self.chunk)


@struct.dataclass
class DittoState:
    """global_params: w; params: personal models v [N, ...]; round: int32."""

    global_params: object
    params: object
    round: jax.Array


def personal_step(model, local, lam, lr, steps, v, w, x, y, count, key):
    """Client i's personal update: ``steps`` plain SGD steps of size ``lr`` from v (one
    model's params) on f_i(v) + (lam/2) ||v - w||^2, w the round's global model w^t;
    ``local``'s minibatches (drawn from ``key``) and weight decay. Returns v in its dtype."""
    cfg = dataclasses.replace(local, steps=steps)
    return local_train(model, cfg, v, x, y, count, key, lr,
                       term=proximal_term(lam, anchor=w), update=optax.sgd)


class Ditto(Algorithm):
    """Ditto (Li et al.): FedAvg plus proximal personal models (lambda)."""

    name = "ditto"
    clusters_clients = False

    def __init__(self, model, cfg: DittoConfig = DittoConfig()):
        self.model, self.cfg = model, cfg

    def init(self, key, data, params=None) -> DittoState:
        w = self.model.init(key) if params is None else params
        n = data.num_clients
        return DittoState(global_params=w,
                          params=jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), w),
                          round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        """One streamed pass: client i trains from w (its delta added into the global sum)
        and updates its personal model v_i, its data read once by id inside the chunk."""
        cfg, model, n = self.cfg, self.model, data.num_clients
        keys = client_keys(key, jnp.arange(n, dtype=jnp.int32))
        lr = cfg.local.lr_at(state.round)
        p_lr = lr if cfg.personal_lr is None else cfg.personal_lr
        p_steps = cfg.local.steps if cfg.personal_steps is None else cfg.personal_steps
        w = state.global_params

        def client(i, x, y, c, v, k):
            trained = local_train(model, cfg.local, w, x, y, c, k, lr)
            delta = jax.tree.map(lambda t, a: t.astype(jnp.float32) - a.astype(jnp.float32),
                                 trained, w)
            personal = personal_step(model, cfg.local, cfg.lam, p_lr, p_steps, v, w, x, y, c,
                                     DITTO_CLIENT_KEYS.key(k, "personal"))
            return jnp.ones((1,), jnp.float32), delta, personal

        sums, totals, personal = stream_clients(client, data, None, state.params, keys,
                                                num_groups=1, chunk=cfg.chunk)
        one = jax.tree.map(lambda a: a[None], w)
        global_params = jax.tree.map(lambda a: a[0], mean_from_sums(one, sums, totals))
        return DittoState(global_params=global_params, params=personal,
                          round=state.round + 1), {}

    def objective(self, state, data):
        return own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)[0].mean()

    def evaluate(self, state, data) -> dict:
        loss, acc = own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk,
                                 test=True)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss, assigned_test_acc=acc,
                    assign=jnp.full((data.num_clients,), -1, jnp.int32),
                    client_params=state.params)
