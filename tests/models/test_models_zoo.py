"""Model zoo: parameter counts, output shapes, ResNet9 BatchNorm state per client."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.data import FederatedData
from fedclust_jax.models import MODELS, build_model, mlp, num_params
from fedclust_jax.models.cnn import cifar_cnn, femnist_cnn, local_response_norm
from fedclust_jax.models.lstm import shakespeare_lstm
from fedclust_jax.models.resnet9 import PARAM_COUNTS, resnet9

KEY = jax.random.key(0)


def shapes(model, x_shape, x_dtype=jnp.float32):
    params = jax.eval_shape(model.init, KEY)
    out = jax.eval_shape(model.apply, params, jax.ShapeDtypeStruct(x_shape, x_dtype))
    return num_params(params), out.shape


@pytest.mark.parametrize("model, x_shape, dtype, count, out", [
    (mlp((784, 200, 10)), (5, 28, 28, 1), jnp.float32, 159_010, (5, 10)),
    (femnist_cnn(62), (5, 28, 28, 1), jnp.float32, 6_603_710, (5, 62)),
    (cifar_cnn(10), (5, 32, 32, 3), jnp.float32, 1_068_298, (5, 10)),
    (shakespeare_lstm(80), (5, 80), jnp.int32, 817_872, (5, 80)),
    (resnet9(10, variant="page"), (5, 32, 32, 3), jnp.float32, PARAM_COUNTS["page"], (5, 10)),
    (resnet9(10, variant="srfca"), (5, 32, 32, 3), jnp.float32, PARAM_COUNTS["srfca"], (5, 10)),
])
def test_parameter_counts_and_output_shapes(model, x_shape, dtype, count, out):
    assert shapes(model, x_shape, dtype) == (count, out)


def test_paper_parameter_counts():
    assert PARAM_COUNTS == {"page": 6_573_120, "srfca": 2_274_880}


def test_registry_sizes_models_from_data():
    def fake(feature_shape, classes, dtype=jnp.float32):
        z = jnp.zeros((2, 3, *feature_shape), dtype)
        c = jnp.zeros(2, jnp.int32)
        return FederatedData(x=z, y=jnp.zeros((2, 3), jnp.int32), count=c, x_test=z,
                             y_test=jnp.zeros((2, 3), jnp.int32), count_test=c, cluster=c,
                             num_classes=classes)
    assert {"femnist-cnn", "cifar-cnn", "resnet9", "shakespeare-lstm"} <= set(MODELS)
    assert shapes(build_model("femnist-cnn", fake((28, 28, 1), 62)), (2, 28, 28, 1)) == \
        (6_603_710, (2, 62))
    assert shapes(build_model("cifar-cnn", fake((32, 32, 3), 10)), (2, 32, 32, 3))[1] == (2, 10)
    assert shapes(build_model("shakespeare-lstm", fake((80,), 80), hidden=32), (2, 80),
                  jnp.int32)[1] == (2, 80)
    assert shapes(build_model("resnet9", fake((8, 8, 3), 10), width=8), (2, 8, 8, 3))[1] == (2, 10)
    with pytest.raises(ValueError, match="square images"):
        build_model("femnist-cnn", fake((80,), 80))


def test_lrn_matches_definition():
    x = jax.random.normal(KEY, (1, 2, 2, 12))
    got = local_response_norm(x, depth_radius=2, bias=1.0, alpha=0.1, beta=0.5)
    sq = np.asarray(x) ** 2
    want = np.stack([np.asarray(x)[..., c] / (1.0 + 0.1 * sq[..., max(0, c - 2):c + 3].sum(-1))
                     ** 0.5 for c in range(12)], -1)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_small_lstm_runs():
    lstm = shakespeare_lstm(12, hidden=8)
    p = lstm.init(KEY)
    x = jax.random.randint(KEY, (2, 6), 0, 12)
    apply = jax.jit(lstm.apply)
    out = apply(p, x)
    assert out.shape == (2, 12)
    # the prediction is made at the last step: changing the last token changes the output
    assert not np.allclose(out, apply(p, x.at[:, -1].set((x[:, -1] + 1) % 12)))


def random_params(model, seed=0):
    """Params drawn in numpy at the model's shapes (no XLA compile of the initialisers)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: jnp.asarray(0.2 * rng.standard_normal(a.shape), a.dtype),
                        jax.eval_shape(model.init, KEY))


def test_resnet9_batchnorm_state_per_client_under_vmap():
    model = resnet9(10, width=8)
    params = jax.tree.map(lambda a, b: jnp.stack([a, b]), random_params(model, 0),
                          random_params(model, 1))
    state = jax.vmap(model.init_state)(jax.random.split(KEY, 2))
    x = jnp.stack([jax.random.normal(KEY, (4, 8, 8, 3)),
                   3.0 + 2.0 * jax.random.normal(jax.random.key(1), (4, 8, 8, 3))])
    y = jnp.zeros((2, 4), jnp.int32)
    mask = jnp.ones((2, 4), bool)

    @jax.jit
    def step(params, state, x, y, mask):
        grad = jax.grad(model.loss_with_state, has_aux=True)
        g, new_state = jax.vmap(grad)(params, state, x, y, mask)
        out_eval, same = jax.vmap(functools.partial(model.apply_with_state, train=False))(
            params, new_state, x)
        return g, new_state, out_eval, same

    g, new_state, out_eval, same = step(params, state, x, y, mask)
    client = lambda tree, i: jax.tree.leaves(jax.tree.map(lambda a: a[i], tree))
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert not all(np.allclose(a, b) for a, b in zip(client(new_state, 0), client(new_state, 1)))
    assert not all(np.allclose(a, b) for a, b in zip(client(new_state, 0), client(state, 0)))
    # each client's statistics depend only on its own data and params: swapping the clients
    # swaps the statistics (same compiled program)
    swap = lambda t: jax.tree.map(lambda a: a[::-1], t)
    _, swapped, _, _ = step(swap(params), swap(state), x[::-1], y, mask)
    for a, b in zip(jax.tree.leaves(swapped), jax.tree.leaves(swap(new_state))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # eval mode leaves the state as it is; gradients are finite
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(new_state)):
        np.testing.assert_array_equal(a, b)
    assert out_eval.shape == (2, 4, 10)
    assert all(np.isfinite(a).all() for a in jax.tree.leaves(g))


@pytest.mark.parametrize("model,x_dim,head_size", [(mlp((12, 7, 5)), 12, 7 * 5 + 5),
                                                  (femnist_cnn(6, size=8), 64, 2048 * 6 + 6)],
                         ids=["mlp", "femnist_cnn"])
def test_head_only_on_the_body_features_equals_the_whole_model(model, x_dim, head_size):
    from fedclust_jax.core.pytree import head_only
    p = model.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (4, x_dim))
    head, take_head = head_only(model, p)
    hp = take_head(p)
    assert sum(a.size for a in hp) == head_size
    np.testing.assert_allclose(head.apply(hp, model.body_apply(p, x)), model.apply(p, x),
                               rtol=1e-6, atol=1e-6)
    assert sum(a.size for a in head.init(jax.random.key(2))) == head_size


def test_head_only_refuses_a_model_that_does_not_split():
    from fedclust_jax.core.pytree import head_only
    from fedclust_jax.models.linear import linear_regression
    with pytest.raises(ValueError, match="does not split"):
        head_only(linear_regression(3), None)
