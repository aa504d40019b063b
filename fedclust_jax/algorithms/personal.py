"""What the threshold-clustering paper's algorithms (FC, MC, Myopic) share: one model per
client (params with leading axis N), Byzantine clients, and evaluation of each client's
own model on its own data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, check_chunk)
from fedclust_jax.attacks import attack_from_config
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.attacks.rounds import client_labels
from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import own_loss_ids
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked, unflatten_stacked
from fedclust_jax.core.threshold_clustering import TC_METHODS, check_radius
from fedclust_jax.core.train import client_gradient
from fedclust_jax.core.keys import PERSONAL_KEYS


@struct.dataclass
class PersonalState:
    """params: client models [N, ...]; momentum: [N, P] (MC) or None; centers: [K, P] (MC)
    or None; assign: int32[N] (MC, Myopic; -1 for FC); round: int32."""

    params: object
    momentum: object
    centers: object
    assign: jax.Array
    round: jax.Array


def check_tc_config(cfg):
    """Validates the TC fields (radius / radius_quantile, tc_iters, tc_method) and the
    Byzantine fields of an FC or MC config."""
    check_radius(cfg.radius, cfg.radius_quantile)
    if not isinstance(cfg.tc_iters, int) or cfg.tc_iters < 1:
        raise ValueError(f"tc_iters (l) must be an integer >= 1, got {cfg.tc_iters!r}")
    if cfg.tc_method not in TC_METHODS:
        raise ValueError(f"tc_method must be one of {TC_METHODS}, got {cfg.tc_method!r}")
    check_byzantine_config(cfg)


def check_byzantine_config(cfg):
    if not 0 <= cfg.byz_frac < 1:
        raise ValueError(f"byz_frac must be in [0, 1), got {cfg.byz_frac}")
    attack_from_config(cfg)
    check_chunk(cfg.chunk)


def init_personal(model, key, data, same_init: bool):
    """[N, ...] client models: one draw broadcast to all (``same_init``) or one each."""
    n = data.num_clients
    if same_init:
        p = model.init(key)
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), p)
    return jax.vmap(model.init)(jax.random.split(key, n))


def personal_state(params, data, momentum=None, centers=None) -> PersonalState:
    return PersonalState(params=params, momentum=momentum, centers=centers,
                         assign=jnp.full((data.num_clients,), -1, jnp.int32),
                         round=jnp.zeros((), jnp.int32))


def own_gradients(model, local, attack, params, data, key, byz_frac, chunk):
    """[N, P] flat gradients of every client at its own model (``local``: the minibatch
    rule), the Byzantine rows computed as the attack says and then corrupted. Keys: client
    i's minibatch from ``client_keys(key, i)``, the attack's noise from fold_in(key, 7)."""
    n = data.num_clients
    byz = byzantine_mask(n, byz_frac)
    keys = client_keys(key, jnp.arange(n, dtype=jnp.int32))
    start = jax.tree.map(lambda b, g: jnp.where(byz.reshape((-1,) + (1,) * (g.ndim - 1)), b, g),
                         attack.eval_params(params), params)

    def per_client(i, x, y, c, p, kk):
        y = client_labels(attack, y, byz[i], data.num_classes)
        return client_gradient(model, local, p, x, y, c, kk)

    g = map_client_data(per_client, data, None, start, keys, chunk=chunk)
    return flatten_stacked(attack.corrupt(PERSONAL_KEYS.key(key, "attack"), g,
                                          jnp.zeros_like(byz, jnp.int32), byz, 1,
                                          num_byzantine(n, byz_frac)))


def step_params(params, direction, lr):
    """params [N, ...] - lr * direction, direction [N, P] flat in ``flatten_stacked`` order."""
    step = unflatten_stacked(direction, params)
    return jax.tree.map(lambda a, s: a - lr * s, params, step)


class PersonalModels(Algorithm):
    """Base of FC, MC and Myopic: the model, the config, the attack, and the evaluation."""

    client_vectors = 1

    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        self.attack = attack_from_config(cfg)

    def check_data(self, data):
        num_byzantine(data.num_clients, self.cfg.byz_frac)
        k = getattr(self.cfg, "num_clusters", None)
        if k is not None and k > data.num_clients:
            raise ValueError(f"K = {k} clusters is more than the {data.num_clients} clients; "
                             "choose K <= number of clients")

    def objective(self, state, data):
        """Mean training loss of the honest clients' own models."""
        loss, _ = own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk)
        byz = byzantine_mask(data.num_clients, self.cfg.byz_frac)
        return jnp.sum(jnp.where(byz, 0.0, loss)) / jnp.maximum(jnp.sum(~byz), 1)

    def evaluate(self, state, data) -> dict:
        """Client i's own model on its own test data (both protocols coincide)."""
        loss, acc = own_loss_ids(self.model, state.params, data, None, chunk=self.cfg.chunk,
                                 test=True)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss,
                    assigned_test_acc=acc, assign=state.assign, client_params=state.params)
