"""SR-FCA's ONE_SHOT step (Algorithm 1, first line), shared by SR-FCA and ONE_SHOT-IFCA.

Every client trains T local steps from one common init w_0 (the authors' code: each from
its own random init, ``init="independent"``); the server builds the [N, N]
client distance matrix, links clients at distance <= lambda and keeps the connected
components (or the authors' greedy pivot clusters) of at least t clients.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.graph import connected_components, pivot_clustering, relabel_by_size
from fedclust_jax.core.losses import loss_matrix_ids
from fedclust_jax.core.pairwise import client_cross_loss, l2_distances, upper_quantile
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.traced import concrete
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.core.keys import ONESHOT_INIT_KEYS

METRICS = ("cross_loss", "l2")
GRAPHS = ("components", "pivot")
ONE_SHOT_INITS = ("common", "independent")


def check_graph_options(*, lam, lam_quantile, t, metric, graph):
    """Raises ValueError on a bad threshold / size / metric / graph option."""
    if lam_quantile is None and (lam is None or (concrete(lam) and not lam >= 0)):
        raise ValueError(f"threshold lambda must be >= 0 (or give lam_quantile), got {lam!r}")
    if lam_quantile is not None and not 0 <= lam_quantile <= 1:
        raise ValueError(f"lam_quantile must be in [0, 1], got {lam_quantile!r}")
    if not isinstance(t, int) or t < 1:
        raise ValueError(f"size parameter t must be an integer >= 1, got {t!r}")
    if metric not in METRICS:
        raise ValueError(f"distance must be one of {METRICS}, got {metric!r}")
    if graph not in GRAPHS:
        raise ValueError(f"graph step must be one of {GRAPHS}, got {graph!r}")


@struct.dataclass
class OneShotResult:
    """w0: the common init; local: [N, ...] local models w_{i,T}; client_loss: [N, N]
    f_i(w_j) on training data (zeros for metric "l2"); dist: [N, N] client distances;
    lam: the threshold used (scalar); labels: int32[N] initial clusters C_0 (-1 =
    unassigned), numbered by decreasing size, at most k_max of them."""

    w0: object
    local: object
    client_loss: jax.Array
    dist: jax.Array
    lam: jax.Array
    labels: jax.Array


def train_local_models(model, local: LocalTraining, start, data, key, chunk=None):
    """[N, ...] params: every client's ``local.steps`` steps from its ``start`` [N, ...]."""
    n = data.num_clients
    keys = client_keys(key, jnp.arange(n))
    return map_client_data(
        lambda i, x, y, c, p, k: local_train(model, local, p, x, y, c, k, local.lr),
        data, None, start, keys, chunk=chunk)


def client_distances(model, local_params, data, metric: str, chunk=None):
    """(dist [N, N], client_loss [N, N]) between local models: cross-cluster loss on
    training data (Def. 5.1) or L2 between weights (client_loss then zeros)."""
    if metric == "l2":
        n = data.num_clients
        return l2_distances(flatten_stacked(local_params)), jnp.zeros((n, n), jnp.float32)
    loss, _ = loss_matrix_ids(model, local_params, data, None, chunk=chunk)
    return client_cross_loss(loss), loss


def one_shot(key, model, data, *, local: LocalTraining, lam, lam_quantile, t: int,
             metric: str = "cross_loss", graph: str = "components", k_max: int | None = None,
             init: str = "common", chunk=None) -> OneShotResult:
    """ONE_SHOT(lambda, t). ``local`` is the clients' training (T = local.steps);
    lam_quantile (the authors' code option) sets lambda to that quantile of the pairwise
    distances instead of ``lam``; graph "components" (paper) or "pivot" (code); init
    "common" (paper: all clients start from w_0) or "independent" (code: every client's
    model is initialised on its own, from keys split off w_0's key)."""
    check_graph_options(lam=lam, lam_quantile=lam_quantile, t=t, metric=metric, graph=graph)
    if init not in ONE_SHOT_INITS:
        raise ValueError(f"ONE_SHOT init must be one of {ONE_SHOT_INITS}, got {init!r}")
    k_init, k_train, k_graph = jax.random.split(key, 3)
    w0 = model.init(k_init)
    n = data.num_clients
    if init == "common":
        start = jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), w0)
    else:
        start = jax.vmap(model.init)(jax.random.split(ONESHOT_INIT_KEYS.key(k_init, "independent"), n))
    local_params = train_local_models(model, local, start, data, k_train, chunk)
    dist, closs = client_distances(model, local_params, data, metric, chunk)
    lam_v = upper_quantile(dist, lam_quantile) if lam_quantile is not None else jnp.float32(lam)
    adj = dist <= lam_v
    if graph == "components":
        labels = connected_components(adj, t)
    else:
        labels = pivot_clustering(k_graph, adj, t)
    labels = relabel_by_size(labels, n if k_max is None else k_max)
    return OneShotResult(w0=w0, local=local_params, client_loss=closs, dist=dist,
                         lam=jnp.asarray(lam_v, jnp.float32), labels=labels)


def replace_steps(local: LocalTraining, steps: int) -> LocalTraining:
    return dataclasses.replace(local, steps=steps)
