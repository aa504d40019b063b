"""SR-FCA's other baselines: Local-KMeans, ONE_SHOT-IFCA, FedSoft."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax import metrics
from fedclust_jax.algorithms.fedsoft import FedSoft, FedSoftConfig, importance_weights
from fedclust_jax.algorithms.local_kmeans import LocalKMeans, LocalKMeansConfig
from fedclust_jax.algorithms.oneshot_ifca import OneShotIFCA, OneShotIFCAConfig
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.synthetic import gaussian_mixture_classification
from fedclust_jax.models.mlp import mlp


@functools.lru_cache(maxsize=None)
def mixture():
    return gaussian_mixture_classification(
        jax.random.key(0), num_clients=24, num_clusters=3, samples_per_client=60,
        test_samples_per_client=30, dim=8, num_classes=4, class_separation=4.0)


def run(alg, data, rounds, seed=0):
    state = jax.jit(alg.init)(jax.random.key(seed), data)
    step = jax.jit(alg.round)
    for t in range(rounds):
        state, _ = step(state, jax.random.key(100 + t), data)
    return state, jax.jit(alg.evaluate)(state, data)


def test_local_kmeans_clusters_local_models_and_uses_centroids():
    data = mixture()
    alg = LocalKMeans(mlp((8, 4)), LocalKMeansConfig(num_clusters=3, local=LocalTraining(steps=100, lr=0.1)))
    state, ev = run(alg, data, 1)
    assign = np.asarray(ev["assign"])
    assert metrics.misclustering(assign, data.cluster) == 0.0
    flat = np.asarray(flatten_stacked(state.params))
    cent = np.asarray(flatten_stacked(ev["cluster_params"]))
    for c in range(3):
        np.testing.assert_allclose(cent[c], flat[assign == c].mean(0), rtol=1e-4, atol=1e-5)


def test_oneshot_ifca_takes_k_from_one_shot():
    data = mixture()
    cfg = OneShotIFCAConfig(lam=1.5, t=2, one_shot_steps=100, k_max=6,
                            local=LocalTraining(steps=5, lr=0.1))
    alg = OneShotIFCA(mlp((8, 4)), cfg)
    state, ev = run(alg, data, 5)
    assert int(ev["num_clusters"]) == 3
    assert metrics.misclustering(ev["assign"], data.cluster) == 0.0
    assert np.nanmean(ev["assigned_test_acc"]) > 0.85


def test_importance_weights_floor_and_share():
    losses = jnp.asarray([[[0.1, 0.1, 0.1, 9.0], [1.0, 1.0, 1.0, 0.0]],
                          [[5.0, 5.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]])       # [N=2, K=2, n=4]
    mask = jnp.asarray([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    u = np.asarray(importance_weights(losses, mask, 0.0))
    np.testing.assert_allclose(u, [[0.75, 0.25], [0.0, 1.0]])
    u = np.asarray(importance_weights(losses, mask, 0.05))
    np.testing.assert_allclose(u[1], [0.05 / 1.05, 1.0 / 1.05], rtol=1e-6)
    np.testing.assert_allclose(u.sum(1), 1.0, rtol=1e-6)


def test_fedsoft_runs_and_beats_chance():
    data = mixture()
    alg = FedSoft(mlp((8, 4)), FedSoftConfig(num_clusters=3, clients_per_cluster=4,
                                             local=LocalTraining(steps=5, lr=0.1)))
    state, ev = run(alg, data, 15)
    u = np.asarray(ev["importance"])
    assert u.shape == (24, 3) and (u >= 0.05 / (1 + 2 * 0.05) - 1e-6).all()
    assert np.nanmean(ev["assigned_test_acc"]) > 0.5


@pytest.mark.parametrize("name", ["srfca", "cfl", "local-kmeans", "oneshot-ifca", "fedsoft"])
def test_registered_and_validated(name):
    assert name in ALGORITHMS and hasattr(ALGORITHMS[name], "config_cls")
    with pytest.raises(ValueError):
        build_algorithm(name, mlp((8, 4)), {"no_such_param": 1}, mixture())


def test_bad_configs():
    with pytest.raises(ValueError, match="sigma"):
        FedSoftConfig(num_clusters=4, sigma=0.3)
    with pytest.raises(ValueError, match="t = 0 is too small"):
        OneShotIFCAConfig(t=0)
    with pytest.raises(ValueError, match="n_init"):
        LocalKMeansConfig(n_init=0)


def test_local_kmeans_independent_init_gives_each_client_its_own_start():
    data = mixture()
    model = mlp((8, 4))
    init = lambda how: LocalKMeans(model, LocalKMeansConfig(num_clusters=3, init=how)).init(
        jax.random.key(0), data).params
    common, own = flatten_stacked(init("common")), flatten_stacked(init("independent"))
    assert np.allclose(np.asarray(common), np.asarray(common)[0])        # one w_0 for all
    assert len(np.unique(np.asarray(own), axis=0)) == data.num_clients       # one each
    with pytest.raises(ValueError, match="init must be one of"):
        LocalKMeansConfig(init="fresh")
