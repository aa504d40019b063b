"""Momentum-Clustering (MC, Alg. 4 of the threshold-clustering paper): personalized robust
FL with K momentum clusters; every client i keeps its own model x_i ([N, ...]).

Per round: g_i = client i's gradient at x_i; m_i = alpha g_i + (1 - alpha) m_i (alpha
weights the NEW gradient, m_0 = 0); {v_k} = TC({m_i}, K, init = last round's centers,
l iterations) (``core.threshold_clustering``); x_i -= eta v_{k_i}. The paper leaves the
assignment k_i and the first centers open: k_i = the nearest center, and round 0's
centers are k-means (k-means++ seeding, 10 Lloyd steps) of the momenta, computed in
round 0 only (a ``lax.cond``; under a vmap over restarts both branches run).
Byzantine clients (the last round(byz_frac N)) send the attack's vectors.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.base import ScoresClusters
from fedclust_jax.algorithms.personal import (PersonalModels, PersonalState, check_tc_config,
                                              init_personal, own_gradients, personal_state,
                                              step_params)
from fedclust_jax.attacks import ByzantineSetting
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.pairwise import sq_distances
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.threshold_clustering import threshold_clustering
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.core.keys import MC_KEYS
from fedclust_jax.bounds import Count, Fraction, Size
from fedclust_jax.config_check import check_config


@dataclasses.dataclass(frozen=True)
class MCConfig(ByzantineSetting):
    """Momentum-Clustering's settings (the Byzantine fields are ``ByzantineSetting``'s;
    placement is unused).

    num_clusters: number of centers K;
    alpha: weight of the new gradient in the momentum;
    local: lr = eta;
    tc_iters: l, threshold-clustering iterations;
    radius: TC radius (None: from radius_quantile; set exactly one);
    radius_quantile: the radius as this quantile of the distances to the center;
    same_init: every client starts from one model;
    chunk: clients per vectorized chunk ("auto": chosen per backend, None: all at once);
    tc_method: TC's "points" (default; its TC runs over all N clients, where the Gram
    matrix costs N^2 P) or "gram" (``threshold_clustering``).
    Static: byz_frac (which clients are Byzantine, a count)."""

    num_clusters: Size = 2
    alpha: Fraction = 0.1
    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    tc_iters: Count = 10
    radius: float | None = None
    radius_quantile: Fraction | None = 0.2
    tc_method: str = "points"
    same_init: bool = True
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("alpha", "radius", "radius_quantile") + ByzantineSetting.TRACED

    def __post_init__(self):
        check_config(self)
        check_tc_config(self)


def momentum_update(momentum, grads, alpha):
    """m <- alpha g + (1 - alpha) m (Alg. 4; alpha weights the new gradient)."""
    return alpha * grads + (1 - alpha) * momentum


class MomentumClustering(ScoresClusters, PersonalModels):
    """Momentum-Clustering: threshold clustering of client momenta into K centers."""

    name = "mc"
    clusters_clients = True

    def __init__(self, model, cfg: MCConfig = MCConfig()):
        super().__init__(model, cfg)

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = init_personal(self.model, key, data, self.cfg.same_init)
        p = flatten_stacked(params).shape[1]
        n, k = data.num_clients, self.cfg.num_clusters
        return personal_state(params, data, momentum=jnp.zeros((n, p), jnp.float32),
                              centers=jnp.zeros((k, p), jnp.float32))

    def round(self, state, key, data):
        cfg = self.cfg
        g = own_gradients(self.model, cfg.local, self.attack, state.params, data, key,
                          cfg.byz_frac, cfg.chunk)
        m = momentum_update(state.momentum, g, cfg.alpha)
        init = jax.lax.cond(
            state.round == 0,
            lambda: kmeans(MC_KEYS.key(key, "kmeans"), m, cfg.num_clusters, iters=10)[0],
            lambda: state.centers)
        centers = threshold_clustering(m, init, iters=cfg.tc_iters, radius=cfg.radius,
                                       quantile=cfg.radius_quantile, method=cfg.tc_method)
        assign = jnp.argmin(sq_distances(m, centers), axis=1).astype(jnp.int32)
        params = step_params(state.params, centers[assign], cfg.local.lr_at(state.round))
        return PersonalState(params=params, momentum=m, centers=centers, assign=assign,
                             round=state.round + 1), dict(
            momentum_norm=jnp.linalg.norm(m, axis=1).mean())
