"""What every algorithm shares: the interface, the cluster state and the evaluation protocols.

An algorithm is an object holding its static config and model, with pure methods:

    init(key, data) -> state
    round(state, key, data) -> (state, metrics)   # one communication round, jit-able
    evaluate(state, data) -> dict of arrays        # per-client test loss/accuracy, assignments
    objective(state, data) -> scalar               # training objective, picks among restarts

Optional, where the objective and the evaluation share a pass over the clients (the
training-loss matrix that both re-assignment and the objective read):

    objective_and_evaluate(state, data) -> (scalar, dict)   # = (objective, evaluate)

The experiment runner owns the round loop (``lax.scan`` chunks, restarts as a vmap axis)
and, at the end, calls ``objective_and_evaluate`` once per restart where it exists.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.core.clients import check_chunk as _check_chunk
from fedclust_jax.core.losses import loss_matrix_ids


@struct.dataclass
class ClusterState:
    """K cluster models and the clients' current assignments.

    params: pytree with leading axis K; assign: int32[N] (-1 = not yet assigned);
    round: int32 scalar, rounds done; model_state: the K models' BatchNorm statistics
    [K, ...] where the algorithm carries them (IFCA with a ``StatefulModel``), else None.
    """

    params: object
    assign: jax.Array
    round: jax.Array
    model_state: object = None


def check_chunk(chunk):
    """chunk: "auto" (the default: layout chosen per backend, ``core.clients.resolve_chunk``),
    None (one vmap over all clients) or a positive number of clients per chunk."""
    _check_chunk(chunk)


def check_clusters(num_clusters: int, num_clients: int | None = None):
    if not isinstance(num_clusters, int) or num_clusters < 1:
        raise ValueError(f"number of clusters K must be an integer >= 1, got {num_clusters!r}")
    if num_clients is not None and num_clusters > num_clients:
        raise ValueError(f"K = {num_clusters} clusters is more than the {num_clients} clients; "
                         "choose K <= number of clients")


WEIGHTINGS = ("equal", "samples")


def check_weighting(weighting: str):
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")


def client_weights(weighting: str, count: jax.Array) -> jax.Array | None:
    """None (equal weights) or the clients' sample counts as float weights."""
    return None if weighting == "equal" else count.astype(jnp.float32)


def evaluate_clusters(model, params, assign, data, *, chunk="auto", active=None,
                      shared_body: bool = False) -> dict:
    """Both evaluation protocols for K cluster models, averaged per client by the caller.

    "best" (IFCA): client i is scored with the model of lowest loss on its own test data,
    among the ``active`` clusters (bool[K]; None = all).
    "assigned" (SR-FCA): client i is scored with model assign[i] (NaN where unassigned).
    Test data is read client by client inside the chunk (``data.test_client``).
    shared_body: the K models share their body (``core.losses.models_loss_accuracy``).
    Returns per-client arrays [N]: test_loss, test_acc (best), assigned_test_loss,
    assigned_test_acc, and the [N, K] matrices test_loss_matrix / test_acc_matrix.
    """
    loss, acc = loss_matrix_ids(model, params, data, None, chunk=chunk, test=True,
                                shared_body=shared_body)
    return score_clusters(loss, acc, assign, active=active)


def score_clusters(loss, acc, assign, *, active=None) -> dict:
    """``evaluate_clusters`` from test matrices already computed: loss, acc [N, K] (e.g.
    by ``core.losses.train_test_loss_matrices``, in the pass that also reads the training
    data), assign int32[N], active bool[K] or None."""
    rows = jnp.arange(loss.shape[0])
    best = jnp.argmin(loss if active is None else jnp.where(active[None, :], loss, jnp.inf), axis=1)
    safe = jnp.clip(assign, 0, loss.shape[1] - 1)
    nan = jnp.where(assign >= 0, 1.0, jnp.nan)
    return dict(test_loss=loss[rows, best], test_acc=acc[rows, best],
                assigned_test_loss=loss[rows, safe] * nan, assigned_test_acc=acc[rows, safe] * nan,
                test_loss_matrix=loss, test_acc_matrix=acc)


def replace(cfg, **changes):
    """dataclasses.replace, re-running validation."""
    return dataclasses.replace(cfg, **changes)
