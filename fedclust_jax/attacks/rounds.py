"""One round's client side with Byzantine clients: cluster choice and uploaded gradients.

Honest client i: jhat_i = argmin_j F_i(theta_j) (ties to the lowest index) and
g_i = grad F_i(theta_{jhat_i}). Byzantine client b: labels flipped if the attack says so,
loss and gradient taken at ``attack.eval_params(theta)`` (3 theta for the outlier attack),
cluster claimed by ``attack.place``, upload replaced by ``attack.corrupt``.

Every client's training data is read by id inside the chunk (``data.train_client(i)``, via
``core.clients.map_client_data``), so on ``FederatedViews`` no array of every client's
examples is built; Byzantine labels are flipped per client as they are read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedclust_jax.core.clients import map_client_data
from fedclust_jax.core.losses import client_loss_accuracy
from fedclust_jax.core.train import client_gradient


def client_labels(attack, y, is_byz, num_classes: int = 0):
    """y [n_max] of one client: flipped under ``label_flip`` when ``is_byz`` (scalar bool)."""
    return attack.flip_labels(y[None], jnp.reshape(is_byz, (1,)), num_classes)[0]


def byzantine_assign(model, attack, params, data, byz, *, chunk=None):
    """(assign int32[N], loss [N, K]): loss-based choice for every client of ``data``
    (``FederatedData`` or ``FederatedViews``), the Byzantine rows (byz bool[N]) evaluated on
    their flipped labels at ``attack.eval_params(params)`` and then placed. Each client
    computes K losses, at the K models it sees (a select of the two [K, ...] stacks per
    client: memory chunk x K x P under the outlier attack)."""
    k = jax.tree.leaves(params)[0].shape[0]
    bad = attack.eval_params(params) if attack.name == "outlier" else None

    def per_client(i, x, y, count):
        y = client_labels(attack, y, byz[i], data.num_classes)
        p = params if bad is None else jax.tree.map(
            lambda g, b: jnp.where(byz[i], b, g), params, bad)       # K losses, at one point
        return jax.vmap(lambda q: client_loss_accuracy(model, q, x, y, count)[0])(p)

    loss = map_client_data(per_client, data, None, chunk=chunk)
    assign = jnp.argmin(loss, axis=1).astype(jnp.int32)
    return attack.place(assign, byz, k), loss


def byzantine_gradients(model, local, attack, key, params, assign, data, keys, byz,
                        *, num_byz=None, chunk=None):
    """Uploads [N, ...]: g_i = grad F_i(theta_{assign_i}) on client i's data (read by id);
    Byzantine rows on their flipped labels at the attack's evaluation point, then corrupted.
    assign: int32[N] (from ``byzantine_assign`` or a fixed clustering); keys: [N] client keys."""
    k = jax.tree.leaves(params)[0].shape[0]
    bad = attack.eval_params(params) if attack.name == "outlier" else params

    def per_client(i, x, y, count, a, ki):
        start = jax.tree.map(lambda g, b: jnp.where(byz[i], b[a], g[a]), params, bad)
        y = client_labels(attack, y, byz[i], data.num_classes)
        return client_gradient(model, local, start, x, y, count, ki)

    grads = map_client_data(per_client, data, None, assign, keys, chunk=chunk)
    return attack.corrupt(key, grads, assign, byz, k, num_byz)
