"""Personalized robust FL by threshold clustering: Federated-Clustering (FC, Alg. 2),
Momentum-Clustering (MC, Alg. 4) and the Myopic-Clustering strawman (Alg. 1).

Every client i keeps its own model x_i (params with leading axis N).

FC, per round t: G_i = {g_j(x_{i,t-1}) : j in the group of i} (client j's gradient, on a
  fresh minibatch when ``batch_size`` is set, at client i's model); v_i = TC(G_i, K = 1,
  init g_i(x_{i,t-1}), l iterations); x_{i,t} = x_{i,t-1} - eta v_i. O(N^2) gradients a
  round; ``num_groups`` > 1 splits the clients into that many random subgroups every round
  (the paper's MNIST runs: 16) and FC runs inside each.
MC: m_i = alpha g_i(x_i) + (1 - alpha) m_i (alpha weights the NEW gradient, m_0 = 0);
  {v_k} = TC({m_i}, K, init = last round's centers, l iterations); x_i -= eta v_{k_i}. The
  paper leaves the assignment k_i and the first centers open: k_i = the nearest center, and
  the first round's centers are k-means (k-means++ seeding, 10 Lloyd steps) of the momenta.
Myopic: the server clusters {g_i(x_i)} into K centers (k-means, k-means++ seeding; the
  paper leaves the method open) and x_i -= eta v_{k_i}.
TC (``core.robust.threshold_clustering``): divide by N, points outside the radius count as
the center; radius fixed (``radius``) or the ``radius_quantile`` of the distances to the
center, recomputed every iteration (MNIST: 0.2, Section 4.3: 0.1).
Byzantine clients (the last round(byz_frac N)) send the attack's vectors (to every client).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import check_chunk, check_clusters
from fedclust_jax.attacks import ByzantineSetting, attack_from_config
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.kmeans import kmeans, sq_distances
from fedclust_jax.core.losses import own_loss
from fedclust_jax.core.participation import client_keys
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.robust import TC_METHODS, threshold_clustering
from fedclust_jax.core.train import LocalTraining, client_gradient


def _check_radius(radius, quantile):
    if (radius is None) == (quantile is None):
        raise ValueError("set exactly one of radius (fixed tau) and radius_quantile")
    if radius is not None and not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if quantile is not None and not 0 < quantile <= 1:
        raise ValueError(f"radius_quantile must be in (0, 1], got {quantile}")


def _check_common(cfg):
    _check_radius(cfg.radius, cfg.radius_quantile)
    if not isinstance(cfg.tc_iters, int) or cfg.tc_iters < 1:
        raise ValueError(f"tc_iters (l) must be an integer >= 1, got {cfg.tc_iters!r}")
    if cfg.tc_method not in TC_METHODS:
        raise ValueError(f"tc_method must be one of {TC_METHODS}, got {cfg.tc_method!r}")
    if not 0 <= cfg.byz_frac < 1:
        raise ValueError(f"byz_frac must be in [0, 1), got {cfg.byz_frac}")
    attack_from_config(cfg)
    check_chunk(cfg.chunk)


def _unflatten_like(flat, like):
    """[N, P] -> pytree shaped like ``like`` (leading axis N)."""
    leaves, tree = jax.tree.flatten(like)
    out, start = [], 0
    for a in leaves:
        size = a[0].size
        out.append(flat[:, start:start + size].reshape(a.shape).astype(a.dtype))
        start += size
    return jax.tree.unflatten(tree, out)


def fc_direction(grads, own, *, iters, radius=None, quantile=None, mask=None, method="gram"):
    """FC's server step for one client: TC with K = 1 over grads [S, P] started at ``own``
    [P] (the client's own gradient); ``mask`` bool[S] marks real group members; ``method``:
    see ``threshold_clustering``."""
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


@struct.dataclass
class PersonalState:
    """params: client models [N, ...]; momentum: [N, P] (MC) or None; centers: [K, P] (MC)
    or None; assign: int32[N] (MC, Myopic; -1 for FC); round: int32."""

    params: object
    momentum: object
    centers: object
    assign: jax.Array
    round: jax.Array


def _init_personal(model, key, data, same_init: bool):
    n = data.num_clients
    if same_init:
        p = model.init(key)
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), p)
    return jax.vmap(model.init)(jax.random.split(key, n))


def _evaluate_personal(model, state, data, chunk):
    """Client i's own model on its own test data (both protocols coincide)."""
    loss, acc = own_loss(model, state.params, data.x_test, data.y_test, data.count_test, chunk=chunk)
    return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss, assigned_test_acc=acc,
                assign=state.assign, client_params=state.params)


def _objective_personal(model, params, data, byz_frac, chunk):
    loss, _ = own_loss(model, params, data.x, data.y, data.count, chunk=chunk)
    byz = byzantine_mask(data.num_clients, byz_frac)
    return jnp.sum(jnp.where(byz, 0.0, loss)) / jnp.maximum(jnp.sum(~byz), 1)


@dataclasses.dataclass(frozen=True)
class FCConfig(ByzantineSetting):
    """local: lr = eta, batch_size (None = full batch; else a fresh minibatch per gradient);
    tc_iters: l; radius / radius_quantile: TC radius (exactly one); num_groups: random
    subgroups per round (1 = all clients); same_init: every client starts from one model;
    byz_frac and attack fields: see ``fedclust_jax.attacks`` (placement is unused);
    chunk: clients per vectorized chunk (memory: chunk x S gradients); tc_method: TC's
    "gram" (default; MNIST MLP, l = 10, S = 19, quiet 2-core CPU: 4.0-4.5 s a round
    against 4.9-5.6 s with "points", benchmarks/threshold_tc_methods.py) or "points"
    (``threshold_clustering``); the same result up to float32 rounding."""

    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    tc_iters: int = 10
    radius: float | None = None
    radius_quantile: float | None = 0.2
    tc_method: str = "gram"
    num_groups: int = 1
    same_init: bool = True
    chunk: int | None = None

    def __post_init__(self):
        _check_common(self)
        if not isinstance(self.num_groups, int) or self.num_groups < 1:
            raise ValueError(f"num_groups must be an integer >= 1, got {self.num_groups!r}")


class FederatedClustering:
    name = "fc"
    clusters_clients = False

    def __init__(self, model, cfg: FCConfig = FCConfig()):
        self.model, self.cfg = model, cfg
        self.attack = attack_from_config(cfg)

    def check_data(self, data):
        num_byzantine(data.num_clients, self.cfg.byz_frac)
        if self.cfg.num_groups > data.num_clients:
            raise ValueError(f"num_groups = {self.cfg.num_groups} exceeds the "
                             f"{data.num_clients} clients")

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = _init_personal(self.model, key, data, self.cfg.same_init)
        return PersonalState(params=params, momentum=None, centers=None,
                             assign=jnp.full((data.num_clients,), -1, jnp.int32),
                             round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        cfg, n, model, attack = self.cfg, data.num_clients, self.model, self.attack
        byz = byzantine_mask(n, cfg.byz_frac)
        nb = num_byzantine(n, cfg.byz_frac)
        members, mask = random_groups(jax.random.fold_in(key, 3), n, cfg.num_groups)
        ids = jnp.arange(n, dtype=jnp.int32)
        keys = client_keys(key, ids)
        y_all = attack.flip_labels(data.y, byz, data.num_classes)
        lr = cfg.local.lr_at(state.round)

        def per_client(p, i, mem, msk):
            bad_p = attack.eval_params(p)

            def grad_j(j):
                kj = jax.random.fold_in(keys[j], i)
                start = jax.tree.map(lambda b, g: jnp.where(byz[j], b, g), bad_p, p)
                return client_gradient(model, cfg.local, start, data.x[j], y_all[j],
                                       data.count[j], kj)

            g = jax.vmap(grad_j)(mem)                                   # [S, ...]
            g = attack.corrupt(jax.random.fold_in(keys[i], 7), g, jnp.zeros_like(mem),
                               byz[mem] & msk, 1, nb)
            flat = flatten_stacked(g)
            own = jnp.argmax(mem == i)
            v = fc_direction(flat, flat[own], iters=cfg.tc_iters, radius=cfg.radius,
                             quantile=cfg.radius_quantile, mask=msk, method=cfg.tc_method)
            return v

        v = map_clients(per_client, state.params, ids, members, mask, chunk=cfg.chunk)
        step = _unflatten_like(v, state.params)
        params = jax.tree.map(lambda a, s: a - lr * s, state.params, step)
        return state.replace(params=params, round=state.round + 1), dict(
            step_norm=jnp.linalg.norm(v, axis=1).mean())

    def objective(self, state, data):
        return _objective_personal(self.model, state.params, data, self.cfg.byz_frac, self.cfg.chunk)

    def evaluate(self, state, data) -> dict:
        return _evaluate_personal(self.model, state, data, self.cfg.chunk)


def _own_gradients(model, local, attack, params, data, byz, keys, nb, k, key, chunk):
    """[N, P]: every client's gradient at its own model (Byzantine rows attacked)."""
    y = attack.flip_labels(data.y, byz, data.num_classes)
    start = jax.tree.map(lambda b, g: jnp.where(byz.reshape((-1,) + (1,) * (g.ndim - 1)), b, g),
                         attack.eval_params(params), params)
    g = map_clients(lambda p, x, yy, c, kk: client_gradient(model, local, p, x, yy, c, kk),
                    start, data.x, y, data.count, keys, chunk=chunk)
    return flatten_stacked(attack.corrupt(key, g, jnp.zeros_like(byz, jnp.int32), byz, 1, nb))


@dataclasses.dataclass(frozen=True)
class MCConfig(ByzantineSetting):
    """num_clusters: K; alpha: weight of the new gradient in the momentum; local: lr = eta;
    tc_iters: l; radius / radius_quantile: TC radius; same_init; byz_frac and attack fields
    (placement unused); chunk; tc_method: TC's "points" (default; its TC runs over all N
    clients, where the Gram matrix costs N^2 P) or "gram" (``threshold_clustering``)."""

    num_clusters: int = 2
    alpha: float = 0.1
    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    tc_iters: int = 10
    radius: float | None = None
    radius_quantile: float | None = 0.2
    tc_method: str = "points"
    same_init: bool = True
    chunk: int | None = None

    def __post_init__(self):
        check_clusters(self.num_clusters)
        if not 0 < self.alpha <= 1:
            raise ValueError(f"momentum alpha must be in (0, 1], got {self.alpha}")
        _check_common(self)


def momentum_update(momentum, grads, alpha):
    """m <- alpha g + (1 - alpha) m (Alg. 4; alpha weights the new gradient)."""
    return alpha * grads + (1 - alpha) * momentum


class _KClustersPersonal:
    """Shared by MC and Myopic: K gradient clusters over personal models under attack."""

    clusters_clients = True

    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        self.attack = attack_from_config(cfg)

    def check_data(self, data):
        check_clusters(self.cfg.num_clusters, data.num_clients)
        num_byzantine(data.num_clients, self.cfg.byz_frac)


class MomentumClustering(_KClustersPersonal):
    name = "mc"

    def __init__(self, model, cfg: MCConfig = MCConfig()):
        super().__init__(model, cfg)

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = _init_personal(self.model, key, data, self.cfg.same_init)
        p = flatten_stacked(params).shape[1]
        n, k = data.num_clients, self.cfg.num_clusters
        return PersonalState(params=params, momentum=jnp.zeros((n, p), jnp.float32),
                             centers=jnp.zeros((k, p), jnp.float32),
                             assign=jnp.full((n,), -1, jnp.int32), round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        cfg, n = self.cfg, data.num_clients
        byz = byzantine_mask(n, cfg.byz_frac)
        keys = client_keys(key, jnp.arange(n, dtype=jnp.int32))
        g = _own_gradients(self.model, cfg.local, self.attack, state.params, data, byz, keys,
                           num_byzantine(n, cfg.byz_frac), cfg.num_clusters,
                           jax.random.fold_in(key, 7), cfg.chunk)
        m = momentum_update(state.momentum, g, cfg.alpha)
        seed = kmeans(jax.random.fold_in(key, 5), m, cfg.num_clusters, iters=10)[0]
        init = jnp.where(state.round == 0, seed, state.centers)
        centers = threshold_clustering(m, init, iters=cfg.tc_iters, radius=cfg.radius,
                                       quantile=cfg.radius_quantile, method=cfg.tc_method)
        assign = jnp.argmin(sq_distances(m, centers), axis=1).astype(jnp.int32)
        step = _unflatten_like(centers[assign], state.params)
        lr = cfg.local.lr_at(state.round)
        params = jax.tree.map(lambda a, s: a - lr * s, state.params, step)
        return PersonalState(params=params, momentum=m, centers=centers, assign=assign,
                             round=state.round + 1), dict(
            momentum_norm=jnp.linalg.norm(m, axis=1).mean())

    def objective(self, state, data):
        return _objective_personal(self.model, state.params, data, self.cfg.byz_frac, self.cfg.chunk)

    def evaluate(self, state, data) -> dict:
        return _evaluate_personal(self.model, state, data, self.cfg.chunk)


@dataclasses.dataclass(frozen=True)
class MyopicConfig(ByzantineSetting):
    """num_clusters: K; local: lr = eta; kmeans_iters: Lloyd iterations per round;
    same_init; byz_frac and attack fields (placement unused); chunk."""

    num_clusters: int = 2
    local: LocalTraining = LocalTraining(steps=1, lr=0.1)
    kmeans_iters: int = 20
    same_init: bool = True
    chunk: int | None = None

    def __post_init__(self):
        check_clusters(self.num_clusters)
        if not 0 <= self.byz_frac < 1:
            raise ValueError(f"byz_frac must be in [0, 1), got {self.byz_frac}")
        attack_from_config(self)
        check_chunk(self.chunk)


def myopic_direction(key, grads, k: int, iters: int = 20):
    """(v [N, P], assign int32[N]): the k-means center of each client's gradient cluster."""
    centres, labels, _ = kmeans(key, grads, k, iters=iters)
    return centres[labels], labels


class Myopic(_KClustersPersonal):
    name = "myopic"

    def __init__(self, model, cfg: MyopicConfig = MyopicConfig()):
        super().__init__(model, cfg)

    def init(self, key, data, params=None) -> PersonalState:
        if params is None:
            params = _init_personal(self.model, key, data, self.cfg.same_init)
        return PersonalState(params=params, momentum=None, centers=None,
                             assign=jnp.full((data.num_clients,), -1, jnp.int32),
                             round=jnp.zeros((), jnp.int32))

    def round(self, state, key, data):
        cfg, n = self.cfg, data.num_clients
        byz = byzantine_mask(n, cfg.byz_frac)
        keys = client_keys(key, jnp.arange(n, dtype=jnp.int32))
        g = _own_gradients(self.model, cfg.local, self.attack, state.params, data, byz, keys,
                           num_byzantine(n, cfg.byz_frac), cfg.num_clusters,
                           jax.random.fold_in(key, 7), cfg.chunk)
        v, assign = myopic_direction(jax.random.fold_in(key, 5), g, cfg.num_clusters, cfg.kmeans_iters)
        lr = cfg.local.lr_at(state.round)
        params = jax.tree.map(lambda a, s: a - lr * s, state.params, _unflatten_like(v, state.params))
        return state.replace(params=params, assign=assign, round=state.round + 1), dict(
            step_norm=jnp.linalg.norm(v, axis=1).mean())

    def objective(self, state, data):
        return _objective_personal(self.model, state.params, data, self.cfg.byz_frac, self.cfg.chunk)

    def evaluate(self, state, data) -> dict:
        return _evaluate_personal(self.model, state, data, self.cfg.chunk)
