"""UIFCA, k-FED and ClusterGAN reproduce outputs recorded before they moved onto the common
runner (same backend: CPU; recorded at commit 1cab51d on fixed small seeds), and their
runs through the runner record per-round curves that agree with the round metrics and
the end of run."""

import jax
import numpy as np
import pytest

from fedclust_jax.algorithms.clustergan import ClusterGAN, ClusterGANConfig
from fedclust_jax.algorithms.kfed import kfed
from fedclust_jax.algorithms.uifca import UIFCA, UIFCAConfig
from fedclust_jax.data.points import gaussian_clusters, points_from_pools
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.metrics import purity
from fedclust_jax.data.points import true_points
from fedclust_jax.models.clustergan import clustergan_nets
from fedclust_jax.models.flows import affine_flow

RTOL = 1e-5


def points():
    return gaussian_clusters(jax.random.key(3), num_clients=3, points_per_client=24,
                             num_clusters=2, dim=3, separation=4.0, heterogeneity=0.5)


CFG = UIFCAConfig(num_clusters=2, cluster_rounds=3, comm_rounds=2, local_steps=3,
                  batch_size=8, lr=1e-2)


def test_uifca_init_and_round_as_recorded():
    d = points()
    alg = UIFCA(affine_flow(3), CFG)
    s0 = alg.init(jax.random.key(4), d)
    s1, m1 = alg.round(s0, jax.random.key(5), d)
    assert int(s0.assign.sum()) == 21
    assert float(alg.objective(s0, d)) == pytest.approx(18.01058006286621, rel=RTOL)
    assert int(s1.assign.sum()) == 29
    assert float(m1["objective"]) == pytest.approx(8.063443183898926, rel=RTOL)
    assert np.asarray(m1["cluster_sizes"]).tolist() == [43, 29]


def test_uifca_restarts_as_recorded():
    """Two restarts, three rounds, with the keys of the recorded run (init keys from the
    first half of the key, round t's keys from fold_in(second half, t))."""
    d, alg = points(), UIFCA(affine_flow(3), CFG)
    k_init, k_run = jax.random.split(jax.random.key(6))
    state = jax.vmap(alg.init, in_axes=(0, None))(jax.random.split(k_init, 2), d)
    step = jax.jit(jax.vmap(alg.round, in_axes=(0, 0, None)))
    for t in range(3):
        state, m = step(state, jax.random.split(jax.random.fold_in(k_run, t), 2), d)
    np.testing.assert_allclose(m["objective"][0], 6.416886329650879, rtol=RTOL)
    assert purity(np.asarray(state.assign[0]), true_points(d)) == 0.9305555555555556
    assert int(state.assign[0].sum()) == 24


def runner(algorithm, data, params, rounds, restarts=1, eval_every=1):
    cfg = ExperimentConfig(dataset="uifca-gaussian", algorithm=algorithm, params=params,
                           rounds=rounds, restarts=restarts, eval_every=eval_every)
    return run_experiment(cfg, data=data, progress=False)


def test_uifca_curves_through_the_runner():
    params = dict(num_clusters=2, comm_rounds=2, local_steps=3, batch_size=8, lr=1e-2)
    out = runner("uifca", points(), params, rounds=3, restarts=2)
    curves = out["curves"]
    assert curves["round"] == [1, 2, 3] and len(curves["purity"]) == 3
    # the curve's objective (evaluated after the round) is the round's own objective
    np.testing.assert_allclose(curves["objective"], out["history"]["objective"], rtol=1e-5)
    assert curves["purity"][-1] == out["metrics"]["purity"]
    assert curves["objective"][-1] == pytest.approx(out["metrics"]["objective"], rel=1e-5)
    assert [sum(s) for s in curves["cluster_sizes"]] == [72, 72, 72]


def test_kfed_as_recorded():
    d = points()
    r = kfed(jax.random.key(7), d.x, d.count, 2, iters=5, restarts=2)
    assert int(r.assign.sum()) == 30
    assert float(r.centres.sum()) == pytest.approx(16.66024398803711, rel=RTOL)


def stripes():
    rng = np.random.default_rng(0)
    rows = (np.arange(8) % 2 == 0).astype(np.float32)
    horiz = np.broadcast_to(rows[:, None], (8, 8))
    pools = [np.clip(pat + 0.15 * rng.normal(size=(200, 8, 8)), 0, 1).astype(np.float32)
             for pat in (horiz, horiz.T)]
    return points_from_pools(jax.random.key(8), pools, num_clients=2, points_per_client=20,
                             heterogeneity=0.5)


def test_clustergan_rounds_as_recorded():
    nets = clustergan_nets(2, noise_dim=3, size=8, width=8, fc_width=32)
    cfg = ClusterGANConfig(num_clusters=2, noise_dim=3, comm_rounds=6, local_steps=10,
                           batch_size=16, critic_steps=2, optimizer="adam", lr=5e-3)
    alg, data = ClusterGAN(nets, cfg), stripes()
    k_init, k_run = jax.random.split(jax.random.key(9))
    state = alg.init(k_init, data)
    step, losses = jax.jit(alg.round), []
    assert purity(np.asarray(alg.assign(state, data)), true_points(data)) == 1.0
    for t in range(3):
        state, m = step(state, jax.random.fold_in(k_run, t), data)
        losses.append([float(m["critic_loss"]), float(m["generator_loss"])])
    # GAN training amplifies rounding: on another CPU (AMD EPYC, AVX2 + FMA) the third
    # critic loss came out 2.2e-4 relative from the recording
    np.testing.assert_allclose(losses, [[3.9574005603790283, 6.966709613800049],
                                        [2.3316688537597656, 6.8939008712768555],
                                        [3.197589159011841, 6.803503513336182]], rtol=2e-3)
    assign = np.asarray(jax.jit(alg.assign)(state, data))
    assert purity(assign, true_points(data)) == 0.55 and int(assign.sum()) == 0
