"""One-shot k-means baseline: recovers well-separated clusters, then never reassigns."""

import jax
import numpy as np
import pytest

from fedclust_jax.algorithms.oneshot_kmeans import OneShotConfig, OneShotKMeans
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.metrics import misclustering
from fedclust_jax.models.linear import linear_regression
from helpers import small_regression


def test_recovers_separated_clusters_and_keeps_them_fixed():
    data = small_regression(num_clients=12, num_clusters=3, samples_per_client=40, separation=5.0)
    alg = OneShotKMeans(linear_regression(8, init="zeros"),
                        OneShotConfig(num_clusters=3, erm_steps=50, erm_lr=0.1,
                                      local=LocalTraining(steps=2, lr=0.05), participation=0.5))
    state = jax.jit(alg.init)(jax.random.key(0), data)
    assert misclustering(state.assign, data.cluster) == 0.0
    first = np.asarray(state.assign)
    for t in range(3):
        state, _ = jax.jit(alg.round)(state, jax.random.key(t), data)
    np.testing.assert_array_equal(state.assign, first)
    err = np.linalg.norm(np.asarray(state.params["theta"])[first[[0, 4, 8]]] - np.asarray(data.true_params), axis=1)
    assert err.max() < 0.5


def test_rejects_bad_values():
    with pytest.raises(ValueError, match="kmeans_iters"):
        OneShotConfig(kmeans_iters=0)
    with pytest.raises(ValueError, match="erm_lr = 0.0 is out of range"):
        OneShotConfig(erm_lr=0.0)
