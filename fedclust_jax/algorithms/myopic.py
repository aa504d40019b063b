"""Myopic-Clustering (Alg. 1 of the threshold-clustering paper, its strawman): every
client keeps its own model x_i ([N, ...]); each round the server clusters the current
gradients {g_i(x_i)} into K centers (k-means, k-means++ seeding; the paper leaves the
method open) and x_i -= eta v_{k_i}. Byzantine clients send the attack's vectors."""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.base import ScoresClusters
from fedclust_jax.algorithms.personal import (PersonalModels, PersonalState,
                                              check_byzantine_config, init_personal,
                                              own_gradients, personal_state, step_params)
from fedclust_jax.attacks import ByzantineSetting
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.core.keys import MYOPIC_KEYS
from fedclust_jax.bounds import Count, Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class MyopicConfig(ByzantineSetting):
    """Myopic-Clustering's settings (the Byzantine fields are ``ByzantineSetting``'s;
    placement is unused).

    num_clusters: number of centers K;
    local: lr = eta;
    kmeans_iters: Lloyd iterations per round;
    same_init: every client starts from one model;
    chunk: clients per vectorized chunk ("auto": chosen per backend, None: all at once).
    Static: byz_frac (which clients are Byzantine, a count)."""

    num_clusters: Size = 2
    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    kmeans_iters: Count = 20
    same_init: bool = True
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ByzantineSetting.TRACED

    def __post_init__(self):
        check_config(self)
        check_byzantine_config(self)


def myopic_direction(key, grads, k: int, iters: int = 20):
    """(v [N, P], assign int32[N]): the k-means center of each client's gradient cluster."""
    centres, labels, _ = kmeans(key, grads, k, iters=iters)
    return centres[labels], labels


class Myopic(ScoresClusters, PersonalModels):
    """Myopic-Clustering strawman: k-means of the current gradients."""

    name = "myopic"
    clusters_clients = True

    def __init__(self, model, cfg: MyopicConfig = MyopicConfig()):
        super().__init__(model, cfg)

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = init_personal(self.model, key, data, self.cfg.same_init)
        return personal_state(params, data)

    def round(self, state, key, data):
        cfg = self.cfg
        g = own_gradients(self.model, cfg.local, self.attack, state.params, data, key,
                          cfg.byz_frac, cfg.chunk)
        v, assign = myopic_direction(MYOPIC_KEYS.key(key, "kmeans"), g, cfg.num_clusters,
                                     cfg.kmeans_iters)
        params = step_params(state.params, v, cfg.local.lr_at(state.round))
        return state.replace(params=params, assign=assign, round=state.round + 1), dict(
            step_norm=jnp.linalg.norm(v, axis=1).mean())
