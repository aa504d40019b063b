"""ClusterGAN networks and ClusterGAN + FedAvg (Table 4.3's baseline)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.clustergan import (ClusterGAN, ClusterGANConfig, assign_points,
                                                fedavg, local_update)
from fedclust_jax.data.points import points_from_pools
from fedclust_jax.models.base import num_params
from fedclust_jax.models.clustergan import clustergan_nets, conv_s2, deconv_s2
from fedclust_jax.metrics import purity

K, NOISE = 2, 3
TINY = dict(noise_dim=NOISE, size=8, width=8, fc_width=32)


def tiny_cfg(**kw):
    base = dict(num_clusters=K, noise_dim=NOISE, comm_rounds=6, local_steps=10, batch_size=16,
                critic_steps=2, optimizer="adam", lr=5e-3)
    base.update(kw)
    return ClusterGANConfig(**base)


# one set of networks, one config and 20 points per client everywhere, so the tests share
# the compiled round and local update (compilation dominates their time on a CPU)
NETS = clustergan_nets(K, **TINY)
CFG = tiny_cfg()
ALG = ClusterGAN(NETS, CFG)
ROUND = jax.jit(ALG.round)
PER_CLIENT = 20
# local training of clients [M] from one start (vmapped like the round, so that floating
# point agrees: Adam's normalisation magnifies last-bit differences over 10 steps)
LOCAL = jax.jit(jax.vmap(lambda p, x, c, k: local_update(NETS, CFG, p, x, c, k),
                         in_axes=(None, 0, 0, 0)))


def stripes(key, n_clients=2, per_client=PER_CLIENT, p=0.5):
    """Two very different 8x8 patterns (horizontal vs vertical stripes, noisy) dealt by the
    heterogeneity recipe."""
    rng = np.random.default_rng(0)
    rows = (np.arange(8) % 2 == 0).astype(np.float32)
    horiz = np.broadcast_to(rows[:, None], (8, 8))
    pools = [np.clip(pat + 0.15 * rng.normal(size=(200, 8, 8)), 0, 1).astype(np.float32)
             for pat in (horiz, horiz.T)]
    return points_from_pools(key, pools, num_clients=n_clients, points_per_client=per_client,
                             heterogeneity=p)


def allclose_trees(a, b, **kw):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kw)


# ---- networks ------------------------------------------------------------------------

def test_network_shapes_and_ranges():
    p = jax.jit(NETS.init)(jax.random.key(0))
    z = jax.random.normal(jax.random.key(1), (5, NETS.latent_dim))
    x = jax.jit(NETS.generate)(p["generator"], z)
    assert x.shape == (5, 8, 8, 1)
    assert float(x.min()) > 0.0 and float(x.max()) < 1.0
    critic = jax.jit(NETS.critic)
    assert critic(p["critic"], x).shape == (5,)
    assert critic(p["critic"], x[..., 0]).shape == (5,)  # [n, s, s] accepted
    z_n, logits = jax.jit(NETS.encode)(p["encoder"], x)
    assert z_n.shape == (5, NOISE) and logits.shape == (5, K)


def test_mnist_networks_parameter_counts():
    nets = clustergan_nets(10)
    shapes = jax.eval_shape(nets.init, jax.random.key(0))
    counts = {k: sum(int(np.prod(a.shape)) for a in jax.tree.leaves(v))
              for k, v in shapes.items()}
    assert counts == dict(generator=6_604_161, critic=6_556_865, encoder=6_596_840)
    out = jax.eval_shape(nets.generate, shapes["generator"], jnp.zeros((2, 40)))
    assert out.shape == (2, 28, 28, 1)
    z_n, logits = jax.eval_shape(nets.encode, shapes["encoder"], jnp.zeros((2, 28, 28)))
    assert z_n.shape == (2, 30) and logits.shape == (2, 10)
    assert num_params(clustergan_nets(2, **TINY).init(jax.random.key(0))["critic"]) > 0


@pytest.mark.parametrize("size,cin,cout", [(28, 1, 3), (14, 2, 4), (8, 3, 2)])
def test_strided_convolutions_match_lax(size, cin, cout):
    rng = np.random.default_rng(size)
    dn = ("NHWC", "HWIO", "NHWC")
    x = jnp.asarray(rng.normal(size=(2, size, size, cin)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(4, 4, cin, cout)), jnp.float32)
    ref = jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=dn)
    np.testing.assert_allclose(conv_s2(x, w), ref, atol=1e-4)
    ref_t = jax.lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=dn)
    np.testing.assert_allclose(deconv_s2(x, w), ref_t, atol=1e-4)


def test_network_arguments_are_checked():
    with pytest.raises(ValueError, match="divisible by 4"):
        clustergan_nets(2, size=10)
    with pytest.raises(ValueError, match="width"):
        clustergan_nets(2, width=0)


# ---- config --------------------------------------------------------------------------

@pytest.mark.parametrize("kw,match", [
    (dict(num_clusters=1), "K >= 2"), (dict(num_clusters=2.0), "K >= 2"),
    (dict(lr=0.0), "lr"), (dict(lr=-1e-3), "lr"), (dict(lr=float("nan")), "lr"),
    (dict(noise_std=0.0), "noise_std"), (dict(batch_size=0), "batch_size"),
    (dict(local_steps=0), "local_steps"), (dict(critic_steps=0), "critic_steps"),
    (dict(comm_rounds=-1), "comm_rounds"), (dict(beta_n=-1.0), "beta_n"),
    (dict(gp_weight=float("inf")), "gp_weight"), (dict(optimizer="rmsprop"), "optimizer"),
    (dict(noise_loss="l1"), "noise_loss"), (dict(gp_mix="none"), "gp_mix"),
    (dict(chunk=0), "chunk"),
])
def test_bad_config_raises(kw, match):
    with pytest.raises(ValueError, match=match):
        ClusterGANConfig(**kw)


def test_mismatched_networks_or_data_raise():
    with pytest.raises(ValueError, match="K = 3"):
        ClusterGAN(clustergan_nets(3, **TINY), CFG)
    data = stripes(jax.random.key(0))
    bad = data.replace(x=jnp.zeros(data.x.shape[:2] + (5, 5)))
    with pytest.raises(ValueError, match="expect points of shape"):
        ALG.init(jax.random.key(0), bad)


# ---- FedAvg round --------------------------------------------------------------------

def test_assignment_is_valid_cluster_ids_with_padding():
    data = stripes(jax.random.key(0), n_clients=3, per_client=10)
    data = data.replace(count=jnp.array([10, 4, 0], jnp.int32))
    params = NETS.init(jax.random.key(1))
    a = np.asarray(jax.jit(lambda p, x, c: assign_points(NETS, p, x, c, eval_batch=7))(
        params["encoder"], data.x, data.count))
    assert a.shape == (3, 10) and a.dtype == np.int32
    real = np.arange(10)[None, :] < np.array([10, 4, 0])[:, None]
    assert ((a[real] >= 0) & (a[real] < K)).all() and (a[~real] == -1).all()
    logits = NETS.encode(params["encoder"], data.x[0])[1]
    np.testing.assert_array_equal(a[0], np.argmax(np.asarray(logits), -1))


def test_one_client_fedavg_equals_local_training():
    """With counts (20, 0) only client 0 takes part: the round returns its local training.
    (Two clients, the shape of the other round tests, so they share one compiled round.)"""
    data = stripes(jax.random.key(0), p=0.0).replace(count=jnp.array([PER_CLIENT, 0], jnp.int32))
    state = ALG.init(jax.random.key(1), data)
    key = jax.random.key(2)
    new, metrics = ROUND(state, key, data)
    local, losses = LOCAL(state.params, data.x[:1], data.count[:1],
                          jax.random.fold_in(key, 0)[None])
    allclose_trees(new.params, jax.tree.map(lambda a: a[0], local), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["critic_loss"], losses[0, 0], rtol=1e-5)
    assert int(new.round) == 1
    moved = [float(jnp.abs(a - b).max()) for a, b in
             zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params))]
    assert max(moved) > 0


def test_round_weights_clients_by_point_counts_and_ignores_padding():
    """With counts (5, 0) the round returns client 0's local training alone and with
    (0, 20) client 1's (same keys, same points), so counts (5, 20) must give their
    5 : 20 average."""
    data = stripes(jax.random.key(0))
    state = ALG.init(jax.random.key(1), data)
    key = jax.random.key(3)
    run = lambda counts: ROUND(state, key, data.replace(
        count=jnp.array(counts, jnp.int32)))[0].params
    only0, only1, both = run([5, 0]), run([0, 20]), run([5, 20])
    expect = jax.tree.map(lambda a, b: (5 * a + 20 * b) / 25, only0, only1)
    allclose_trees(both, expect, rtol=1e-4, atol=1e-6)
    assert max(float(jnp.abs(a - b).max()) for a, b in
               zip(jax.tree.leaves(only0), jax.tree.leaves(only1))) > 1e-3
    # padding (points past count) is never read
    noisy = data.replace(x=data.x.at[0, 5:].set(123.0), count=jnp.array([5, 20], jnp.int32))
    allclose_trees(ROUND(state, key, noisy)[0].params, both, rtol=1e-6, atol=1e-7)


def test_fedavg_known_values_and_no_points():
    local = dict(w=jnp.array([[1.0, 2.0], [3.0, 6.0]]))
    old = dict(w=jnp.array([9.0, 9.0]))
    out = fedavg(local, jnp.array([1, 3]), old)
    np.testing.assert_allclose(out["w"], [2.5, 5.0])
    np.testing.assert_allclose(fedavg(local, jnp.array([0, 0]), old)["w"], [9.0, 9.0])


# ---- a short run ---------------------------------------------------------------------
# (the runner's path with restarts and no objective: tests/test_golden_runs.py, "clustergan")

def test_run_curves_and_easy_patterns_beat_chance():
    """Two stripe patterns, two clients at p = 0.5: after a short run through the runner
    (250 Adam generator updates per client) the encoder's argmax separates them far better
    than chance (about 0.5-0.6 for two balanced clusters of 40 points)."""
    from fedclust_jax.experiment import ExperimentConfig, run_experiment
    data = stripes(jax.random.key(2))
    params = dict(num_clusters=K, noise_dim=NOISE, local_steps=10, batch_size=16,
                  critic_steps=2, optimizer="adam", lr=5e-3, width=8, fc_width=32)
    cfg = ExperimentConfig(dataset="uifca-gaussian", algorithm="clustergan", params=params,
                           rounds=25, eval_every=5)
    out = run_experiment(cfg, data=data, progress=False)
    curves = out["curves"]
    assert curves["round"] == [5, 10, 15, 20, 25] and len(curves["purity"]) == 5
    assert len(out["history"]["critic_loss"]) == 25
    assert curves["purity"][-1] == out["metrics"]["purity"]
    assert curves["purity"][-1] >= 0.85, curves["purity"]
