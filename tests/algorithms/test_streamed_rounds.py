"""Streamed rounds of FedAvg, Ditto (global model) and ONE_SHOT-IFCA equal the materialised
rounds (every participant's model built, then averaged), kept here as the reference; IFCA
and the streaming primitive at every chunk size: tests/core/test_streaming.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.ditto import Ditto, DittoConfig, DittoState, personal_step
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.oneshot_ifca import OneShotIFCA, OneShotIFCAConfig, OneShotIFCAState
from fedclust_jax.core.aggregate import cluster_mean, global_mean
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.participation import client_keys, participants
from fedclust_jax.core.pytree import take
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.models.mlp import mlp
from helpers import assert_trees_close, ragged_classification

ALG_CHUNKS = (3,)              # one padded scan (one vmap: tests/core/test_streaming.py)


small_data = ragged_classification
close = assert_trees_close


# ---- the materialised rounds (reference)-------------------------------------------------

def reference_fedavg_round(alg, state, key, data):
    cfg = alg.cfg
    idx, keys = participants(key, data.num_clients, cfg.participation)
    part = data.take(idx)
    lr = cfg.local.lr_at(state.round)
    trained = map_clients(lambda x, y, c, kk: local_train(alg.model, cfg.local, state.params, x, y, c, kk, lr),
                          part.x, part.y, part.count, keys)
    w = None if cfg.weighting == "equal" else part.count.astype(jnp.float32)
    return global_mean(trained, weights=w)


def reference_ditto_round(alg, state, key, data):
    cfg, model, n = alg.cfg, alg.model, data.num_clients
    keys = client_keys(key, jnp.arange(n, dtype=jnp.int32))
    lr = cfg.local.lr_at(state.round)
    w = state.global_params
    trained = map_clients(lambda x, y, c, k: local_train(model, cfg.local, w, x, y, c, k, lr),
                          data.x, data.y, data.count, keys)
    personal = map_clients(
        lambda v, x, y, c, k: personal_step(model, cfg.local, cfg.lam, lr, cfg.local.steps, v, w,
                                            x, y, c, jax.random.fold_in(k, 1)),
        state.params, data.x, data.y, data.count, keys)
    return global_mean(trained), personal


@pytest.mark.parametrize("case", [dict(), dict(participation=0.4, weighting="samples")])
def test_fedavg_streamed_round_equals_materialised(case):
    data = small_data()
    model = mlp((6, 4, 3))
    first = FedAvg(model, FedAvgConfig(local=LocalTraining(steps=3, lr=0.2), **case))
    state = first.init(jax.random.key(5), data)
    want = jax.jit(lambda s, k: reference_fedavg_round(first, s, k, data))(state, jax.random.key(6))
    for chunk in ALG_CHUNKS:
        alg = FedAvg(model, FedAvgConfig(local=LocalTraining(steps=3, lr=0.2), chunk=chunk, **case))
        got, _ = jax.jit(alg.round)(state, jax.random.key(6), data)
        close(got.params, want)


def test_ditto_streamed_round_equals_materialised():
    data = small_data()
    model = mlp((6, 4, 3))
    cfg = dict(local=LocalTraining(steps=2, lr=0.2), lam=0.5)
    first = Ditto(model, DittoConfig(**cfg))
    state = first.init(jax.random.key(7), data)
    state = DittoState(global_params=state.global_params,   # personal models differ from w
                       params=jax.vmap(model.init)(jax.random.split(jax.random.key(8), 10)),
                       round=state.round)
    w, personal = jax.jit(lambda s, k: reference_ditto_round(first, s, k, data))(
        state, jax.random.key(9))
    for chunk in ALG_CHUNKS:
        alg = Ditto(model, DittoConfig(**cfg, chunk=chunk))
        got, _ = jax.jit(alg.round)(state, jax.random.key(9), data)
        close(got.global_params, w)
        close(got.params, personal)


def test_oneshot_ifca_streamed_round_equals_materialised():
    """Some clusters inactive: no participant may join them (their loss is masked)."""
    data = small_data()
    model = mlp((6, 4, 3))
    k_max = 4
    state = OneShotIFCAState(params=jax.vmap(model.init)(jax.random.split(jax.random.key(11), k_max)),
                             active=jnp.array([True, False, True, False]),
                             assign=jnp.full((data.num_clients,), -1, jnp.int32),
                             round=jnp.zeros((), jnp.int32))
    key = jax.random.key(12)
    local = LocalTraining(steps=2, lr=0.2)

    @jax.jit
    def reference(state, key):
        idx, keys = participants(key, data.num_clients, 0.7)
        part = data.take(idx)
        loss = loss_matrix(model, state.params, part.x, part.y, part.count)[0]
        assign = jnp.argmin(jnp.where(state.active[None], loss, jnp.inf), axis=1)
        trained = map_clients(
            lambda p, x, y, c, k: local_train(model, local, p, x, y, c, k, 0.2),
            take(state.params, assign), part.x, part.y, part.count, keys)
        return cluster_mean(trained, assign, state.params), state.assign.at[idx].set(assign)

    params, assign = reference(state, key)
    assert set(np.asarray(assign).tolist()) <= {-1, 0, 2}
    for chunk in ALG_CHUNKS:
        alg = OneShotIFCA(model, OneShotIFCAConfig(participation=0.7, chunk=chunk, local=local))
        got, _ = jax.jit(alg.round)(state, key, data)
        close(got.params, params)
        np.testing.assert_array_equal(got.assign, assign)
