"""BatchNorm statistics carried by FedAvg, Local and IFCA (option II): the server's mean of the
clients' statistics, per-client statistics for Local, evaluation with the running statistics,
checkpointing, and the one-line refusal everywhere else. Tiny ResNet9 (width 4, 8x8 images)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedclust_jax import checkpoint as ckpt
from fedclust_jax.algorithms.base import evaluate_clusters
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.cli import main
from fedclust_jax.config_check import ConfigError
from fedclust_jax.core.participation import client_keys, participants
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.resnet9 import resnet9
from helpers import assert_trees_close

MODEL = resnet9(10, width=4, conv="native")
LOCAL = LocalTraining(steps=2, lr=0.05, batch_size=4, momentum=0.5, weight_decay=1e-3)
COUNTS = (6, 3, 5)   # client 1 has fewer examples than a batch: a masked, wrapped batch
KEY = jax.random.key(7)


@functools.lru_cache(maxsize=None)
def tiny_images():
    """3 clients of 8x8x3 images (6 padded slots, ragged counts), client i's pixels shifted
    by i so their statistics differ; the padding is junk that must not count."""
    n, n_max = len(COUNTS), 6
    x = jax.random.uniform(jax.random.key(0), (n, n_max, 8, 8, 3))
    x = x + jnp.arange(n, dtype=jnp.float32)[:, None, None, None, None]
    real = jnp.arange(n_max)[None, :] < jnp.asarray(COUNTS)[:, None]
    x = jnp.where(real[:, :, None, None, None], x, 99.0)
    y = jax.random.randint(jax.random.key(1), (n, n_max), 0, 10)
    count = jnp.asarray(COUNTS, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x[:, ::-1], y_test=y[:, ::-1],
                         count_test=jnp.full((n,), 4, jnp.int32),
                         cluster=jnp.array([0, 1, 0], jnp.int32), num_classes=10)


@functools.lru_cache(maxsize=None)
def train_one():
    """One client's local training with statistics, compiled once."""
    return jax.jit(lambda p, s, x, y, c, k: local_train(MODEL, LOCAL, p, x, y, c, k, LOCAL.lr,
                                                        state=s))


def by_hand(params, state, keys, starts=None):
    """[(params_i, state_i)] of every client trained from (params, state) (or starts[i])."""
    data, out = tiny_images(), []
    for i in range(data.num_clients):
        p, s = (params, state) if starts is None else starts[i]
        out.append(train_one()(p, s, data.x[i], data.y[i], data.count[i], keys[i]))
    return out


def weighted_mean(trees, weights):
    w = np.asarray(weights, np.float64) / np.sum(weights)
    return jax.tree.map(lambda *a: sum(wi * np.asarray(ai, np.float64) for wi, ai in zip(w, a)),
                        *trees)


@functools.lru_cache(maxsize=None)
def fedavg_after_one_round():
    alg = FedAvg(MODEL, FedAvgConfig(local=LOCAL, weighting="samples", chunk=2))
    data = tiny_images()
    start = alg.init(KEY, data)
    new, _ = jax.jit(alg.round)(start, KEY, data)
    return alg, start, new


def test_fedavg_averages_the_clients_statistics_with_the_params_weights():
    alg, start, new = fedavg_after_one_round()
    data = tiny_images()
    _, keys = participants(KEY, data.num_clients, 1.0)
    clients = by_hand(start.params, start.model_state, keys)
    assert_trees_close(new.model_state, weighted_mean([s for _, s in clients], COUNTS), tol=1e-5)
    assert_trees_close(new.params, weighted_mean([p for p, _ in clients], COUNTS), tol=1e-5)
    # the statistics moved, and differently per client (the mean is not any one client's)
    mean_0 = lambda s: np.asarray(jax.tree.leaves(s)[0])
    assert not np.allclose(mean_0(new.model_state), mean_0(start.model_state))
    assert not np.allclose(mean_0(clients[0][1]), mean_0(clients[2][1]))


def test_ifca_cluster_statistics_are_the_members_mean_and_an_empty_cluster_keeps_its_own():
    data = tiny_images()
    alg = IFCA(MODEL, IFCAConfig(num_clusters=3, local=LOCAL, assignment="fixed", chunk=None))
    assign = jnp.array([0, 1, 0], jnp.int32)   # cluster 2 has no member
    start = alg.init(KEY, data, assign=assign)
    new, _ = jax.jit(alg.round)(start, KEY, data)
    _, keys = participants(KEY, data.num_clients, 1.0)
    pick = lambda tree, j: jax.tree.map(lambda a: a[j], tree)
    clients = by_hand(None, None, keys, starts=[(pick(start.params, j), pick(start.model_state, j))
                                                 for j in np.asarray(assign)])
    want = [weighted_mean([clients[0][1], clients[2][1]], [1, 1]), clients[1][1],
            pick(start.model_state, 2)]
    for j in range(3):
        assert_trees_close(pick(new.model_state, j), want[j], tol=1e-5)
    assert_trees_close(pick(new.params, 0), weighted_mean([clients[0][0], clients[2][0]], [1, 1]),
                       tol=1e-5)


def test_local_keeps_one_set_of_statistics_per_client():
    data = tiny_images()
    alg = Local(MODEL, LocalConfig(local=LOCAL, chunk=2))
    start = alg.init(KEY, data)
    new, _ = jax.jit(alg.round)(start, KEY, data)
    pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
    clients = by_hand(pick(start.params, 0), pick(start.model_state, 0),
                      client_keys(KEY, jnp.arange(data.num_clients)))
    for i, (p, s) in enumerate(clients):
        assert_trees_close(pick(new.model_state, i), s, tol=1e-5)
        assert_trees_close(pick(new.params, i), p, tol=1e-5)


def masked_mean_loss(logits, y, count):
    per = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    mask = jnp.arange(y.shape[0]) < count
    return float(jnp.sum(per * mask) / count)


def test_evaluation_uses_the_running_statistics():
    alg, _, state = fedavg_after_one_round()
    data = tiny_images()
    got = jax.jit(alg.evaluate)(state, data)["test_loss"]
    want = [masked_mean_loss(MODEL.apply_with_state(state.params, state.model_state,
                                                    data.x_test[i], train=False)[0],
                             data.y_test[i], data.count_test[i]) for i in range(data.num_clients)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    one = jax.tree.map(lambda a: a[None], state.params)
    batch = jax.jit(lambda: evaluate_clusters(MODEL, one, jnp.zeros(3, jnp.int32), data,
                                              chunk=None)["test_loss"])()
    assert np.all(np.abs(np.asarray(batch) - np.asarray(got)) > 1e-4)  # batch statistics differ


def test_the_statistics_are_checkpointed(tmp_path):
    _, _, state = fedavg_after_one_round()
    states = jax.tree.map(lambda a: a[None], state)   # the runner's restart axis
    path = str(tmp_path / "ck.npz")
    ckpt.save(path, states, {}, 1, {"x": 1})
    restored, _, done = ckpt.load(path, jax.tree.map(jnp.zeros_like, states), {"x": 1})
    assert done == 1
    assert_trees_close(restored.model_state, states.model_state, tol=0)
    assert jax.tree.leaves(restored.model_state)


def test_an_algorithm_that_does_not_carry_the_statistics_refuses_them():
    with pytest.raises(ConfigError, match='option="gradient" does not carry the BatchNorm'):
        IFCA(MODEL, IFCAConfig(option="gradient"))
    with pytest.raises(ConfigError, match="weight sharing"):
        IFCA(MODEL, IFCAConfig(weight_sharing=True))
    params = MODEL.init(KEY)   # an algorithm training a stateful model without its state
    data = tiny_images()
    with pytest.raises(ValueError, match="does not carry the BatchNorm statistics"):
        jax.eval_shape(lambda p: local_train(MODEL, LOCAL, p, data.x[0], data.y[0],
                                             data.count[0], KEY, 0.1), params)


@pytest.mark.parametrize("extra, words", [
    (["--algorithm", "cfl"], ["algorithm 'cfl' does not carry", "resnet9", "fedavg, local, ifca"]),
    (["--algorithm", "ifca", "--set", "option=gradient"], ['option="gradient"', "cifar-cnn"]),
])
def test_the_cli_refuses_before_compute_with_one_line(monkeypatch, capsys, extra, words):
    from fedclust_jax import experiment
    monkeypatch.setattr(experiment, "build_dataset", lambda *a, **k: 1 / 0)
    assert main(["run", "--dataset", "srfca-rotated-cifar10", "--no-progress"] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_a_stateless_model_keeps_no_state():
    from fedclust_jax.models.mlp import mlp
    model = mlp((6, 4, 3))
    for alg in (FedAvg(model), Local(model), IFCA(model)):
        shapes = jax.eval_shape(alg.init, KEY, tiny_images().replace(
            x=jnp.zeros((3, 6, 6)), x_test=jnp.zeros((3, 6, 6))))
        assert shapes.model_state is None
