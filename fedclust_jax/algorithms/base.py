"""What every algorithm shares: the ``Algorithm`` protocol, the cluster state and the
evaluation protocols.

An algorithm is an object holding its static config (``cfg``, a frozen dataclass) and
model, with pure, jit-able methods (``Algorithm`` below states them). The runner
(``fedclust_jax.loop``) owns the round loop: ``lax.scan`` chunks of ``round``, restarts as a
vmap axis, ``eval_every`` records, the end of run. It calls what the protocol states and
reads the declared capabilities; it never probes an algorithm for methods.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.core.clients import check_chunk as _check_chunk
from fedclust_jax.core.losses import loss_matrix_ids


@typing.runtime_checkable
class Algorithm(typing.Protocol):
    """The interface the runner needs. Subclass it (``class MyAlg(Algorithm)``) to inherit
    the defaults of the optional members; ``fedclust_jax.register_algorithm`` requires it.

    Required:
        name: str                                   the registry name
        cfg: a frozen dataclass (its fields are the algorithm's parameters)
        model: the model it trains (``models.base.Model``), or what ``rebuild`` needs
        init(key, data) -> state                    a pytree (``flax.struct.dataclass``)
        round(state, key, data) -> (state, metrics) one communication round: the state with
                                                    init's tree, shapes and dtypes; metrics a
                                                    dict {str: array} (scalars are curves and
                                                    plot panels; ``{}`` when none)
        evaluate(state, data) -> dict               see "evaluate's keys" below
        objective(state, data) -> float32 scalar    the training objective; the runner keeps the
                                                    restart with the lowest (no ground truth)

    evaluate's keys (``contract.evaluation_keys``; the runner checks them before compiling):
        every client algorithm: test_loss float[N]; on classification data also
            test_acc float[N] (client i's score with the model it is judged by)
        clusters_clients = True: also assign int[N] (client i's cluster, -1 = none)
        clusters_points = True: point_assign int[N, n_max] instead (-1 on padding), and
            optionally objective (a scalar)
        optional: assigned_test_loss / assigned_test_acc float[N] (scored with model
            assign[i], NaN where unassigned), cluster_params [K, ...] (the cluster models:
            parameter error, ``Trained.predict``), client_params [N, ...] (personal models)

    Optional, with defaults:
        clusters_clients = False   evaluate's "assign" is a clustering of the clients (scored by
                                   misclustering / ARI, cluster sizes in the curves)
        clusters_points = False    evaluate returns "point_assign" (scored by purity)
        fused_end_of_run = False   ``objective_and_evaluate`` shares one pass over the clients
                                   (the runner then calls it instead of the two methods)
        client_vectors = 0         models' worth of per-client vectors [N, P] a round holds per
                                   restart (BR-IFCA's gradients: 1); the memory pre-check counts them
        pairwise_clients = False   a round or init builds [N, N] client-by-client matrices
                                   (cross losses, distances); the memory pre-check counts them
        check_data(data)           raises ValueError (one line) when the data cannot work
        objective_and_evaluate(state, data) -> (objective, evaluation)
        rebuild(cfg) -> a copy with another config (sweeps put traced values in the config)
        participants(num_clients) -> M, the clients that train in one round (default N)
        models_scored(num_clients) -> models each client's data is scored on in the largest
                                   loss pass (default 1; K for loss matrices, N for cross losses)
    The client layout: a config with a ``chunk`` field ("auto", None or a number) takes the
    runner's layout (``experiment.resolve_layout``); one without is run as written.
    A registered algorithm's contract is traced with ``jax.eval_shape`` before its first
    compile (``fedclust_jax.contract``): a state that changes across ``round``, metrics that
    are not a dict of arrays or a missing evaluate key stop the run with one line.
    """

    name: ClassVar[str]
    cfg: Any
    model: Any
    clusters_clients: ClassVar[bool] = False
    clusters_points: ClassVar[bool] = False
    fused_end_of_run: ClassVar[bool] = False
    client_vectors: ClassVar[int] = 0
    pairwise_clients: ClassVar[bool] = False

    def init(self, key, data) -> Any: ...

    def round(self, state, key, data) -> tuple[Any, dict]: ...

    def evaluate(self, state, data) -> dict: ...

    def objective(self, state, data) -> jax.Array: ...

    def check_data(self, data) -> None:
        """Raises ValueError when ``data`` cannot work with this algorithm (default: none)."""

    def objective_and_evaluate(self, state, data) -> tuple[jax.Array, dict]:
        """(objective, evaluation); an algorithm that declares ``fused_end_of_run`` computes
        both in one pass over the clients."""
        return self.objective(state, data), self.evaluate(state, data)

    def rebuild(self, cfg):
        """This algorithm with config ``cfg`` (same model)."""
        return type(self)(self.model, cfg)

    def participants(self, num_clients: int) -> int:
        """M, the clients that train in one round (default: all N)."""
        return num_clients

    def models_scored(self, num_clients: int) -> int:
        """Models each client's data is scored on in the largest loss pass (default 1)."""
        return 1

    @property
    def layout_chunk(self):
        """The client layout the config asks for: its ``chunk`` field, or None (one vmap)
        for a config without one."""
        return self.cfg.chunk if has_chunk(self.cfg) else None

    def with_chunk(self, chunk):
        """This algorithm with the resolved client layout ``chunk`` in its config."""
        return self.rebuild(dataclasses.replace(self.cfg, chunk=chunk)) if has_chunk(self.cfg) else self


def has_chunk(cfg) -> bool:
    """Whether the config dataclass declares a ``chunk`` field (the client layout)."""
    return dataclasses.is_dataclass(cfg) and any(f.name == "chunk" for f in dataclasses.fields(cfg))


class ScoresClusters:
    """Mixin: the largest loss pass scores every client on the cfg.num_clusters models."""

    def models_scored(self, num_clients: int) -> int:
        return self.cfg.num_clusters


class SamplesParticipants:
    """Mixin: M = round(cfg.participation x N) clients train per round."""

    def participants(self, num_clients: int) -> int:
        from fedclust_jax.core.participation import num_participants
        return num_participants(num_clients, self.cfg.participation)


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
