"""Loss (and accuracy) of many models on many clients' data."""

from __future__ import annotations

import jax

from fedclust_jax.core.clients import map_client_data, map_client_train_test, map_clients
from fedclust_jax.data.federated import example_mask


def client_loss_accuracy(model, params, x, y, count):
    """(loss, accuracy) of one model on one client's real examples (x [n_max, ...])."""
    return model.loss_and_accuracy(params, x, y, example_mask(count, x.shape[0]))


def loss_matrix(model, stacked_params, x, y, count, *, chunk=None):
    """Loss and accuracy of each of K models on each of N clients.

    stacked_params: params with leading axis K; x [N, n_max, ...], y [N, n_max], count [N].
    Returns (loss [N, K], accuracy [N, K]). Clients are mapped with ``map_clients`` (memory
    bounded by ``chunk``), models vmapped inside; with K = N client models this is the
    [N, N] cross-loss matrix (row i: client i's data, column j: model j).
    """
    def per_client(xi, yi, ci):
        return jax.vmap(lambda p: client_loss_accuracy(model, p, xi, yi, ci))(stacked_params)
    return map_clients(per_client, x, y, count, chunk=chunk)


def own_loss(model, params, x, y, count, *, chunk=None):
    """(loss [N], accuracy [N]) of client i's own model params[i] on its own data."""
    return map_clients(lambda p, xi, yi, ci: client_loss_accuracy(model, p, xi, yi, ci),
                       params, x, y, count, chunk=chunk)


def loss_matrix_ids(model, stacked_params, data, ids, *, chunk=None, test: bool = False):
    """``loss_matrix`` on clients ``ids`` (int32[M], None = all N) of ``data``, each
    client's training (or, with ``test``, test) data read by id inside the chunk, so no
    array of the participants' data is gathered. Returns (loss [M, K], accuracy [M, K])."""
    def per_client(i, xi, yi, ci):
        return jax.vmap(lambda p: client_loss_accuracy(model, p, xi, yi, ci))(stacked_params)
    return map_client_data(per_client, data, ids, chunk=chunk, test=test)


def train_test_loss_matrices(model, stacked_params, data, *, chunk=None):
    """(train loss [N, K], test loss [N, K], test accuracy [N, K]) of K models on every
    client in ONE pass over the clients (``map_client_train_test``): the training-loss
    matrix and the test matrices of ``loss_matrix_ids`` with and without ``test``,
    without walking the clients twice."""
    def per_client(i, x, y, c, xt, yt, ct):
        on = lambda xi, yi, ci: jax.vmap(
            lambda p: client_loss_accuracy(model, p, xi, yi, ci))(stacked_params)
        return on(x, y, c)[0], *on(xt, yt, ct)
    return map_client_train_test(per_client, data, chunk=chunk)


def own_loss_ids(model, params, data, ids, *, chunk=None, test: bool = False):
    """(loss [M], accuracy [M]) of client i's own model params[m] (leading axis M, aligned
    with ``ids``; None = all N) on its own training (or test) data, read by id."""
    return map_client_data(lambda i, xi, yi, ci, p: client_loss_accuracy(model, p, xi, yi, ci),
                           data, ids, params, chunk=chunk, test=test)
