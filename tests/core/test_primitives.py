"""Core primitives: map_clients, aggregation, local training masks, participation, k-means."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core.aggregate import cluster_mean, global_mean
from fedclust_jax.core.clients import chain_clients, map_clients
from fedclust_jax.core.kmeans import kmeans
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.participation import (num_participants, pack_slots, participants,
                                             per_cluster_participants, sample_participants)
from fedclust_jax.core.train import LocalTraining, local_train, minibatch, shuffled_order
from fedclust_jax.models.mlp import mlp


def test_map_clients_chunked_equals_vmap():
    x = jax.random.normal(jax.random.key(0), (13, 4, 3))
    f = lambda a, b: (jnp.sin(a).sum(0) * b, a.max())
    b = jnp.arange(13.0)
    full = map_clients(f, x, b)
    for chunk in (1, 4, 13, 20):
        part = map_clients(f, x, b, chunk=chunk)
        for u, v in zip(full, part):
            np.testing.assert_allclose(u, v, rtol=1e-6)
    with pytest.raises(ValueError, match="chunk"):
        map_clients(f, x, b, chunk=0)


def test_chain_clients_trains_each_group_in_sequence():
    start = {"w": jnp.array([[0.0], [10.0]])}
    group = jnp.array([0, 1, 0, -1, 1])
    step = jnp.arange(1.0, 6.0)[:, None]
    out = chain_clients(lambda p, a: {"w": p["w"] + a}, start, group, step)
    np.testing.assert_allclose(out["w"][:, 0], [1.0, 12.0, 4.0, 4.0, 17.0])
    key = jax.random.key(0)
    out = chain_clients(lambda p, a: {"w": p["w"] + a}, start, group, step, order_key=key)
    order = np.asarray(jax.random.permutation(key, 5))
    chain, want = [0.0, 10.0], np.zeros(5)
    for j in order:
        g = int(group[j])
        if g >= 0:
            chain[g] += float(step[j, 0])
        want[j] = chain[max(g, 0)]
    np.testing.assert_allclose(out["w"][:, 0], want)


def test_sequential_fedavg_averages_the_chain_of_checkpoints():
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
    from fedclust_jax.models.linear import linear_regression
    from helpers import small_regression
    data = small_regression(num_clients=4)
    local = LocalTraining(steps=3, lr=0.05)
    model = linear_regression(8)
    seq = FedAvg(model, FedAvgConfig(local=local, participation=0.5, sequential=True))
    state = seq.init(jax.random.key(0), data)
    key = jax.random.key(3)
    new, _ = seq.round(state, key, data)
    ids, keys = participants(key, 4, 0.5)
    perm = jax.random.permutation(jax.random.fold_in(key, 2), 2)   # the training order
    w, chain = state.params, []
    for j in np.asarray(perm):
        i = int(ids[j])
        w = local_train(model, local, w, data.x[i], data.y[i], data.count[i], keys[j], local.lr)
        chain.append(w)
    want = jax.tree.map(lambda a, b: (a + b) / 2, *chain)
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    par = FedAvg(model, FedAvgConfig(local=local, participation=0.5)).round(state, key, data)[0]
    assert not np.allclose(jax.tree.leaves(par.params)[0], jax.tree.leaves(new.params)[0])


def test_cluster_mean_weights_and_empty_cluster_keeps_params():
    values = {"w": jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])}
    assign = jnp.array([0, 0, 2, -1])
    previous = {"w": jnp.full((3, 2), -9.0)}
    out = cluster_mean(values, assign, previous)["w"]
    np.testing.assert_allclose(out, [[2.0, 3.0], [-9.0, -9.0], [5.0, 6.0]])
    weighted = cluster_mean(values, assign, previous, weights=jnp.array([1.0, 3.0, 1.0, 1.0]))["w"]
    np.testing.assert_allclose(weighted[0], [2.5, 3.5])
    np.testing.assert_allclose(global_mean(values)["w"], [4.0, 5.0])


def test_minibatches_never_touch_padding():
    count, n_max, b = 5, 9, 4
    order = shuffled_order(jax.random.key(0), count, n_max)
    assert sorted(np.asarray(order[:count]).tolist()) == list(range(count))
    seen = []
    for s in range(5):
        idx, mask = minibatch(order, s, count, b)
        assert (np.asarray(idx) < count).all() and np.asarray(mask).all()
        seen += np.asarray(idx).tolist()
    assert sorted(seen[:count]) == list(range(count))  # first pass is a permutation
    idx, mask = minibatch(shuffled_order(jax.random.key(1), 2, n_max), 0, 2, b)
    assert np.asarray(mask).tolist() == [True, True, False, False]


def test_padding_never_leaks_into_losses_or_training():
    model = mlp((3, 5, 2))
    params = model.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (1, 6, 3))
    y = jnp.array([[0, 1, 1, 0, 1, 1]])
    junk_x = x.at[:, 4:].set(1e6)
    junk_y = y.at[:, 4:].set(0)
    count = jnp.array([4])
    a = loss_matrix(model, jax.tree.map(lambda p: p[None], params), x, y, count)
    b = loss_matrix(model, jax.tree.map(lambda p: p[None], params), junk_x, junk_y, count)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
    cfg = LocalTraining(steps=3, lr=0.1, batch_size=3)
    train = jax.jit(lambda xi, yi: local_train(model, cfg, params, xi, yi, count[0], jax.random.key(2), 0.1))
    t1, t2 = train(x[0], y[0]), train(junk_x[0], junk_y[0])
    for u, v in zip(jax.tree.leaves(t1), jax.tree.leaves(t2)):
        np.testing.assert_allclose(u, v, rtol=1e-6)


def test_participation_is_static_and_without_replacement():
    assert num_participants(100, 0.1) == 10 and num_participants(3, 0.2) == 1
    with pytest.raises(ValueError, match="rounds to 0 participants"):
        num_participants(3, 0.01)             # refused, not clamped to one
    ids = sample_participants(jax.random.key(0), 50, 20)
    assert len(set(np.asarray(ids).tolist())) == 20
    ids2, keys = participants(jax.random.key(0), 50, 1.0)
    np.testing.assert_array_equal(ids2, np.arange(50))
    assert keys.shape == (50,)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="participation"):
            num_participants(10, bad)


def test_per_cluster_slots_pack_valid_ones_round_robin():
    """Clusters of sizes 3, 1, 0 with S = 2: the valid slots (0,0), (1,0), (0,1) come
    first, slot 0 of every cluster before slot 1; each member is drawn once."""
    assign = jnp.array([0, 0, 1, 0, -1], jnp.int32)
    ids, valid = per_cluster_participants(jax.random.key(0), assign, 3, 2)
    np.testing.assert_array_equal(valid, [[True, True], [True, False], [False, False]])
    assert set(np.asarray(ids[0]).tolist()) <= {0, 1, 3} and ids[0, 0] != ids[0, 1]
    assert int(ids[1, 0]) == 2
    np.testing.assert_array_equal(pack_slots(valid, 4)[:3], [0, 2, 1])
    assert pack_slots(valid, 3).shape == (3,)


def test_kmeans_finds_separated_groups():
    key = jax.random.key(0)
    centres = jnp.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    labels_true = jnp.repeat(jnp.arange(3), 20)
    pts = centres[labels_true] + 0.1 * jax.random.normal(key, (60, 2))
    _, labels, _ = jax.jit(kmeans, static_argnums=2)(jax.random.key(1), pts, 3)
    from fedclust_jax.metrics import misclustering
    assert misclustering(labels, labels_true) == 0.0
