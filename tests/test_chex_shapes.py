"""Tree and shape contracts of the core primitives, stated with chex.

Each primitive's docstring gives the shapes of what it returns; these tests hold it to them
for pytrees of several leaves and dtypes, where a wrong axis or a lost leaf would otherwise
pass silently through ``jax.tree.map``.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core.aggregate import cluster_mean, global_mean, mean_from_sums
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.robust import RULES, cluster_aggregate
from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.models.base import with_dtype
from fedclust_jax.models.lstm import shakespeare_lstm
from fedclust_jax.models.mlp import mlp

M, K = 7, 3


def uploads(key, m):
    """A two-leaf pytree of m rows: a matrix and a vector per client."""
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (m, 4, 3)), "b": jax.random.normal(k2, (m, 3))}


def test_cluster_mean_keeps_the_tree_and_an_empty_cluster():
    values = uploads(jax.random.key(0), M)
    previous = uploads(jax.random.key(1), K)
    assign = jnp.array([0, 0, 1, 1, 1, 0, -1], jnp.int32)   # cluster 2 empty, client 6 in none
    out = cluster_mean(values, assign, previous)
    chex.assert_trees_all_equal_shapes_and_dtypes(out, previous)
    chex.assert_trees_all_equal(jax.tree.map(lambda a: a[2], out),
                                jax.tree.map(lambda a: a[2], previous))
    expected = jax.tree.map(lambda v: np.stack([np.asarray(v)[np.asarray(assign) == j].mean(0)
                                                for j in (0, 1)]), values)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[:2], out), expected, rtol=1e-6)


def test_global_mean_drops_the_client_axis():
    values = uploads(jax.random.key(2), M)
    out = global_mean(values)
    chex.assert_trees_all_equal_structs(out, values)
    chex.assert_tree_shape_prefix(out, ())
    chex.assert_shape([out["w"], out["b"]], [(4, 3), (3,)])


def test_mean_from_sums_keeps_previous_dtypes():
    previous = jax.tree.map(lambda a: a.astype(jnp.bfloat16), uploads(jax.random.key(3), K))
    sums = jax.tree.map(lambda a: jnp.ones(a.shape, jnp.float32), previous)
    out = mean_from_sums(previous, sums, jnp.array([2.0, 0.0, 1.0]))
    chex.assert_trees_all_equal_shapes_and_dtypes(out, previous)


@pytest.mark.parametrize("rule", RULES)
def test_every_robust_rule_returns_the_cluster_tree(rule):
    values = uploads(jax.random.key(4), M)
    previous = uploads(jax.random.key(5), K)
    assign = jnp.array([0, 0, 0, 1, 1, 1, 1], jnp.int32)   # cluster 2 empty
    out = cluster_aggregate(rule, values, assign, previous, trim_frac=0.2)
    chex.assert_trees_all_equal_shapes_and_dtypes(out, previous)
    chex.assert_tree_all_finite(out)
    chex.assert_trees_all_equal(jax.tree.map(lambda a: a[2], out),
                                jax.tree.map(lambda a: a[2], previous))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_local_train_returns_params_of_the_same_tree(dtype, batch_size):
    model = with_dtype(mlp((5, 8, 3)), dtype)
    params = model.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (10, 5)).astype(dtype)
    y = jnp.arange(10, dtype=jnp.int32) % 3
    cfg = LocalTraining(steps=3, lr=0.1, batch_size=batch_size)
    out = jax.jit(lambda p: local_train(model, cfg, p, x, y, jnp.int32(8), jax.random.key(2),
                                        0.1))(params)
    chex.assert_trees_all_equal_shapes_and_dtypes(out, params)
    chex.assert_tree_all_finite(out)


def test_loss_matrix_is_clients_by_models():
    model = mlp((5, 8, 3))
    n, k = 6, 4
    stacked = jax.vmap(model.init)(jax.random.split(jax.random.key(0), k))
    chex.assert_tree_shape_prefix(stacked, (k,))
    x = jax.random.normal(jax.random.key(1), (n, 9, 5))
    y = jnp.zeros((n, 9), jnp.int32)
    count = jnp.array([9, 9, 5, 1, 9, 3], jnp.int32)
    loss, acc = loss_matrix(model, stacked, x, y, count)
    chex.assert_shape([loss, acc], (n, k))
    chex.assert_tree_all_finite((loss, acc))


def test_lstm_batched_init_equals_one_key_inits():
    """``orthogonal_init`` draws one QR per key under vmap: the stacked init is the K one-key
    inits, leaf for leaf."""
    model = shakespeare_lstm(vocab=12, embed=4, hidden=8)
    keys = jax.random.split(jax.random.key(0), 3)
    stacked = jax.jit(jax.vmap(model.init))(keys)
    chex.assert_tree_shape_prefix(stacked, (3,))
    one_by_one = jax.tree.map(lambda *a: jnp.stack(a), *[model.init(k) for k in keys])
    chex.assert_trees_all_close(stacked, one_by_one, rtol=1e-6, atol=1e-7)
