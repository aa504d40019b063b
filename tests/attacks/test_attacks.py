"""Each attack's output has its documented form on a tiny case; Byzantine bookkeeping."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from fedclust_jax.attacks import Attack, byzantine_mask, gradient, num_byzantine
from fedclust_jax.data.robust_synthetic import brifca_regression, threshold_blobs

G = jnp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 8.0], [-1.0, 0.5], [7.0, 7.0]])
ASSIGN = jnp.asarray([0, 0, 1, 1, 0], jnp.int32)
BYZ = jnp.asarray([False, False, False, True, True])


def test_num_byzantine_and_mask():
    assert num_byzantine(80, 0.05) == 4 and num_byzantine(200, 0.05) == 10
    np.testing.assert_array_equal(byzantine_mask(5, 0.4), [False, False, False, True, True])
    with pytest.raises(ValueError, match="honest"):
        num_byzantine(3, 0.9)
    with pytest.raises(ValueError, match="byz_frac"):
        num_byzantine(3, 1.0)


def test_sign_flip_scaling_gaussian():
    out = Attack("sign_flip", scale=2.0).corrupt(None, G, ASSIGN, BYZ, 2)
    np.testing.assert_allclose(out, jnp.where(BYZ[:, None], -2 * G, G))
    out = Attack("scaling", scale=10.0).corrupt(None, G, ASSIGN, BYZ, 2)
    np.testing.assert_allclose(out, jnp.where(BYZ[:, None], 10 * G, G))
    out = np.asarray(Attack("gaussian", std=0.0).corrupt(jax.random.key(0), G, ASSIGN, BYZ, 2))
    np.testing.assert_allclose(out[3:], 0.0)
    np.testing.assert_allclose(out[:3], G[:3])
    big = Attack("gaussian", std=3.0).corrupt(jax.random.key(0), jnp.zeros((2000, 4)),
                                              jnp.zeros(2000, jnp.int32), jnp.ones(2000, bool), 1)
    assert abs(float(jnp.std(big)) - 3.0) < 0.1


def test_alie_and_ipm_use_honest_stats_of_joined_cluster():
    # Byzantine 3 joined cluster 1 (honest: row 2), Byzantine 4 cluster 0 (honest: rows 0, 1)
    out = np.asarray(Attack("alie", z=1.5).corrupt(None, G, ASSIGN, BYZ, 2))
    mu0, sd0 = np.array([2.0, 3.0]), np.array([1.0, 1.0])
    np.testing.assert_allclose(out[4], mu0 - 1.5 * sd0, atol=1e-6)
    np.testing.assert_allclose(out[3], [5.0, 8.0], atol=1e-6)        # one honest: sd 0
    np.testing.assert_allclose(out[:3], G[:3])
    out = np.asarray(Attack("ipm", eps=0.5).corrupt(None, G, ASSIGN, BYZ, 2))
    np.testing.assert_allclose(out[4], -0.5 * mu0, atol=1e-6)
    np.testing.assert_allclose(out[3], [-2.5, -4.0], atol=1e-6)
    # Baruch et al.'s z: n = 50, f = 12 -> s = 14, z = Phi^-1(36/50)
    assert abs(float(gradient.alie_z(50, 12)) - norm.ppf(36 / 50)) < 1e-5


def test_placements_and_label_flip():
    assign = jnp.asarray([0, 0, 0, 1, 2, 2, 1, 1], jnp.int32)
    byz = jnp.arange(8) >= 5
    np.testing.assert_array_equal(Attack(placement="loss").place(assign, byz, 3), assign)
    np.testing.assert_array_equal(Attack(placement="spread").place(assign, byz, 3)[5:], [0, 1, 2])
    # honest counts: cluster 0: 3, 1: 1, 2: 1 -> smallest = 1 (lowest index)
    np.testing.assert_array_equal(Attack(placement="smallest").place(assign, byz, 3)[5:], [1, 1, 1])
    y = jnp.asarray([[0, 3], [9, 1]])
    np.testing.assert_array_equal(Attack("label_flip").flip_labels(y, jnp.asarray([False, True]), 10),
                                  [[0, 3], [0, 8]])
    np.testing.assert_allclose(Attack("label_flip").flip_labels(y * 1.0, jnp.asarray([True, False])),
                               [[0, -3], [9, 1]])
    np.testing.assert_allclose(Attack("outlier").eval_params({"t": jnp.ones(2)})["t"], [3, 3])
    with pytest.raises(ValueError, match="attack"):
        Attack("poison")


def test_brifca_regression_layout():
    data = brifca_regression(jax.random.key(0), num_clients=80, num_clusters=2, byz_frac=0.05,
                             dim=20, samples_per_client=100, test_samples_per_client=5)
    c = np.asarray(data.cluster)
    assert (c[-4:] == -1).all() and np.bincount(c[:-4]).tolist() == [38, 38]
    np.testing.assert_allclose(np.linalg.norm(data.true_params, axis=1), 1.0, rtol=1e-6)
    # Byzantine data: least squares recovers a norm-3 vector; honest: theta*, noise var 0.2
    x, y = np.asarray(data.x), np.asarray(data.y)
    theta_b = np.linalg.lstsq(x[-1], y[-1], rcond=None)[0]
    assert abs(np.linalg.norm(theta_b) - 3.0) < 0.3
    resid = y[0] - x[0] @ np.asarray(data.true_params[0])
    assert abs(resid.var() - 0.2) < 0.1


def test_threshold_blobs():
    a = threshold_blobs(jax.random.key(0), std=0.5)
    b = threshold_blobs(jax.random.key(1), std=4.0)
    assert a.x.shape == (90, 1, 10) and np.bincount(np.asarray(a.cluster)).tolist() == [9] * 10
    np.testing.assert_array_equal(a.true_params, b.true_params)      # centers fixed across sigma
