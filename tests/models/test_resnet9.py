"""ResNet9 BatchNorm: batch statistics over the real (masked) rows only."""

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.models.resnet9 import resnet9

KEY = jax.random.key(0)
MODEL = resnet9(10, width=4, conv="native")


def _padded(n_real=3, n_pad=2):
    x = jax.random.uniform(KEY, (n_real, 8, 8, 3))
    y = jax.random.randint(jax.random.key(1), (n_real,), 0, 10)
    junk = 50.0 + 10.0 * jax.random.normal(jax.random.key(2), (n_pad, 8, 8, 3))
    xp = jnp.concatenate([x, junk])
    yp = jnp.concatenate([y, jnp.zeros((n_pad,), y.dtype)])
    mask = jnp.arange(n_real + n_pad) < n_real
    return x, y, xp, yp, mask


def test_padded_rows_do_not_change_loss_gradient_or_running_statistics():
    params, state = MODEL.init(KEY), MODEL.init_state(KEY)
    x, y, xp, yp, mask = _padded()
    real = jnp.ones(x.shape[0], bool)

    @jax.jit
    def all_of_it(xs, ys, m):
        loss, acc = MODEL.loss_and_accuracy(params, xs, ys, m)
        (g, new_state) = jax.grad(MODEL.loss_with_state, has_aux=True)(params, state, xs, ys, m)
        return MODEL.loss(params, xs, ys, m), loss, acc, g, new_state

    ref, got = all_of_it(x, y, real), all_of_it(xp, yp, mask)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_client_without_real_rows_gives_finite_zero_loss():
    params = MODEL.init(KEY)
    _, _, xp, yp, _ = _padded()
    loss, g = jax.jit(jax.value_and_grad(MODEL.loss))(params, xp, yp, jnp.zeros(5, bool))
    assert float(loss) == 0.0
    assert all(bool(jnp.all(a == 0)) for a in jax.tree.leaves(g))
