"""Federated-Clustering (FC, Alg. 2 of the threshold-clustering paper): personalized robust
FL, every client i keeping its own model x_i (params with leading axis N).

Per round t: G_i = {g_j(x_{i,t-1}) : j in the group of i} (client j's gradient, on a fresh
minibatch when ``batch_size`` is set, at client i's model); v_i = TC(G_i, K = 1, init
g_i(x_{i,t-1}), l iterations) (``core.threshold_clustering``); x_{i,t} = x_{i,t-1} - eta v_i.
O(N^2) gradients a round; ``num_groups`` > 1 splits the clients into that many random
subgroups every round (the paper's MNIST runs: 16) and FC runs inside each. TC divides by
the group size; points outside the radius count as the center; the radius is fixed
(``radius``) or the ``radius_quantile`` of the distances to the center, recomputed every
iteration (MNIST: 0.2, Section 4.3: 0.1). Byzantine clients (the last round(byz_frac N))
send the attack's vectors (to every client).

Keys in round ``key``: groups fold_in(key, 3); client j's minibatch for client i's model
fold_in(client_keys(key, j), i); the attack's noise at client i fold_in(fold_in(key, 7), i).
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.personal import (PersonalModels, PersonalState, check_tc_config,
                                              init_personal, personal_state, step_params)
from fedclust_jax.attacks import ByzantineSetting
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.attacks.rounds import client_labels
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.threshold_clustering import threshold_clustering
from fedclust_jax.core.train import LocalTraining, client_gradient
from fedclust_jax.core.keys import FC_KEYS
from fedclust_jax.bounds import Count, Fraction, Size
from fedclust_jax.config_check import check_config


def fc_direction(grads, own, *, iters, radius=None, quantile=None, mask=None, method="gram"):
    """FC's server step for one client: TC with K = 1 over grads [S, P] started at ``own``
    [P] (the client's own gradient); ``mask`` bool[S] marks real group members; ``method``:
    see ``threshold_clustering``. Returns v [P]."""
    return threshold_clustering(grads, own[None], iters=iters, radius=radius,
                                quantile=quantile, mask=mask, method=method)[0]


def random_groups(key, num_clients: int, num_groups: int):
    """(members int32[N, S], mask bool[N, S]): the members of each client's random subgroup
    (a fresh permutation cut into ``num_groups`` groups of at most S = ceil(N / G))."""
    size = -(-num_clients // num_groups)
    perm = jax.random.permutation(key, num_clients) if num_groups > 1 else jnp.arange(num_clients)
    padded = jnp.full((num_groups * size,), -1, jnp.int32).at[:num_clients].set(perm)
    groups = padded.reshape(num_groups, size)
    group_of = jnp.zeros((num_clients,), jnp.int32).at[perm].set(
        jnp.arange(num_clients, dtype=jnp.int32) // size)
    members = groups[group_of]
    return jnp.maximum(members, 0), members >= 0


@dataclasses.dataclass(frozen=True)
class FCConfig(ByzantineSetting):
    """Federated-Clustering's settings (the Byzantine fields are ``ByzantineSetting``'s;
    placement is unused).

    local: lr = eta, batch_size (None = full batch; else a fresh minibatch per gradient);
    tc_iters: l, threshold-clustering iterations;
    radius: TC radius (None: from radius_quantile; set exactly one);
    radius_quantile: the radius as this quantile of the distances to the center;
    num_groups: random subgroups per round (1 = all clients);
    same_init: every client starts from one model;
    chunk: clients per vectorized chunk (memory: chunk x S gradients);
    tc_method: TC's "gram" (default; faster for FC's small groups) or "points", the same
    result up to float32 rounding.
    Static: byz_frac (which clients are Byzantine, a count)."""

    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    tc_iters: Count = 10
    radius: float | None = None
    radius_quantile: Fraction | None = 0.2
    tc_method: str = "gram"
    num_groups: Size = 1
    same_init: bool = True
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("radius", "radius_quantile") + ByzantineSetting.TRACED

    def __post_init__(self):
        check_config(self)
        check_tc_config(self)


class FederatedClustering(PersonalModels):
    """Federated-Clustering: threshold clustering of all clients' gradients at each client's model."""

    name = "fc"
    clusters_clients = False

    def __init__(self, model, cfg: FCConfig = FCConfig()):
        super().__init__(model, cfg)

    def check_data(self, data):
        super().check_data(data)
        if self.cfg.num_groups > data.num_clients:
            raise ValueError(f"num_groups = {self.cfg.num_groups} exceeds the "
                             f"{data.num_clients} clients")

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = init_personal(self.model, key, data, self.cfg.same_init)
        return personal_state(params, data)

    def round(self, state, key, data):
        cfg, n, model, attack = self.cfg, data.num_clients, self.model, self.attack
        byz = byzantine_mask(n, cfg.byz_frac)
        nb = num_byzantine(n, cfg.byz_frac)
        members, mask = random_groups(FC_KEYS.key(key, "groups"), n, cfg.num_groups)
        ids = jnp.arange(n, dtype=jnp.int32)
        keys = client_keys(key, ids)
        noise = FC_KEYS.key(key, "attack")
        lr = cfg.local.lr_at(state.round)

        def per_client(p, i, mem, msk):
            bad_p = attack.eval_params(p)

            def grad_j(j):
                kj = jax.random.fold_in(keys[j], i)
                start = jax.tree.map(lambda b, g: jnp.where(byz[j], b, g), bad_p, p)
                x, y, c = data.train_client(j)
                y = client_labels(attack, y, byz[j], data.num_classes)
                return client_gradient(model, cfg.local, start, x, y, c, kj)

            g = jax.vmap(grad_j)(mem)                                   # [S, ...]
            g = attack.corrupt(jax.random.fold_in(noise, i), g, jnp.zeros_like(mem),
                               byz[mem] & msk, 1, nb)
            flat = flatten_stacked(g)
            own = jnp.argmax(mem == i)
            return fc_direction(flat, flat[own], iters=cfg.tc_iters, radius=cfg.radius,
                                quantile=cfg.radius_quantile, mask=msk, method=cfg.tc_method)

        v = map_clients(per_client, state.params, ids, members, mask, chunk=cfg.chunk)
        params = step_params(state.params, v, lr)
        return state.replace(params=params, round=state.round + 1), dict(
            step_norm=jnp.linalg.norm(v, axis=1).mean())
