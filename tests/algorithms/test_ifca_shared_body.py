"""IFCA weight sharing scores the K models with one body pass per client batch: losses,
assignments, params after a round and ``evaluate`` equal the K-full-forward path (the same
model with its body/head split removed, which compiles to the program of every model that
does not split) for every client layout."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.losses import loss_matrix, models_loss_accuracy
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.models.cnn import cifar_cnn, femnist_cnn
from fedclust_jax.models.mlp import mlp
from helpers import assert_trees_close, ragged_classification

DATA = ragged_classification(10)      # ragged counts: padding must not count
SPLIT = mlp((6, 8, 5, 3))             # body: two layers; head: the last
WHOLE = dataclasses.replace(SPLIT, body_apply=None, head_apply=None)
LOCAL = LocalTraining(steps=2, lr=0.2, batch_size=4)
TOL = 1e-6


def unsplit(model):
    return dataclasses.replace(model, body_apply=None, head_apply=None)


@functools.lru_cache(maxsize=None)
def two_rounds(split: bool, option: str, chunk):
    """(state after two rounds, round-2 metrics, objective, evaluate) of IFCA K = 3 with
    weight sharing and loss-based assignment, half the clients a round."""
    model = SPLIT if split else WHOLE
    alg = IFCA(model, IFCAConfig(num_clusters=3, option=option, local=LOCAL, chunk=chunk,
                                 participation=0.5, weight_sharing=True))
    state = alg.init(jax.random.key(0), DATA)
    step = jax.jit(alg.round)
    state, _ = step(state, jax.random.key(1), DATA)
    state, metrics = step(state, jax.random.key(2), DATA)
    objective, ev = jax.jit(alg.objective_and_evaluate)(state, DATA)
    return state, metrics, objective, ev


@pytest.mark.parametrize("option, chunk", [("model", None), ("model", 3), ("gradient", 1)])
def test_a_round_and_evaluate_equal_the_k_full_forward_passes(option, chunk):
    got, want = two_rounds(True, option, chunk), two_rounds(False, option, chunk)
    np.testing.assert_array_equal(got[0].assign, want[0].assign)
    assert_trees_close(got[0].params, want[0].params, tol=TOL)
    np.testing.assert_allclose(got[1]["train_loss"], want[1]["train_loss"], rtol=TOL)
    np.testing.assert_allclose(got[2], want[2], rtol=TOL)
    for name in ("test_loss_matrix", "test_acc_matrix", "test_loss", "assigned_test_acc"):
        np.testing.assert_allclose(got[3][name], want[3][name], rtol=TOL, atol=TOL)
    np.testing.assert_array_equal(got[3]["assign"], want[3]["assign"])
    assert len(set(np.asarray(got[0].assign).tolist()) - {-1}) > 1   # clusters were chosen


def test_the_client_layouts_agree():
    ref = two_rounds(True, "model", None)
    for chunk in (3,):
        got = two_rounds(True, "model", chunk)
        np.testing.assert_array_equal(got[0].assign, ref[0].assign)
        assert_trees_close(got[0].params, ref[0].params, tol=1e-5)
        np.testing.assert_allclose(got[3]["test_loss_matrix"], ref[3]["test_loss_matrix"],
                                   rtol=1e-5)


def test_fixed_assignment_evaluate_and_assign_share_the_body():
    """The assignment="fixed" evaluation (``evaluate_clusters``) and ``assign``."""
    out = {}
    for model in (SPLIT, WHOLE):
        alg = IFCA(model, IFCAConfig(num_clusters=3, local=LOCAL, chunk=2, weight_sharing=True,
                                     assignment="fixed"))
        state = alg.init(jax.random.key(0), DATA, assign=jnp.arange(10, dtype=jnp.int32) % 3)
        out[model.splits] = (jax.jit(alg.evaluate)(state, DATA),
                             jax.jit(alg.assign)(state.params, DATA.x, DATA.y, DATA.count))
    np.testing.assert_allclose(out[True][0]["test_loss_matrix"], out[False][0]["test_loss_matrix"],
                               rtol=TOL)
    np.testing.assert_array_equal(out[True][1][0], out[False][1][0])
    np.testing.assert_allclose(out[True][1][1], out[False][1][1], rtol=TOL)


@pytest.mark.parametrize("build", [lambda: femnist_cnn(5, size=8, conv="native"),
                                   lambda: cifar_cnn(4, size=8, crop=None, conv="native"),
                                   lambda: mlp((6, 3))])
def test_a_split_model_scores_k_shared_body_models_as_k_full_passes(build):
    """apply == head_apply . body_apply, the body reads no head parameter, and the loss
    matrix of K models sharing a body equals K full forward passes."""
    model = build()
    assert model.splits
    k = 3
    params = jax.vmap(model.init)(jax.random.split(jax.random.key(3), k))
    heads = [name for name in params if name in model.head]
    params = {name: (p if name in heads else jax.tree.map(lambda a: jnp.broadcast_to(a[:1], a.shape), p))
              for name, p in params.items()}
    size = 6 if model.name.startswith("mlp") else 8
    shape = (size,) if model.name.startswith("mlp") else (size, size, 1 if "femnist" in model.name else 3)
    x = jax.random.normal(jax.random.key(4), (2, 5) + shape)
    y = jnp.zeros((2, 5), jnp.int32)
    count = jnp.array([5, 2], jnp.int32)

    @jax.jit
    def run(params):
        one = jax.tree.map(lambda a: a[1], params)
        other = {name: (jax.tree.map(jnp.zeros_like, p) if name in heads else p)
                 for name, p in one.items()}
        features = model.body_apply(one, x[0])
        return (loss_matrix(model, params, x, y, count, shared_body=True),
                loss_matrix(unsplit(model), params, x, y, count, shared_body=True),
                model.head_apply(one, features), model.apply(one, x[0]), features,
                model.body_apply(other, x[0]))

    got, want, composed, whole, features, without_head = run(params)
    assert_trees_close(got, want, tol=TOL)
    np.testing.assert_allclose(composed, whole, rtol=TOL, atol=TOL)
    np.testing.assert_array_equal(without_head, features)


def test_without_shared_body_or_split_the_k_models_run_whole():
    """shared_body=False never reads model 0's body for the others (distinct bodies)."""
    params = jax.vmap(SPLIT.init)(jax.random.split(jax.random.key(5), 2))
    x, y, c = DATA.x[0], DATA.y[0], DATA.count[0]

    @jax.jit
    def run(params):
        want = [SPLIT.loss_and_accuracy(jax.tree.map(lambda a: a[j], params), x, y,
                                        jnp.arange(x.shape[0]) < c)[0] for j in range(2)]
        return models_loss_accuracy(SPLIT, params, x, y, c)[0], jnp.stack(want)

    got, want = run(params)
    np.testing.assert_allclose(got, want, rtol=TOL)
    assert not WHOLE.splits


# ----------------------------------------------------------------------------- the authors'
# FEMNIST pipeline: FedAvg pre-training, random-group warm start, head-only training

PIPE = dict(local=LOCAL, weighting="samples", chunk=None)


def _body_and_head(params):
    head = SPLIT.head[0].split("/")
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    is_head = lambda path: "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path).startswith("/".join(head))
    return ([a for p, a in flat if not is_head(p)], [a for p, a in flat if is_head(p)])


def test_pretraining_is_fedavg_of_one_model_copied_to_every_cluster():
    pre = IFCA(SPLIT, IFCAConfig(num_clusters=3, pretrain_rounds=2, pretrain_participation=0.5, **PIPE))
    got = pre.init(jax.random.key(4), DATA).params
    one = IFCA(SPLIT, IFCAConfig(num_clusters=1, participation=0.5, **PIPE))
    from fedclust_jax.core.keys import IFCA_INIT_KEYS
    key = jax.random.key(4)
    state = one.init(IFCA_INIT_KEYS.key(key, "pretrain"), DATA)
    for t in range(2):
        state = one.round(state, jax.random.fold_in(IFCA_INIT_KEYS.key(key, "pretrain_rounds"), t), DATA)[0]
    for k in range(3):
        assert_trees_close(jax.tree.map(lambda a: a[k], got), jax.tree.map(lambda a: a[0], state.params))
    assert not np.allclose(jax.tree.leaves(got)[0][0], jax.tree.leaves(one.init(key, DATA).params)[0][0])


def test_frozen_body_trains_only_the_head_in_the_warm_start_and_the_rounds():
    alg = IFCA(SPLIT, IFCAConfig(num_clusters=2, pretrain_rounds=1, warm_rounds=2,
                                 warm_clients_per_cluster=2, freeze_body=True, **PIPE))
    start = IFCA(SPLIT, IFCAConfig(num_clusters=2, pretrain_rounds=1, **PIPE)).init(jax.random.key(1), DATA)
    state = alg.init(jax.random.key(1), DATA)
    state = jax.jit(alg.round)(state, jax.random.key(2), DATA)[0]
    body0, head0 = _body_and_head(start.params)
    body1, head1 = _body_and_head(state.params)
    assert_trees_close(body0, body1, tol=1e-6)                  # the pre-trained body, kept
    assert not all(np.allclose(a, b) for a, b in zip(head0, head1))   # the heads trained
    assert not np.allclose(head1[0][0], head1[0][1])             # the warm start split them
    with pytest.raises(ValueError, match="freeze_body"):
        IFCA(WHOLE, IFCAConfig(freeze_body=True))
    with pytest.raises(ValueError, match="warm_rounds"):
        IFCAConfig(warm_rounds=2, assignment="oracle")


def test_local_and_one_shot_start_from_the_pretrained_model_of_ifca():
    from fedclust_jax.algorithms.local import Local, LocalConfig
    from fedclust_jax.algorithms.oneshot_kmeans import OneShotConfig, OneShotKMeans
    key = jax.random.key(3)
    ifca = IFCA(SPLIT, IFCAConfig(num_clusters=2, pretrain_rounds=2, **PIPE)).init(key, DATA).params
    local = Local(SPLIT, LocalConfig(local=LOCAL, chunk=None, weighting="samples",
                                     pretrain_rounds=2, freeze_body=True))
    lstate = local.init(key, DATA)
    assert_trees_close(jax.tree.map(lambda a: a[0], lstate.params), jax.tree.map(lambda a: a[0], ifca))
    new = jax.jit(local.round)(lstate, jax.random.key(5), DATA)[0]
    assert_trees_close(_body_and_head(new.params)[0], _body_and_head(lstate.params)[0])
    shot = OneShotKMeans(SPLIT, OneShotConfig(num_clusters=2, features="logreg", erm_steps=20,
                                              local=LOCAL, chunk=None, weighting="samples",
                                              pretrain_rounds=2, freeze_body=True))
    sstate = shot.init(key, DATA)
    assert_trees_close(sstate.params, ifca)
    assert sstate.assign.shape == (DATA.num_clients,) and set(np.unique(sstate.assign)) <= {0, 1}
    with pytest.raises(ValueError, match="pretrain_rounds"):
        OneShotConfig(pretrain_rounds=2)


def test_logreg_features_separate_label_shifted_clients():
    """Clients whose labels are permuted get coefficients far apart: k-means on them
    recovers the two clusters of the concept-shift mixture."""
    from fedclust_jax.algorithms.oneshot_kmeans import OneShotConfig, OneShotKMeans
    from fedclust_jax.metrics import misclustering
    shot = OneShotKMeans(SPLIT, OneShotConfig(num_clusters=2, features="logreg", erm_steps=200,
                                              chunk=None))
    state = shot.init(jax.random.key(0), DATA)
    assert misclustering(np.asarray(state.assign), np.asarray(DATA.cluster)) == 0.0
