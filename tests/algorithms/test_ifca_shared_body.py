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
