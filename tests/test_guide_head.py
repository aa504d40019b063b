"""A model's body / head split, public: ``Model.head`` holds path prefixes, ``head_mask``
marks exactly the last layer's leaves of the built-in models, and ``with_head`` joins one
tree's body with another's head."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.core.pytree import path_name
from fedclust_jax.models.registry import build_model
from fedclust_jax.trained import DataShape


def head_paths(model, params):
    mask = model.head_mask(params)
    return sorted(path_name(p) for p, m in jax.tree_util.tree_flatten_with_path(mask)[0] if m)


@pytest.mark.parametrize("name, shape, classes, last", [
    ("mlp", (6,), 3, ["layers/1/bias", "layers/1/kernel"]),
    ("cifar-cnn", (32, 32, 3), 10, ["fc3/bias", "fc3/kernel"]),
    ("femnist-cnn", (28, 28, 1), 62, ["fc2/bias", "fc2/kernel"]),
])
def test_the_mask_is_true_exactly_on_the_last_layer(name, shape, classes, last):
    """The head is the last layer: its leaves alone change ``head_apply`` on fixed features,
    and the body's alone change the features."""
    model = build_model(name, DataShape(shape, classes, "classification"))
    params = jax.jit(model.init)(jax.random.key(0))
    assert head_paths(model, params) == last
    x = jax.random.normal(jax.random.key(1), (2, *shape))
    body, head = jax.jit(model.body_apply), jax.jit(model.head_apply)   # compiled once
    h = body(params, x)
    leaves, treedef = jax.tree.flatten(params)
    for i, in_head in enumerate(jax.tree.leaves(model.head_mask(params))):
        bumped = jax.tree.unflatten(treedef, [a + 1.0 if j == i else a
                                              for j, a in enumerate(leaves)])
        head_moved = not np.allclose(head(bumped, h), head(params, h))
        body_moved = not np.allclose(body(bumped, x), h)
        assert (head_moved, body_moved) == (in_head, not in_head), i


def test_with_head_joins_a_body_and_another_head():
    model = build_model("mlp", DataShape((6,), 3, "classification"))
    a, b = model.init(jax.random.key(0)), model.init(jax.random.key(1))
    joined = model.with_head(a, b)
    np.testing.assert_array_equal(joined["layers"][0]["kernel"], a["layers"][0]["kernel"])
    np.testing.assert_array_equal(joined["layers"][1]["kernel"], b["layers"][1]["kernel"])
    stacked = jax.tree.map(lambda *t: jnp.stack(t), a, b)            # [K, ...] trees too
    assert head_paths(model, stacked) == ["layers/1/bias", "layers/1/kernel"]
    # the forward pass splits where the mask does
    x = jnp.ones((2, 6))
    np.testing.assert_allclose(model.apply(joined, x),
                               model.head_apply(b, model.body_apply(a, x)), rtol=1e-6)


def test_a_model_without_a_head_says_so_in_one_line():
    from fedclust_jax import from_nnx
    from flax import nnx
    model = from_nnx("bare", lambda rngs: nnx.Linear(3, 2, rngs=rngs), task="classification")
    params = model.init(jax.random.key(0))
    with pytest.raises(ValueError, match="declares no head"):
        model.head_mask(params)
    wrong = from_nnx("wrong", lambda rngs: nnx.Linear(3, 2, rngs=rngs),
                     task="classification", head=("fc",))
    with pytest.raises(ValueError, match=r"names no parameter; its parameters are \['bias', "
                                         r"'kernel'\]"):
        wrong.head_mask(params)
