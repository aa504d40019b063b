"""Traced hyperparameters: a vmapped grid equals the concrete runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms import hparams
from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.models.registry import build_model


@pytest.fixture(scope="module")
def setting():
    data = build_dataset("synthetic-regression", jax.random.key(0), num_clients=40)
    return data, build_model("linear", data)


def one_round(alg, data):
    state = alg.init(jax.random.key(1), data)
    state, _ = alg.round(state, jax.random.key(2), data)
    return jax.tree.leaves(state.params)[0]


def test_local_training_grid_equals_concrete_runs(setting):
    data, model = setting
    base = {"num_clusters": 2, "momentum": 0.5, "weight_decay": 0.01}
    grid = {"lr": [0.02, 0.08], "momentum": [0.0, 0.5], "weight_decay": [0.0, 0.01]}
    concrete = [jax.jit(one_round, static_argnums=0)(
        build_algorithm("ifca", model, {**base, **{k: v[i] for k, v in grid.items()}}, data), data)
        for i in range(2)]
    alg = build_algorithm("ifca", model, base, data)
    traced = jax.jit(jax.vmap(lambda hp: one_round(hparams.rebuild(alg, hp), data)))(
        {k: jnp.asarray(v, jnp.float32) for k, v in grid.items()})
    np.testing.assert_allclose(np.asarray(traced), np.stack(concrete), rtol=1e-5, atol=1e-6)


def test_untraceable_field_is_refused(setting):
    data, model = setting
    alg = build_algorithm("ifca", model, {"num_clusters": 2}, data)
    with pytest.raises(ValueError, match="cannot trace \\['num_clusters'\\]"):
        hparams.with_values(alg.cfg, {"num_clusters": jnp.int32(3)})
    assert set(hparams.traced_names(type(alg.cfg))) >= {"lr", "lr_decay", "momentum", "weight_decay"}
