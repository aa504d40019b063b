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



@pytest.fixture(scope="module")
def digit_views():
    """Rotated 8x8 digits as views (8 clients, 2 clusters) and the same data materialised."""
    from fedclust_jax.data import build_dataset
    v = build_dataset("rotated-digits", jax.random.key(0), num_clusters=2, num_clients=8, n=12,
                      n_test=4, views=True)
    return v, v.materialize()


@pytest.mark.parametrize("name", ["label_flip", "outlier"])
def test_attack_round_reads_views_by_client(digit_views, name, monkeypatch):
    """The client side of a round with Byzantine clients (choice, loss, uploads) is
    bit-identical on views and on the materialised arrays, never builds every client's
    data on views (``x`` / ``y`` refuse), and equals the whole-array formulation: Byzantine
    rows on flipped labels, at the attack's evaluation point."""
    from fedclust_jax.attacks.rounds import byzantine_assign, byzantine_gradients
    from fedclust_jax.core.losses import loss_matrix
    from fedclust_jax.core.train import LocalTraining, client_gradient
    from fedclust_jax.data.views import FederatedViews
    from fedclust_jax.models import mlp

    views, data = digit_views
    model, local, attack = mlp((64, 10)), LocalTraining(steps=1, lr=0.1), Attack(name)
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(1), 2))
    byz, keys = byzantine_mask(8, 0.25), jax.random.split(jax.random.key(2), 8)

    def side(d):
        assign, loss = byzantine_assign(model, attack, params, d, byz, chunk=3)
        grads = byzantine_gradients(model, local, attack, jax.random.key(3), params, assign, d,
                                    keys, byz, num_byz=2, chunk=3)
        return assign, loss, grads

    def whole(d):   # every client's arrays at once, labels flipped up front
        y = attack.flip_labels(d.y, byz, d.num_classes)
        bad = attack.eval_params(params)
        loss = jnp.where(byz[:, None], loss_matrix(model, bad, d.x, y, d.count)[0],
                         loss_matrix(model, params, d.x, y, d.count)[0])
        assign = attack.place(jnp.argmin(loss, axis=1).astype(jnp.int32), byz, 2)
        start = jax.tree.map(lambda b, g: jnp.where(byz.reshape((-1,) + (1,) * (g.ndim - 1)),
                                                    b[assign], g[assign]), bad, params)
        grads = jax.vmap(lambda p, x, yy, c, k: client_gradient(model, local, p, x, yy, c, k))(
            start, d.x, y, d.count, keys)
        return assign, loss, attack.corrupt(jax.random.key(3), grads, assign, byz, 2, 2)

    want, ref = jax.jit(side)(data), jax.jit(whole)(data)

    def refuse(self):
        raise AssertionError("the round read every client's data")
    monkeypatch.setattr(FederatedViews, "x", property(refuse))
    monkeypatch.setattr(FederatedViews, "y", property(refuse))
    got = jax.jit(side)(views)
    for a, b, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(b, r, rtol=1e-5, atol=1e-6)


def test_three_stage_reads_views_by_client(digit_views, monkeypatch):
    """Three-Stage's stage 1 (ERMs on flipped labels), stage 3 rounds and objective give
    the same result on views as on the materialised arrays, and never build every
    client's data on views (``x`` / ``y`` refuse)."""
    from fedclust_jax.algorithms.three_stage import ThreeStage, ThreeStageConfig
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.data.views import FederatedViews
    from fedclust_jax.models import mlp

    views, data = digit_views
    alg = ThreeStage(mlp((64, 10)), ThreeStageConfig(
        num_clusters=2, erm_steps=2, kmeans_iters=3, byz_frac=0.25, attack="label_flip",
        local=LocalTraining(steps=1, lr=0.1), chunk=3))

    def run(d):
        s = alg.init(jax.random.key(0), d)
        s = alg.round(s, jax.random.key(1), d)[0]
        return s.params, s.assign, alg.objective(s, d)

    want = jax.jit(run)(data)

    def refuse(self):
        raise AssertionError("Three-Stage read every client's data")
    monkeypatch.setattr(FederatedViews, "x", property(refuse))
    monkeypatch.setattr(FederatedViews, "y", property(refuse))
    for a, b in zip(jax.tree.leaves(jax.jit(run)(views)), jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)
