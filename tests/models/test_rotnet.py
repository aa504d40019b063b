"""RotNet: shapes, rotations, pooling, pretraining on a tiny image set, determinism."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from fedclust_jax.models.base import num_params
from fedclust_jax.models.rotnet import (extract_features, max_pool2, pretrain_rotnet, rotate,
                                        rotated_copies, rotation_accuracy, rotnet)

SMALL = dict(channels=(4, 8, 8, 8, 8), hidden=16)


@pytest.fixture(scope="module")
def small():
    """A narrow RotNet and its params, built once (compilation dominates these tests)."""
    model = rotnet(**SMALL)
    return model, model.init(jax.random.key(1))


def _corner_images(n, seed=0):
    """[n, 28, 28]: a bright L-shaped stroke near the top-left corner at a random offset,
    plus faint noise; its rotation is visible from where the stroke lies."""
    rng = np.random.default_rng(seed)
    x = 0.05 * rng.random((n, 28, 28), np.float32)
    for i, (r, c) in enumerate(rng.integers(2, 7, size=(n, 2))):
        x[i, r:r + 9, c:c + 2] = 1.0
        x[i, r + 7:r + 9, c:c + 6] = 1.0
    return x


def test_default_sizes_and_output_shapes():
    model = rotnet()
    params = jax.eval_shape(model.init, jax.random.key(0))  # shapes only: no compilation
    assert num_params(params) == 115_780
    x = jax.ShapeDtypeStruct((3, 28, 28), jnp.float32)
    assert jax.eval_shape(model.apply, params, x).shape == (3, 4)
    assert model.feature_dim == 288 and model.conv_dim == 1568
    assert jax.eval_shape(model.features, params, x).shape == (3, 288)
    assert jax.eval_shape(lambda p, v: model.features(p, v, pool=False), params,
                          x).shape == (3, 1568)


def test_input_layouts_agree_and_features_are_nonnegative(small):
    model, params = small
    x = jnp.asarray(_corner_images(3))
    features = jax.jit(model.features)
    pooled = features(params, x)
    assert pooled.shape == (3, model.feature_dim) == (3, 72)
    assert np.all(np.asarray(pooled) >= 0)  # after conv5's ReLU
    np.testing.assert_allclose(features(params, x.reshape(3, -1)), pooled, rtol=1e-6)
    np.testing.assert_allclose(features(params, x[..., None]), pooled, rtol=1e-6)


def test_pooled_features_are_the_max_pool_of_the_conv_map(small):
    model, params = small
    x = jnp.asarray(_corner_images(2))
    both = jax.jit(lambda p, v: (model.features(p, v), model.features(p, v, pool=False)))
    pooled, conv = both(params, x)
    want = nnx.max_pool(conv.reshape(2, 7, 7, 8), (3, 3), strides=(2, 2)).reshape(2, -1)
    np.testing.assert_allclose(pooled, want, rtol=1e-6)


def test_max_pool2_matches_windowed_pool():
    x = jax.random.normal(jax.random.key(2), (2, 6, 4, 3))
    np.testing.assert_array_equal(max_pool2(x), nnx.max_pool(x, (2, 2), strides=(2, 2)))


def test_rotations_match_numpy():
    x = _corner_images(5)
    r = np.array([0, 1, 2, 3, 1])
    want = np.stack([np.rot90(x[i], r[i]) for i in range(5)])
    np.testing.assert_array_equal(rotate(jnp.asarray(x), jnp.asarray(r)), want)
    xs, ys = rotated_copies(jnp.asarray(x))
    assert xs.shape == (20, 28, 28) and list(np.bincount(np.asarray(ys))) == [5] * 4
    for k in range(4):
        np.testing.assert_array_equal(xs[5 * k:5 * (k + 1)], np.rot90(x, k, axes=(1, 2)))
        assert np.all(np.asarray(ys[5 * k:5 * (k + 1)]) == k)


def test_pretraining_learns_rotation_and_is_deterministic(small):
    model, _ = small
    x = _corner_images(48)
    params, losses = pretrain_rotnet(model, jax.random.key(0), x, epochs=6, batch_size=32,
                                     lr=3e-3)
    assert losses.shape == (6,)
    assert losses[-1] < 0.5 * losses[0]
    assert rotation_accuracy(model, params, _corner_images(32, seed=1)) > 0.9  # unseen images
    again, losses2 = pretrain_rotnet(model, jax.random.key(0), x, epochs=6, batch_size=32,
                                     lr=3e-3)
    np.testing.assert_array_equal(losses, losses2)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again)):
        np.testing.assert_array_equal(a, b)


def test_init_depends_on_the_key_only(small):
    model, params = small
    same, other = model.init(jax.random.key(1)), model.init(jax.random.key(2))
    for a, b, c in zip(*(jax.tree.leaves(p) for p in (params, same, other))):
        np.testing.assert_array_equal(a, b)
        assert a.shape == c.shape
    assert not np.array_equal(jax.tree.leaves(other)[1], jax.tree.leaves(params)[1])


def test_extract_features_chunks_agree_with_one_call(small):
    model, params = small
    x = _corner_images(7)
    whole = jax.jit(model.features)(params, jnp.asarray(x))
    np.testing.assert_allclose(extract_features(model, params, x, batch_size=3), whole,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(extract_features(model, params, x, batch_size=3),
                                  extract_features(model, params, x, batch_size=3))


@pytest.mark.parametrize("kwargs", [dict(channels=(4, 8, 8)), dict(channels=(4, 8, 8, 8, 0)),
                                    dict(hidden=0), dict(size=30)])
def test_bad_architecture_raises(kwargs):
    with pytest.raises(ValueError):
        rotnet(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(epochs=0), dict(batch_size=100), dict(lr=0.0)])
def test_bad_pretraining_config_raises(kwargs, small):
    model, params = small
    with pytest.raises(ValueError):
        pretrain_rotnet(model, jax.random.key(0), _corner_images(4), **kwargs)
    with pytest.raises(ValueError):
        extract_features(model, params, _corner_images(2), batch_size=0)
