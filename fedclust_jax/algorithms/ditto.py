"""Ditto (Li et al. 2021): FedAvg for a global model w, plus one personal model per client.

Round t: every client runs ``local`` on f_i from w^t and the server averages (FedAvg, equal
weights); client i also runs ``personal_steps`` steps of
    v_i <- v_i - eta_p (grad f_i(v_i) + lambda (v_i - w^t))
(the personal objective f_i(v) + (lambda/2) ||v - w||^2; minibatches as ``local``).
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
from flax import struct
from jax import lax

from fedclust_jax.algorithms.base import (Algorithm, check_chunk)
from fedclust_jax.core.aggregate import mean_from_sums
from fedclust_jax.core.clients import stream_clients
from fedclust_jax.core.losses import own_loss_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.train import LocalTraining, client_gradient, local_train
from fedclust_jax.core.keys import DITTO_CLIENT_KEYS


@dataclasses.dataclass(frozen=True)
class DittoConfig:
    """local: the global model's local training; lam: lambda, the proximal weight of the
    personal objective; personal_steps / personal_lr: the personal model's steps and step
    size (None: local.steps / local.lr); chunk: clients per vectorized chunk ("auto": chosen per
    backend, None: all at once)."""

    local: LocalTraining = LocalTraining()
    lam: float = 1.0
    personal_steps: int | None = None
    personal_lr: float | None = None
    chunk: int | str | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lam", "personal_lr")

    def __post_init__(self):
        if self.lam < 0:
            raise ValueError(f"Ditto lambda must be >= 0, got {self.lam}")
        if self.personal_steps is not None and self.personal_steps < 1:
            raise ValueError(f"personal_steps must be >= 1, got {self.personal_steps}")
        if self.personal_lr is not None and not self.personal_lr > 0:
            raise ValueError(f"personal_lr must be > 0, got {self.personal_lr}")
        check_chunk(self.chunk)


@struct.dataclass
class DittoState:
    """global_params: w; params: personal models v [N, ...]; round: int32."""

    global_params: object
    params: object
    round: jax.Array


def personal_step(model, local, lam, lr, steps, v, w, x, y, count, key):
    """``steps`` proximal steps on one client's personal model v toward the global w."""
    def step(v, s):
        g = client_gradient(model, local, v, x, y, count, jax.random.fold_in(key, s))
        # in float32, rounded to v's dtype (bf16 with --dtype bfloat16)
        up = lambda a, ga, wa: (a.astype(jnp.float32)
                                - lr * (ga + lam * (a.astype(jnp.float32) - wa))).astype(a.dtype)
        return jax.tree.map(up, v, g, w), None
    return lax.scan(step, v, jnp.arange(steps))[0]


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
