"""Named initialisations of the dense models: Flax's default and PyTorch's nn.Linear."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.data import from_client_lists
from fedclust_jax.models import build_model, mlp
from fedclust_jax.models.linear import linear_regression

KEY = jax.random.key(3)


def layers(params):
    return [params["layers"][i] for i in sorted(params["layers"])]


def test_torch_init_is_uniform_within_one_over_sqrt_fan_in_for_weights_and_biases():
    params = mlp((784, 200, 10), init="torch").init(KEY)
    for layer, fan_in in zip(layers(params), (784, 200)):
        bound = 1 / np.sqrt(fan_in)
        for name in ("kernel", "bias"):
            a = np.asarray(layer[name])
            assert np.abs(a).max() <= bound
            if a.size >= 200:                              # fills the interval uniformly
                assert np.abs(a).max() > 0.9 * bound
                assert a.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)
            else:
                assert np.any(a)


def test_flax_default_unchanged_lecun_normal_weights_zero_biases():
    default, flax = mlp((784, 200, 10)).init(KEY), mlp((784, 200, 10), init="flax").init(KEY)
    jax.tree.map(np.testing.assert_array_equal, default, flax)
    for layer, fan_in in zip(layers(default), (784, 200)):
        assert not np.any(np.asarray(layer["bias"]))
        assert np.asarray(layer["kernel"]).std() == pytest.approx(1 / np.sqrt(fan_in), rel=0.1)


def test_init_changes_params_not_apply():
    flax, torch = mlp((6, 5, 3)), mlp((6, 5, 3), init="torch")
    params = torch.init(KEY)
    x = jax.random.normal(KEY, (4, 6))
    np.testing.assert_array_equal(flax.apply(params, x), torch.apply(params, x))
    assert jax.tree.structure(params) == jax.tree.structure(flax.init(KEY))


def test_linear_torch_init():
    theta = np.asarray(linear_regression(400, init="torch").init(KEY)["theta"])
    assert np.abs(theta).max() <= 1 / 20 and theta.std() == pytest.approx(1 / 20 / np.sqrt(3), rel=0.15)


def test_registry_passes_init_and_rejects_unknown_names():
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(5, 8)).astype(np.float32) for _ in range(2)]
    ys = [rng.integers(0, 3, 5) for _ in range(2)]
    data = from_client_lists(xs, ys, xs, ys, np.array([0, 1]), task="classification",
                             num_classes=3)
    params = build_model("mlp", data, init="torch").init(KEY)
    assert np.any(np.asarray(layers(params)[0]["bias"]))
    with pytest.raises(ValueError, match="init must be one of"):
        build_model("mlp", data, init="pytorch")
    with pytest.raises(ValueError, match="init must be one of"):
        linear_regression(3, init="kaiming")
