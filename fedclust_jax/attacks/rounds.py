"""One round's client side with Byzantine clients: cluster choice and uploaded gradients.

Honest client i: jhat_i = argmin_j F_i(theta_j) (ties to the lowest index) and
g_i = grad F_i(theta_{jhat_i}). Byzantine client b: labels flipped if the attack says so,
loss and gradient taken at ``attack.eval_params(theta)`` (3 theta for the outlier attack),
cluster claimed by ``attack.place``, upload replaced by ``attack.corrupt``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.pytree import take
from fedclust_jax.core.train import client_gradient


def _rows(mask, a):
    return mask.reshape((-1,) + (1,) * (a.ndim - 1))


def byzantine_assign(model, attack, params, x, y, count, byz, *, num_classes=0, chunk=None):
    """(assign int32[M], loss [M, K], y used [M, n]): loss-based choice for everyone, the
    Byzantine rows evaluated at ``attack.eval_params(params)`` and then placed."""
    k = jax.tree.leaves(params)[0].shape[0]
    y = attack.flip_labels(y, byz, num_classes)
    if attack.name == "outlier":   # both loss matrices in one pass over the data
        both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), params,
                            attack.eval_params(params))
        loss, _ = loss_matrix(model, both, x, y, count, chunk=chunk)
        loss = jnp.where(byz[:, None], loss[:, k:], loss[:, :k])
    else:
        loss, _ = loss_matrix(model, params, x, y, count, chunk=chunk)
    assign = jnp.argmin(loss, axis=1).astype(jnp.int32)
    return attack.place(assign, byz, k), loss, y


def byzantine_gradients(model, local, attack, key, params, assign, x, y, count, keys, byz,
                        *, num_byz=None, chunk=None):
    """Uploads [M, ...]: g_i = grad F_i(theta_{assign_i}); Byzantine rows at the attack's
    evaluation point, then corrupted. ``y`` should come from ``byzantine_assign``."""
    k = jax.tree.leaves(params)[0].shape[0]
    start = take(params, assign)
    if attack.name == "outlier":
        bad = take(attack.eval_params(params), assign)
        start = jax.tree.map(lambda b, s: jnp.where(_rows(byz, s), b, s), bad, start)
    grads = map_clients(lambda p, xi, yi, ci, ki: client_gradient(model, local, p, xi, yi, ci, ki),
                        start, x, y, count, keys, chunk=chunk)
    return attack.corrupt(key, grads, assign, byz, k, num_byz)
