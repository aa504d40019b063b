"""Three-Stage, Ditto and kNN-Per: known limits and recovery on small synthetic tasks."""

import jax
import jax.numpy as jnp
import numpy as np

import pytest

from fedclust_jax.algorithms.ditto import Ditto, DittoConfig
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.knn_per import KNNPer, KNNPerConfig, knn_label_shares
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.algorithms.three_stage import (ThreeStage, ThreeStageConfig, best_trimmed_kmeans,
                                                 trimmed_cost, trimmed_kmeans)
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.robust_synthetic import brifca_regression
from fedclust_jax.metrics import parameter_error
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.mlp import mlp
from helpers import small_classification


def _run(alg, data, rounds, params=None):
    state = alg.init(jax.random.key(0), data, params) if params is not None else alg.init(jax.random.key(0), data)
    step = jax.jit(lambda s, k: alg.round(s, k, data)[0])
    for t in range(rounds):
        state = step(state, jax.random.key(t))
    return state


def test_trimmed_kmeans_ignores_far_outliers():
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(size=(20, 3)) * 0.1 + 2, rng.normal(size=(20, 3)) * 0.1 - 2,
                          np.full((2, 3), 50.0)]).astype(np.float32)
    init = jnp.asarray([[1.0] * 3, [-1.0] * 3])
    centers, labels = trimmed_kmeans(jax.random.key(1), jnp.asarray(pts), 2, 0.1, 20, init=init)
    c = np.sort(np.asarray(centers)[:, 0])
    assert abs(c[0] + 2) < 0.2 and abs(c[1] - 2) < 0.2


def test_three_stage_under_outlier_attack():
    data = brifca_regression(jax.random.key(2), num_clients=80, num_clusters=2, byz_frac=0.05,
                             dim=10, samples_per_client=100, test_samples_per_client=5)
    alg = ThreeStage(linear_regression(10, init="zeros"), ThreeStageConfig(
        num_clusters=2, erm_steps=50, erm_lr=0.2, kmeans_iters=20, trim_frac=0.1,
        local=LocalTraining(steps=1, lr=0.2), byz_frac=0.05, attack="outlier"))
    state = alg.init(jax.random.key(0), data)
    a = np.asarray(state.assign)[:-4]
    assert len(set(a[:38])) == 1 and len(set(a[38:])) == 1 and a[0] != a[38]
    state = _run(alg, data, 40)
    assert parameter_error(state.params["theta"], data.true_params) < 0.1


def test_ditto_lambda_zero_is_local():
    data = brifca_regression(jax.random.key(3), num_clients=6, num_clusters=2, byz_frac=0.0,
                             dim=4, samples_per_client=20, test_samples_per_client=5)
    model = linear_regression(4, init="zeros")
    local = LocalTraining(steps=3, lr=0.05)
    d = _run(Ditto(model, DittoConfig(local=local, lam=0.0)), data, 5)
    l = _run(Local(model, LocalConfig(local=local)), data, 5)
    np.testing.assert_allclose(d.params["theta"], l.params["theta"], atol=1e-5)
    # lambda > 0 pulls personal models toward the global one
    far = _run(Ditto(model, DittoConfig(local=local, lam=5.0)), data, 5)
    spread = lambda s: float(jnp.linalg.norm(s.params["theta"] - s.params["theta"].mean(0)))
    assert spread(far) < spread(d)


def test_knn_label_shares_known_answer():
    train = jnp.asarray([[0.0], [1.0], [2.0], [10.0], [11.0]])
    y = jnp.asarray([0, 0, 1, 2, 2])
    mask = jnp.asarray([True, True, True, True, False])   # the last point is padding
    shares = knn_label_shares(train, y, mask, jnp.asarray([[0.2], [10.6]]), 3, 3)
    # 10.6: the padding point 11 must not vote, so its neighbours are 10, 2 and 1
    np.testing.assert_allclose(shares, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-6)


def test_knn_per_limits():
    data = small_classification(seed=4)
    model = mlp((6, 3))
    local = LocalTraining(steps=2, lr=0.1)
    fed = FedAvg(model, FedAvgConfig(local=local))
    s = _run(fed, data, 5)
    base = fed.evaluate(s, data)
    mix0 = KNNPer(model, KNNPerConfig(local=local, lam=0.0)).evaluate(s, data)
    np.testing.assert_allclose(mix0["test_acc"], base["test_acc"], atol=1e-6)
    np.testing.assert_allclose(mix0["test_loss"], base["test_loss"], rtol=1e-5)
    # pure 1-NN tested on its own training points is always right
    own = data.replace(x_test=data.x, y_test=data.y, count_test=data.count)
    nn1 = KNNPer(model, KNNPerConfig(local=local, lam=1.0, neighbors=1)).evaluate(s, own)
    np.testing.assert_allclose(nn1["test_acc"], 1.0)


def test_knn_per_rejects_bad_settings():
    with pytest.raises(ValueError, match="lam"):
        KNNPerConfig(lam=1.5)
    with pytest.raises(ValueError, match="neighbors"):
        KNNPerConfig(neighbors=0)
    with pytest.raises(ValueError, match="features"):
        KNNPerConfig(features="hidden")
    with pytest.raises(ValueError, match="classification"):
        KNNPer(linear_regression(3))


def test_trimmed_kmeans_random_seeding_with_restarts_avoids_outliers():
    """k-means++ seeds on the far points (and merges two clusters) whatever the key; uniform
    seeding with restarts, kept by trimmed cost, finds the clusters (trim_frac 0.2 trims the
    3 far points wherever they join a cluster of 15)."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(6, 4)) * 4
    pts = jnp.asarray(np.concatenate([c + 0.2 * rng.normal(size=(15, 4)) for c in centers]
                                     + [np.full((3, 4), 40.0)]).astype(np.float32))
    truth = np.repeat(np.arange(6), 15)
    pure = lambda lab: (len(set(np.asarray(lab)[:90])) == 6 and
                        all(len(set(np.asarray(lab)[:90][truth == j])) == 1 for j in range(6)))
    # each seeding over a batch of keys: one compiled program per call (not one per key)
    runs = jax.jit(jax.vmap(lambda kk, seeding: trimmed_kmeans(kk, pts, 6, 0.2, 20, seeding=seeding),
                            in_axes=(0, None)), static_argnums=1)
    assert not any(pure(lab) for lab in runs(jax.random.split(jax.random.key(0), 8), "kmeans++")[1])
    singles = runs(jax.random.split(jax.random.key(1), 16), "random")[0]
    centers_b, labels_b = jax.jit(lambda kk: best_trimmed_kmeans(kk, pts, 6, 0.2, 20, 16, "random"))(
        jax.random.key(1))
    costs = jax.jit(jax.vmap(lambda c: trimmed_cost(pts, c, 0.2)))(singles)
    assert float(trimmed_cost(pts, centers_b, 0.2)) <= float(costs.min()) + 1e-3
    assert pure(labels_b)
    with pytest.raises(ValueError, match="kmeans_restarts"):
        ThreeStageConfig(kmeans_restarts=0)
    with pytest.raises(ValueError, match="kmeans_seeding"):
        ThreeStageConfig(kmeans_seeding="forgy")
