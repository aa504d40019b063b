"""The one round loop, as pure functions: keys, init, a chunk of rounds in ``lax.scan``,
evaluation records, end of run.

Every run goes through these functions: ``experiment.run_rounds`` drives them from the
host (chunks, progress, checkpoints, a device mesh), ``sweep_calls`` vmaps init, chunks and
end of run over grid points. Nothing here touches the host, so each function is jit-able
and vmappable.

Keys (``core.keys``): the run key is ``RUN.restarts`` of ``key(seed)``; restart r's key is
``split(run_key, R)[r]``, its init key ``RESTART.init`` of that and round t's key
``fold_in(RESTART.rounds of that, t)``. Round t's key depends on t alone, so results do not
depend on how rounds are cut into chunks, and a resumed run equals the uninterrupted one.

Evaluation records (``eval_every = E``): after every round t with (t + 1) % E == 0 the
scan body evaluates the state (``eval_record``: client-mean test loss / accuracy, cluster
sizes and, where the truth is known, the found x true contingency table) under one
``lax.cond``, with no host round trip; ``curves_from_records`` turns them into curves on
the host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import metrics
from fedclust_jax.core.keys import RESTART, RUN


# ---- keys ---------------------------------------------------------------------------------

def data_key(seed):
    """The dataset builder's key of a run with ``seed``."""
    return RUN.key(jax.random.key(seed), "data")


def run_key(seed):
    """The key every restart of a run with ``seed`` comes from."""
    return RUN.key(jax.random.key(seed), "restarts")


def restart_keys(key, restarts: int):
    """(init keys [R], round keys [R]) of the R restarts of the run key ``key``."""
    keys = jax.random.split(key, restarts)
    return (jax.vmap(lambda k: RESTART.key(k, "init"))(keys),
            jax.vmap(lambda k: RESTART.key(k, "rounds"))(keys))


# ---- init, rounds, end of run ---------------------------------------------------------------

def init_states(alg, init_keys, data):
    """States of the R restarts (leading axis R) from their init keys [R]."""
    return jax.vmap(alg.init, in_axes=(0, None))(init_keys, data)


def scan_rounds(alg, state, round_key, data, ts, *, eval_every: int | None = None,
                spec: dict | None = None):
    """One restart's rounds ``ts`` (int32[T], absolute round indices) in one ``lax.scan``:
    round t runs ``alg.round(state, fold_in(round_key, t), data)``. Returns (state, history
    {name: [T, ...]}); with ``eval_every`` the history also holds "eval.<name>" from
    ``eval_record`` after rounds t with (t + 1) % E == 0 (zeros elsewhere)."""
    def body(s, t):
        s, m = alg.round(s, jax.random.fold_in(round_key, t), data)
        if eval_every:
            record = lambda st: eval_record(alg, data, spec, st)
            blank = lambda st: jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                                            jax.eval_shape(record, st))
            rec = jax.lax.cond((t + 1) % eval_every == 0, record, blank, s)
            m = {**m, **{f"eval.{k}": v for k, v in rec.items()}}
        return s, m
    return jax.lax.scan(body, state, ts)


def run_chunk(alg, states, round_keys, data, ts, *, eval_every: int | None = None,
              spec: dict | None = None):
    """``scan_rounds`` of every restart (vmapped over the leading axis R of ``states`` and
    ``round_keys``): (states, history {name: [R, T, ...]})."""
    return jax.vmap(lambda s, k: scan_rounds(alg, s, k, data, ts, eval_every=eval_every,
                                             spec=spec))(states, round_keys)


def objective_and_evaluate(alg, states, data):
    """(objective float32[R], evaluation {name: [R, ...]}) of every restart, vmapped: the
    algorithm's own one-pass ``objective_and_evaluate`` where it declares
    ``fused_end_of_run``, else its ``objective`` and ``evaluate``."""
    if alg.fused_end_of_run:
        return jax.vmap(alg.objective_and_evaluate, in_axes=(0, None))(states, data)
    return (jax.vmap(alg.objective, in_axes=(0, None))(states, data),
            jax.vmap(alg.evaluate, in_axes=(0, None))(states, data))


def run_program(alg, data, key, *, rounds: int, restarts: int, eval_every: int | None = None,
                spec: dict | None = None):
    """A whole run as one pure function (what ``sweep`` vmaps over grid points): init of
    the R restarts from the run key ``key``, ``rounds`` rounds in one scan, the end of run.
    Returns (objective [R], evaluation {name: [R, ...]}, history {name: [R, rounds, ...]})."""
    init_keys, round_keys = restart_keys(key, restarts)
    states = init_states(alg, init_keys, data)
    states, history = run_chunk(alg, states, round_keys, data, jnp.arange(rounds),
                                eval_every=eval_every, spec=spec)
    objective, evaluation = objective_and_evaluate(alg, states, data)
    return objective, evaluation, history


# ---- evaluation records -------------------------------------------------------------------

def eval_spec(alg, data) -> dict:
    """What the per-round evaluation of ``alg`` on ``data`` records (host side, static):
    kind "clients" (client metrics, and cluster sizes where ``alg.clusters_clients``) or
    "points" (``evaluate`` returns point_assign); bound: the number of cluster ids (the K
    of "cluster_params", else the number of clients; for points ``alg.cfg.num_clusters``);
    truth: the number of true clusters (0: unknown)."""
    shapes = jax.eval_shape(alg.evaluate, jax.eval_shape(alg.init, jax.random.key(0), data), data)
    if "point_assign" in shapes:
        truth = 0 if data.point_cluster is None else int(np.asarray(data.point_cluster).max()) + 1
        return {"kind": "points", "bound": alg.cfg.num_clusters, "truth": truth,
                "task": data.task, "objective": "objective" in shapes}
    clusters = alg.clusters_clients and "assign" in shapes
    bound = data.num_clients
    if "cluster_params" in shapes and jax.tree.leaves(shapes["cluster_params"]):
        bound = int(jax.tree.leaves(shapes["cluster_params"])[0].shape[0])
    keys = [k for k in ("test_loss", "assigned_test_loss", "test_acc", "assigned_test_acc")
            if k in shapes and (k.endswith("loss") or data.task == "classification")]
    return {"kind": "clients", "bound": bound if clusters else None,
            "truth": data.num_true_clusters if clusters else 0, "task": data.task, "keys": keys}


def _client_mean(values, count):
    """``metrics.client_mean`` in JAX: mean over clients with data and a finite value."""
    keep = ~jnp.isnan(values) & (count > 0)
    return jnp.sum(jnp.where(keep, values, 0.0)) / jnp.sum(keep)


def _cluster_table(found, truth, bound: int, classes: int):
    """int32[bound + 1, classes] counts of (found, truth) over entries with truth >= 0;
    the last row counts the unassigned (found < 0)."""
    rows = jax.nn.one_hot(jnp.where(found >= 0, found, bound).ravel(), bound + 1, dtype=jnp.int32)
    cols = jax.nn.one_hot(truth.ravel(), classes, dtype=jnp.int32)   # -1 -> zeros
    return rows.T @ cols


def eval_record(alg, data, spec: dict, state) -> dict:
    """One point of the curves, jit-able: client-mean test loss / accuracy (as
    ``metrics.client_mean``), cluster sizes int32[bound] and, where the truth is known, the
    [bound + 1, truth] contingency table (misclustering, ARI and purity follow on the host,
    ``curves_from_records``)."""
    ev = alg.evaluate(state, data)
    out = {}
    if spec["kind"] == "points":
        found = ev["point_assign"]
        if spec["objective"]:
            out["objective"] = ev["objective"]
        if spec["bound"] is not None:
            out["cluster_sizes"] = jnp.sum(jax.nn.one_hot(found.ravel(), spec["bound"],
                                                          dtype=jnp.int32), axis=0)
        if spec["truth"]:
            real = jnp.arange(found.shape[1])[None, :] < data.count[:, None]
            truth = jnp.where(real, data.point_cluster, -1)
            out["table"] = _cluster_table(found, truth, spec["bound"], spec["truth"])
        return out
    for k in spec["keys"]:
        out[k] = _client_mean(ev[k], data.count_test)
    if spec["bound"] is not None:
        assign = ev["assign"]
        out["cluster_sizes"] = jnp.sum(jax.nn.one_hot(assign, spec["bound"], dtype=jnp.int32), axis=0)
        if spec["truth"]:
            out["table"] = _cluster_table(assign, data.cluster, spec["bound"], spec["truth"])
    return out


def curve_rounds(rounds: int, eval_every: int | None, start: int = 0) -> list[int]:
    """Rounds done at each curve point: E, 2E, ... <= rounds (after ``start``)."""
    if not eval_every:
        return []
    return [t + 1 for t in range(start, rounds) if (t + 1) % eval_every == 0]


def split_history(history: dict, rounds: list[int], start: int = 0) -> tuple[dict, dict]:
    """(history without "eval.*", the recorded points [R, T, ...] at ``rounds``) from
    per-round arrays [R, rounds_run, ...]."""
    hist = {k: v for k, v in history.items() if not k.startswith("eval.")}
    idx = np.asarray(rounds, np.int64) - 1 - start
    recs = {k[len("eval."):]: np.take(np.asarray(v), idx, axis=1)
            for k, v in history.items() if k.startswith("eval.")}
    return hist, recs


def curves_from_records(records: dict, rounds: list[int], spec: dict,
                        history: dict | None = None) -> dict:
    """{"round": [...], metric: [...]} from the recorded points (numpy [T, ...] each; T =
    len(rounds)): the client means, num_clusters_found and cluster_sizes, and from the
    contingency tables misclustering, ARI and (points) purity. history: the algorithm's own
    per-round metrics {name: [rounds_run]} (``round``'s metrics dict, the first run round
    being round 1); each scalar one joins the curves at the same rounds (a name the
    evaluation already records is left to it)."""
    out = {"round": list(rounds)}
    for k, v in records.items():
        if k in ("table", "cluster_sizes"):
            continue
        out[k] = [float(x) for x in np.asarray(v, np.float64)]
    if "cluster_sizes" in records:
        sizes = np.asarray(records["cluster_sizes"])
        out["num_clusters_found"] = [int(n) for n in (sizes > 0).sum(axis=1)]
        out["cluster_sizes"] = sizes.tolist()
    if "table" in records:
        tables = np.asarray(records["table"])
        if spec["kind"] == "points":
            out["purity"] = [metrics.purity_from_table(t) for t in tables]
        out["misclustering"] = [metrics.misclustering_from_table(t) for t in tables]
        out["ari"] = [metrics.ari_from_table(t) for t in tables]
    for name, values in (history or {}).items():
        values = np.asarray(values)
        if name not in out and values.ndim == 1 and np.issubdtype(values.dtype, np.number):
            out[name] = [float(values[t - 1]) for t in rounds]
    return out
