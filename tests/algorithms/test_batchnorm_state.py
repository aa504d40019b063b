"""BatchNorm statistics carried by FedAvg, Local and IFCA (options I and II, with and without
weight sharing): the server's mean of the clients' statistics, per-client statistics for Local,
evaluation with the running statistics, checkpointing, and the one-line refusal everywhere else.

The equalities use a one-BatchNorm MLP and a two-BatchNorm MLP whose head has statistics of
its own (``StatefulModel``s built like ResNet9's, compiling in well under a second); ResNet9
runs (width 4, 8x8 images) check the same paths end to end."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from fedclust_jax import checkpoint as ckpt
from fedclust_jax.algorithms.base import evaluate_clusters
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.cli import main
from fedclust_jax.config_check import ConfigError
from fedclust_jax.core.participation import client_keys, participants
from fedclust_jax.core.train import LocalTraining, client_gradient, local_train
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.mlp import mlp
from fedclust_jax.models.resnet9 import from_nnx_stateful, resnet9, running_view
from helpers import assert_trees_close

LOCAL = LocalTraining(steps=2, lr=0.05, batch_size=4, momentum=0.5, weight_decay=1e-3)
COUNTS = (6, 3, 5)   # client 1 has fewer examples than a batch: a masked, wrapped batch
KEY = jax.random.key(7)


class DenseBN(nnx.Module):
    """x [n, 6] -> Linear(6, 8) -> BatchNorm -> ReLU -> Linear(8, 10)."""

    def __init__(self, rngs):
        self.a = nnx.Linear(6, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.b = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x, train=True, mask=None):
        if mask is not None:
            mask = jnp.asarray(mask, bool)[:, None]
            mask = mask | ~mask.any()
        return self.b(jax.nn.relu(self.bn(self.a(x), use_running_average=not train, mask=mask)))


MODEL = from_nnx_stateful("dense-bn", DenseBN, task="classification")


def client_data(shape):
    """3 clients (6 padded slots, ragged counts), client i's features shifted by i so their
    statistics differ; the padding is junk that must not count."""
    n, n_max = len(COUNTS), 6
    x = jax.random.uniform(jax.random.key(0), (n, n_max) + shape)
    x = x + jnp.arange(n, dtype=jnp.float32).reshape((n, 1) + (1,) * len(shape))
    real = (jnp.arange(n_max)[None, :] < jnp.asarray(COUNTS)[:, None])
    x = jnp.where(real.reshape(real.shape + (1,) * len(shape)), x, 99.0)
    y = jax.random.randint(jax.random.key(1), (n, n_max), 0, 10)
    return FederatedData(x=x, y=y, count=jnp.asarray(COUNTS, jnp.int32), x_test=x[:, ::-1],
                         y_test=y[:, ::-1], count_test=jnp.full((n,), 4, jnp.int32),
                         cluster=jnp.array([0, 1, 0], jnp.int32), num_classes=10)


DATA = client_data((6,))
pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)


@jax.jit
def by_hand(params, state, keys):
    """(params [3, ...], state [3, ...]) of the 3 clients, client i trained alone from
    (params[i], state[i]) with ``local_train`` (vmapped, as the algorithms run it)."""
    return jax.vmap(lambda p, s, x, y, c, k: local_train(MODEL, LOCAL, p, x, y, c, k, LOCAL.lr,
                                                         state=s))(
        params, state, DATA.x, DATA.y, DATA.count, keys)


def every(tree):
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (3,) + a.shape), tree)


def weighted_mean(tree, weights):
    """sum_i w_i tree[i] / sum_i w_i over the leading axis, in float64."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    return jax.tree.map(lambda a: np.tensordot(w, np.asarray(a, np.float64), axes=1), tree)


@functools.lru_cache(maxsize=None)
def fedavg_after_one_round():
    alg = FedAvg(MODEL, FedAvgConfig(local=LOCAL, weighting="samples", chunk=2))
    start = alg.init(KEY, DATA)
    new, _ = jax.jit(alg.round)(start, KEY, DATA)
    return alg, start, new


def test_fedavg_averages_the_clients_statistics_with_the_params_weights():
    _, start, new = fedavg_after_one_round()
    _, keys = participants(KEY, 3, 1.0)
    params, state = by_hand(every(start.params), every(start.model_state), keys)
    assert_trees_close(new.model_state, weighted_mean(state, COUNTS), tol=1e-5)
    assert_trees_close(new.params, weighted_mean(params, COUNTS), tol=1e-5)
    mean = lambda s: np.asarray(s["bn"]["mean"])
    assert not np.allclose(mean(new.model_state), mean(start.model_state))  # they moved,
    assert not np.allclose(mean(pick(state, 0)), mean(pick(state, 2)))     # per client


IFCA_ASSIGN = jnp.array([0, 1, 0], jnp.int32)   # cluster 2 has no member


def ifca_round(**kw):
    """(start, state after one round) of IFCA with K = 3 frozen to ``IFCA_ASSIGN``."""
    alg = IFCA(MODEL, IFCAConfig(num_clusters=3, local=LOCAL, assignment="fixed", chunk=None,
                                 **kw))
    start = alg.init(KEY, DATA, assign=IFCA_ASSIGN)
    return start, jax.jit(alg.round)(start, KEY, DATA)[0]


@functools.lru_cache(maxsize=None)
def ifca_streamed():
    return ifca_round()


def test_ifca_cluster_statistics_are_the_members_mean_and_an_empty_cluster_keeps_its_own():
    start, new = ifca_streamed()
    _, keys = participants(KEY, 3, 1.0)
    params, state = by_hand(pick(start.params, IFCA_ASSIGN), pick(start.model_state, IFCA_ASSIGN),
                            keys)
    members = lambda tree: weighted_mean(pick(tree, jnp.array([0, 2])), [1, 1])
    want = [members(state), pick(state, 1), pick(start.model_state, 2)]
    for j in range(3):
        assert_trees_close(pick(new.model_state, j), want[j], tol=1e-5)
    assert_trees_close(pick(new.params, 0), members(params), tol=1e-5)
    assert_trees_close(pick(new.params, 2), pick(start.params, 2), tol=0)


def test_ifca_per_client_variant_carries_the_same_statistics_as_the_streamed_pass():
    """clients_per_cluster (every member trains, [M, P] held) equals the streamed round."""
    _, want = ifca_streamed()
    _, got = ifca_round(clients_per_cluster=3)
    assert_trees_close(got.model_state, want.model_state, tol=1e-5)
    assert_trees_close(got.params, want.params, tol=1e-5)


def test_local_keeps_one_set_of_statistics_per_client():
    alg = Local(MODEL, LocalConfig(local=LOCAL, chunk=None))
    start = alg.init(KEY, DATA)
    new, _ = jax.jit(alg.round)(start, KEY, DATA)
    params, state = by_hand(start.params, start.model_state, client_keys(KEY, jnp.arange(3)))
    assert_trees_close(new.model_state, state, tol=1e-6)
    assert_trees_close(new.params, params, tol=1e-6)
    got = jax.jit(alg.evaluate)(new, DATA)["test_loss"]
    want = [running_loss(MODEL, pick(new.params, i), pick(new.model_state, i), DATA, i)
            for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def running_loss(model, params, state, data, i):
    """Client i's mean test loss with ``apply_with_state(..., train=False)``."""
    logits = model.apply_with_state(params, state, data.x_test[i], train=False)[0]
    per = optax.softmax_cross_entropy_with_integer_labels(logits, data.y_test[i])
    real = jnp.arange(per.shape[0]) < data.count_test[i]
    return float(jnp.sum(per * real) / data.count_test[i])


def test_evaluation_uses_the_running_statistics():
    alg, _, state = fedavg_after_one_round()
    got = jax.jit(alg.evaluate)(state, DATA)["test_loss"]
    want = [running_loss(MODEL, state.params, state.model_state, DATA, i) for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    one = jax.tree.map(lambda a: a[None], state.params)
    batch = evaluate_clusters(MODEL, one, jnp.zeros(3, jnp.int32), DATA, chunk=None)["test_loss"]
    assert np.all(np.abs(np.asarray(batch) - np.asarray(got)) > 1e-4)  # batch statistics differ


def test_resnet9_round_and_evaluation_carry_the_statistics():
    """The presets' model: one FedAvg round moves every statistic, and evaluate scores with
    them (one vmap over the clients: the cheapest program to compile)."""
    model = resnet9(10, width=4, conv="native")
    data = client_data((8, 8, 3))
    alg = FedAvg(model, FedAvgConfig(local=LOCAL, chunk=None))
    start = alg.init(KEY, data)
    state, _ = jax.jit(alg.round)(start, KEY, data)
    moved = [float(jnp.max(jnp.abs(a - b))) for a, b in
             zip(jax.tree.leaves(state.model_state), jax.tree.leaves(start.model_state))]
    assert min(moved) > 0 and all(np.isfinite(jax.tree.leaves(state.model_state)[0]))
    got = jax.jit(alg.evaluate)(state, data)["test_loss"]
    want = [running_loss(model, state.params, state.model_state, data, i) for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_the_statistics_are_checkpointed(tmp_path):
    _, _, state = fedavg_after_one_round()
    states = jax.tree.map(lambda a: a[None], state)   # the runner's restart axis
    path = str(tmp_path / "ck.npz")
    ckpt.save(path, states, {}, 1, {"x": 1})
    restored, _, done = ckpt.load(path, jax.tree.map(jnp.zeros_like, states), {"x": 1})
    assert done == 1 and jax.tree.leaves(restored.model_state)
    assert_trees_close(restored.model_state, states.model_state, tol=0)


def test_an_algorithm_that_does_not_carry_the_statistics_refuses_them():
    for cfg in (IFCAConfig(option="gradient"), IFCAConfig(weight_sharing=True),
                IFCAConfig(option="gradient", weight_sharing=True)):
        IFCA(resnet9(10, width=4), cfg)   # IFCA carries them in every configuration
    params = MODEL.init(KEY)   # any algorithm training a stateful model without its state
    x, y, c = DATA.x[0], DATA.y[0], DATA.count[0]
    with pytest.raises(ValueError, match="this algorithm does not carry the BatchNorm"):
        jax.eval_shape(lambda p: local_train(MODEL, LOCAL, p, x, y, c, KEY, 0.1), params)
    with pytest.raises(ValueError, match="this algorithm does not carry the BatchNorm"):
        jax.eval_shape(lambda p: client_gradient(MODEL, LOCAL, p, x, y, c, KEY), params)


@pytest.mark.parametrize("extra, words", [
    (["--algorithm", "cfl"], ["algorithm 'cfl' does not carry", "resnet9", "fedavg, local, ifca"]),
    (["--algorithm", "srfca"], ["algorithm 'srfca' does not carry", "cifar-cnn"]),
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
    model = mlp((6, 4, 10))
    for alg in (FedAvg(model), Local(model), IFCA(model)):
        assert jax.eval_shape(alg.init, KEY, DATA).model_state is None


# ---- IFCA option I and weight sharing ----------------------------------------------------

FULL = LocalTraining(steps=1, lr=0.05)   # option I, full batch: the rows are the real ones


def rows_mask(mask, ndim):
    if mask is None:
        return None
    mask = jnp.asarray(mask, bool).reshape((-1,) + (1,) * (ndim - 1))
    return mask | ~mask.any()


class TwoBN(nnx.Module):
    """x [n, 6] -> Linear(6, 8) -> BatchNorm -> ReLU (the body) -> Linear(8, 10) ->
    BatchNorm (the head ("b", "hbn"), with statistics of its own)."""

    def __init__(self, rngs):
        self.a = nnx.Linear(6, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.b = nnx.Linear(8, 10, rngs=rngs)
        self.hbn = nnx.BatchNorm(10, momentum=0.9, epsilon=1e-5, rngs=rngs)

    def features(self, x, train=True, mask=None):
        h = self.a(x)
        return jax.nn.relu(self.bn(h, use_running_average=not train, mask=rows_mask(mask, 2)))

    def from_features(self, h, train=True, mask=None):
        return self.hbn(self.b(h), use_running_average=not train, mask=rows_mask(mask, 2))

    def __call__(self, x, train=True, mask=None):
        return self.from_features(self.features(x, train, mask), train, mask)


SHARED = from_nnx_stateful("two-bn", TwoBN, task="classification", head=("b", "hbn"))
BODY, HEAD = ("a", "bn"), ("b", "hbn")


def spread(tree, shared: bool):
    """[3, ...] leaves made to differ per cluster (shared: equal across clusters), so an
    empty cluster keeping its own and a shared body staying shared can both fail."""
    return jax.tree.map(lambda a: a + (0.0 if shared else 0.1 * jnp.arange(3.0).reshape(
        (3,) + (1,) * (a.ndim - 1))) + 0.05, tree)


def spread_state(state):
    """Start statistics: the body's equal across clusters, the head's per cluster."""
    return {name: spread(v, name in BODY) for name, v in state.items()}


def per_client(model, option, local, params, state, keys):
    """(uploads [3, ...], statistics [3, ...]) of the 3 clients from (params[i], state[i]):
    the trained params (option "model") or the gradient (option "gradient")."""
    def one(p, s, x, y, c, k):
        if option == "model":
            return local_train(model, local, p, x, y, c, k, local.lr, state=s)
        return client_gradient(model, local, p, x, y, c, k, state=s)
    return jax.jit(jax.vmap(one))(params, state, DATA.x, DATA.y, DATA.count, keys)


def test_ifca_option_one_statistics_are_the_members_mean_of_one_forward_pass_by_hand():
    """Option I: s_j <- mean over cluster j's members of 0.9 s_j + 0.1 (batch mean, batch
    variance) of the hidden layer on their real rows, computed here in numpy; an empty
    cluster keeps its statistics; the params take the gradient step."""
    alg = IFCA(MODEL, IFCAConfig(num_clusters=3, option="gradient", local=FULL,
                                 assignment="fixed", chunk=2))
    start = alg.init(KEY, DATA, assign=IFCA_ASSIGN)
    start = start.replace(model_state=spread(start.model_state, False))
    new = jax.jit(alg.round)(start, KEY, DATA)[0]
    stats = []
    for i, j in enumerate(np.asarray(IFCA_ASSIGN)):
        a = pick(start.params, j)["a"]
        x = np.asarray(DATA.x[i, :COUNTS[i]], np.float64)
        h = x @ np.asarray(a["kernel"], np.float64) + np.asarray(a["bias"], np.float64)
        s = pick(start.model_state, j)["bn"]
        stats.append(dict(mean=0.9 * np.asarray(s["mean"]) + 0.1 * h.mean(0),
                          var=0.9 * np.asarray(s["var"]) + 0.1 * h.var(0)))
    want = [jax.tree.map(lambda u, v: (u + v) / 2, stats[0], stats[2]), stats[1],
            pick(start.model_state, 2)["bn"]]
    for j in range(3):
        assert_trees_close(pick(new.model_state, j)["bn"], want[j], tol=1e-5)
    _, keys = participants(KEY, 3, 1.0)
    grads, _ = per_client(MODEL, "gradient", FULL, pick(start.params, IFCA_ASSIGN),
                          pick(start.model_state, IFCA_ASSIGN), keys)
    step = jax.tree.map(lambda p, g0, g2: p - FULL.lr / 3 * (g0 + g2), pick(start.params, 0),
                        pick(grads, 0), pick(grads, 2))
    assert_trees_close(pick(new.params, 0), step, tol=1e-5)
    assert_trees_close(pick(new.params, 2), pick(start.params, 2), tol=0)


@functools.lru_cache(maxsize=None)
def ifca_shared(option):
    """(algorithm, start, state after one round) of IFCA K = 3 with weight sharing, frozen to
    ``IFCA_ASSIGN`` (cluster 2 empty); option II weights by sample counts."""
    local = LOCAL if option == "model" else FULL
    alg = IFCA(SHARED, IFCAConfig(num_clusters=3, option=option, local=local, chunk=2,
                                  assignment="fixed", weight_sharing=True,
                                  weighting="samples" if option == "model" else "equal"))
    start = alg.init(KEY, DATA, assign=IFCA_ASSIGN)
    start = start.replace(model_state=spread_state(start.model_state),
                          params={n: spread(v, n in BODY) for n, v in start.params.items()})
    return alg, start, jax.jit(alg.round)(start, KEY, DATA)[0]


@pytest.mark.parametrize("option", ["model", "gradient"])
def test_weight_sharing_averages_the_body_statistics_over_everyone_and_the_head_per_cluster(option):
    alg, start, new = ifca_shared(option)
    _, keys = participants(KEY, 3, 1.0)
    uploads, stats = per_client(SHARED, option, alg.cfg.local, pick(start.params, IFCA_ASSIGN),
                                pick(start.model_state, IFCA_ASSIGN), keys)
    w = COUNTS if option == "model" else (1, 1, 1)
    members = lambda tree: weighted_mean(pick(tree, jnp.array([0, 2])), [w[0], w[2]])
    everyone = weighted_mean(stats, w)
    want_head = [members(stats), pick(stats, 1), pick(start.model_state, 2)]
    for j in range(3):
        got = pick(new.model_state, j)
        assert_trees_close(got["bn"], everyone["bn"], tol=1e-5)          # body: everyone
        assert_trees_close(got["hbn"], want_head[j]["hbn"], tol=1e-5)    # head: members
    if option == "model":
        everyone, want_head = weighted_mean(uploads, w), [members(uploads), pick(uploads, 1),
                                                          pick(start.params, 2)]
    else:
        lr = alg.cfg.local.lr / 3
        total = jax.tree.map(lambda g: g.sum(0), uploads)
        everyone = jax.tree.map(lambda p, g: p - lr * g, pick(start.params, 0), total)
        head = lambda j, g: jax.tree.map(lambda p, gg: p - lr * gg, pick(start.params, j), g)
        want_head = [head(0, jax.tree.map(lambda g: g[0] + g[2], uploads)),
                     head(1, pick(uploads, 1)), pick(start.params, 2)]
    for j in range(3):
        got = pick(new.params, j)
        for name in BODY:
            assert_trees_close(got[name], everyone[name], tol=1e-5)
        for name in HEAD:
            assert_trees_close(got[name], want_head[j][name], tol=1e-5)


def test_weight_sharing_evaluates_with_each_clusters_running_statistics():
    """evaluate scores cluster j with its running statistics (the body's shared, its head's
    own), through the one-body-pass split of the running view."""
    alg, _, new = ifca_shared("model")
    assert running_view(SHARED, new.params, new.model_state)[0].splits
    got = np.asarray(jax.jit(alg.evaluate)(new, DATA)["test_loss_matrix"])
    want = [[running_loss(SHARED, pick(new.params, j), pick(new.model_state, j), DATA, i)
             for j in range(3)] for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_resnet9_ifca_option_one_with_weight_sharing_carries_the_statistics():
    """ResNet9 (its running view splits at the linear head): one option-I round with weight
    sharing moves the shared body statistics, equal in both clusters, and evaluate scores
    with them."""
    model = resnet9(10, width=4, conv="native")
    data = client_data((8, 8, 3))
    alg = IFCA(model, IFCAConfig(num_clusters=2, option="gradient", local=FULL,
                                 weight_sharing=True, chunk=None))
    start = alg.init(KEY, data)
    state, _ = jax.jit(alg.round)(start, KEY, data)
    for a, b in zip(jax.tree.leaves(state.model_state), jax.tree.leaves(start.model_state)):
        np.testing.assert_array_equal(a[0], a[1])
        assert float(jnp.max(jnp.abs(a - b))) > 0
    got = np.asarray(jax.jit(alg.evaluate)(state, data)["test_loss_matrix"])
    want = [[running_loss(model, pick(state.params, j), pick(state.model_state, j), data, i)
             for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-4)
