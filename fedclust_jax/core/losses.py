"""Loss (and accuracy) of many models on many clients' data."""

from __future__ import annotations

import jax

from fedclust_jax.core.clients import map_client_data, map_client_train_test, map_clients
from fedclust_jax.data.federated import example_mask


def client_loss_accuracy(model, params, x, y, count):
    """(loss, accuracy) of one model on one client's real examples (x [n_max, ...])."""
    return model.loss_and_accuracy(params, x, y, example_mask(count, x.shape[0]))


def models_loss_accuracy(model, stacked_params, x, y, count, *, shared_body: bool = False):
    """(loss [K], accuracy [K]) of K models (params with leading axis K) on one client's
    real examples (x [n_max, ...]).

    shared_body: the K models share one body (IFCA weight sharing: every non-``head`` leaf
    is equal across K). With a model that splits (``model.splits``) the body's features
    are then computed once, from model 0's body, and the K heads applied to them: one body
    pass instead of K. A model that does not split runs K full forward passes either way.
    """
    if not (shared_body and model.splits):
        return jax.vmap(lambda p: client_loss_accuracy(model, p, x, y, count))(stacked_params)
    mask = example_mask(count, x.shape[0])
    features = model.body_apply(jax.tree.map(lambda a: a[0], stacked_params), x)
    return jax.vmap(lambda p: model.outputs_loss_and_accuracy(
        model.head_apply(p, features), y, mask))(stacked_params)


def loss_matrix(model, stacked_params, x, y, count, *, chunk=None, shared_body: bool = False):
    """Loss and accuracy of each of K models on each of N clients.

    stacked_params: params with leading axis K; x [N, n_max, ...], y [N, n_max], count [N].
    Returns (loss [N, K], accuracy [N, K]). Clients are mapped with ``map_clients`` (memory
    bounded by ``chunk``), models vmapped inside; with K = N client models this is the
    [N, N] cross-loss matrix (row i: client i's data, column j: model j).
    shared_body: the K models share their body (``models_loss_accuracy``: one body pass).
    """
    def per_client(xi, yi, ci):
        return models_loss_accuracy(model, stacked_params, xi, yi, ci, shared_body=shared_body)
    return map_clients(per_client, x, y, count, chunk=chunk)


def own_loss(model, params, x, y, count, *, chunk=None):
    """(loss [N], accuracy [N]) of client i's own model params[i] on its own data."""
    return map_clients(lambda p, xi, yi, ci: client_loss_accuracy(model, p, xi, yi, ci),
                       params, x, y, count, chunk=chunk)


def loss_matrix_ids(model, stacked_params, data, ids, *, chunk=None, test: bool = False,
                    shared_body: bool = False):
    """``loss_matrix`` on clients ``ids`` (int32[M], None = all N) of ``data``, each
    client's training (or, with ``test``, test) data read by id inside the chunk, so no
    array of the participants' data is gathered. Returns (loss [M, K], accuracy [M, K]).
    shared_body: as ``models_loss_accuracy``."""
    def per_client(i, xi, yi, ci):
        return models_loss_accuracy(model, stacked_params, xi, yi, ci, shared_body=shared_body)
    return map_client_data(per_client, data, ids, chunk=chunk, test=test)


def train_test_loss_matrices(model, stacked_params, data, *, chunk=None,
                             shared_body: bool = False):
    """(train loss [N, K], test loss [N, K], test accuracy [N, K]) of K models on every
    client in ONE pass over the clients (``map_client_train_test``): the training-loss
    matrix and the test matrices of ``loss_matrix_ids`` with and without ``test``,
    without walking the clients twice. shared_body: as ``models_loss_accuracy`` (one
    body pass on the training data and one on the test data per client)."""
    def per_client(i, x, y, c, xt, yt, ct):
        on = lambda xi, yi, ci: models_loss_accuracy(model, stacked_params, xi, yi, ci,
                                                     shared_body=shared_body)
        return on(x, y, c)[0], *on(xt, yt, ct)
    return map_client_train_test(per_client, data, chunk=chunk)


def own_loss_ids(model, params, data, ids, *, chunk=None, test: bool = False):
    """(loss [M], accuracy [M]) of client i's own model params[m] (leading axis M, aligned
    with ``ids``; None = all N) on its own training (or test) data, read by id."""
    return map_client_data(lambda i, xi, yi, ci, p: client_loss_accuracy(model, p, xi, yi, ci),
                           data, ids, params, chunk=chunk, test=test)
