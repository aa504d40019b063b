"""Config -> data, model, algorithm -> round loop -> results.

The runner owns the loop: rounds run inside ``lax.scan`` chunks (one compiled program per
chunk length), restarts are a ``vmap`` axis over independent initialisations, and progress is
reported between chunks. Keys: data from ``fold_in(root, 0)``, restart r from
``split(fold_in(root, 1), R)[r]``; its init from ``fold_in(restart_key, 0)`` and round t from
``fold_in(fold_in(restart_key, 1), t)``; client i from ``fold_in(round_key, i)`` inside the
algorithms, so results do not depend on chunk sizes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import checkpoint as ckpt
from fedclust_jax import metrics
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm, make_config
from fedclust_jax.data.registry import DATASETS, build_dataset
from fedclust_jax.models.registry import build_model


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One run: dataset (name and builder parameters), model (None = the task's default),
    algorithm (name and flat parameters), rounds, seed and random restarts.

    rounds_per_chunk: rounds compiled into one ``lax.scan`` (None: about rounds / 10,
    a divisor of rounds so one program serves every chunk).
    """

    dataset: str = "synthetic-regression"
    data: dict = dataclasses.field(default_factory=dict)
    model: str | None = None
    model_args: dict = dataclasses.field(default_factory=dict)
    algorithm: str = "ifca"
    params: dict = dataclasses.field(default_factory=dict)
    rounds: int = 100
    seed: int = 0
    restarts: int = 1
    rounds_per_chunk: int | None = None

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; available: {', '.join(sorted(DATASETS))}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}; available: {', '.join(sorted(ALGORITHMS))}")
        if not isinstance(self.rounds, int) or self.rounds < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {self.rounds!r}")
        if not isinstance(self.restarts, int) or self.restarts < 1:
            raise ValueError(f"restarts must be an integer >= 1, got {self.restarts!r}")
        if self.rounds_per_chunk is not None and self.rounds_per_chunk < 1:
            raise ValueError(f"rounds_per_chunk must be >= 1, got {self.rounds_per_chunk}")
        # Validate the algorithm's parameters now, before any data is built.
        make_config(ALGORITHMS[self.algorithm].config_cls, self.params, self.algorithm)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def chunk_length(rounds: int, wanted: int | None) -> int:
    """The divisor of ``rounds`` closest to ``wanted`` (default rounds / 10)."""
    if rounds == 0:
        return 1
    wanted = wanted or max(1, rounds // 10)
    divisors = [d for d in range(1, rounds + 1) if rounds % d == 0]
    return min(divisors, key=lambda d: (abs(d - wanted), d))


class Progress:
    """A one-line progress bar on stderr, updated between compiled chunks."""

    def __init__(self, label: str, total: int, enabled: bool = True, width: int = 30):
        self.label, self.total, self.enabled, self.width = label, total, enabled, width
        self.start = time.perf_counter()

    def update(self, done: int, extra: str = ""):
        if not self.enabled:
            return
        filled = int(self.width * done / max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        sys.stderr.write(f"\r{self.label:>10} [{bar}] {done}/{self.total} rounds "
                         f"{time.perf_counter() - self.start:6.1f}s {extra}")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_rounds(alg, data, key, *, rounds: int, restarts: int = 1,
               rounds_per_chunk: int | None = None, progress: bool = True,
               checkpoint: str | None = None, config: dict | None = None):
    """Runs ``rounds`` rounds of ``alg`` for ``restarts`` independent initialisations.

    checkpoint: a .npz path written after every chunk; if it exists the run resumes from it
    (``config`` must match the one it was written with).
    Keys: restart r's key k_r = split(key, R)[r] seeds its init through fold_in(k_r, 0) and
    its rounds through fold_in(k_r, 1) (round t: fold_in(fold_in(k_r, 1), t)), so the init
    and the round keys never share a parent. The round state is donated to each compiled
    chunk of rounds (its buffers are reused for the next state).
    Returns (final states with leading axis R, per-round metrics dict of [R, rounds] arrays).
    """
    restart_keys = jax.random.split(key, restarts)
    init_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(restart_keys)
    round_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(restart_keys)
    states = jax.jit(jax.vmap(alg.init, in_axes=(0, None)))(init_keys, data)
    length = chunk_length(rounds, rounds_per_chunk)
    done, history = 0, []
    if checkpoint and os.path.exists(checkpoint):
        states, saved, done = ckpt.load(checkpoint, states, config or {})
        if done > rounds:
            raise ValueError(f"checkpoint {checkpoint} is at round {done}, past the {rounds} asked for")
        history = [saved] if saved else []

    def one_restart(state, rkey, data, ts):
        def body(s, t):
            return alg.round(s, jax.random.fold_in(rkey, t), data)
        return jax.lax.scan(body, state, ts)

    chunk = jax.jit(jax.vmap(one_restart, in_axes=(0, 0, None, None)), donate_argnums=(0,))
    bar = Progress(alg.name, rounds, progress)
    merge = lambda hs: {k: np.concatenate([np.asarray(h[k]) for h in hs], axis=1) for k in hs[0]} if hs else {}
    start = done
    while start < rounds:
        stop = min(start + length, rounds)
        states, hist = chunk(states, round_keys, data, jnp.arange(start, stop))
        history.append(hist)
        if checkpoint:
            ckpt.save(checkpoint, states, merge(history), stop, config or {})
        loss = hist.get("train_loss")
        bar.update(stop, "" if loss is None else f"train loss {float(loss[:, -1].min()):.4g}")
        start = stop
    return states, merge(history)


def summarize(alg, evaluation: dict, data) -> dict:
    """Client-averaged scalar metrics from ``alg.evaluate`` output (numpy, host side)."""
    ev = {k: v if k == "cluster_params" else np.asarray(v) for k, v in evaluation.items()}
    out = {"test_loss": metrics.client_mean(ev["test_loss"], data.count_test),
           "assigned_test_loss": metrics.client_mean(ev["assigned_test_loss"], data.count_test)}
    if data.task == "classification":
        out["test_acc"] = metrics.client_mean(ev["test_acc"], data.count_test)
        out["assigned_test_acc"] = metrics.client_mean(ev["assigned_test_acc"], data.count_test)
    clusters = getattr(alg, "clusters_clients", False)
    assign = ev["assign"]
    out["num_clusters_found"] = int(len(np.unique(assign[assign >= 0]))) if clusters else None
    has_truth = data.num_true_clusters > 0 and clusters
    out["misclustering"] = metrics.misclustering(assign, data.cluster) if has_truth else None
    out["ari"] = metrics.adjusted_rand_index(assign, data.cluster) if has_truth else None
    if data.true_params is not None and clusters and "cluster_params" in ev:
        est = _flat_cluster_params(ev["cluster_params"])
        if est is not None and len(est) >= len(data.true_params):
            out["param_error"] = metrics.parameter_error(est, data.true_params, "hungarian")
            out["param_error_nearest"] = metrics.parameter_error(est, data.true_params, "nearest")
    return out


def _flat_cluster_params(params):
    leaves = jax.tree.leaves(params)
    if len(leaves) != 1:
        return None
    return np.asarray(leaves[0]).reshape(leaves[0].shape[0], -1)


def resolve_layout(alg, data, *, restarts: int = 1, devices: int | None = None,
                   memory_limit: int | None = None):
    """(algorithm, layout dict): the client layout of ``alg.cfg.chunk`` resolved for this
    backend (``core.clients.resolve_chunk``; "auto" on an accelerator is one vmap, cut to
    the largest power-of-two chunk that fits), and the memory pre-check
    (``core.memory``): ValueError with advice when the estimate exceeds ``memory_limit``
    (default: the device's free memory; on a CPU, available RAM). The algorithm is rebuilt
    with the resolved chunk. layout: requested, chunk (None = one vmap), backend, devices,
    estimated_bytes (by part) and available_bytes."""
    from fedclust_jax.core import memory
    from fedclust_jax.core.clients import AUTO, resolve_chunk

    backend, ndev = jax.default_backend(), devices or 1
    requested = getattr(getattr(alg, "cfg", None), "chunk", None)
    chunk = resolve_chunk(requested, data.num_clients, backend=backend, devices=ndev)
    available = memory_limit if memory_limit is not None else memory.available_bytes()
    try:
        if requested == AUTO:
            chunk = memory.fit_chunk(alg, data, restarts=restarts, available=available,
                                     chunk=chunk)
        needed = memory.estimate(alg, data, restarts=restarts, chunk=chunk)
    except Exception:   # an algorithm whose shapes cannot be traced abstractly: no estimate
        needed = None
    if needed is not None:
        memory.check_fits(needed, available)
    if requested == AUTO and dataclasses.is_dataclass(alg.cfg):
        alg = type(alg)(alg.model, dataclasses.replace(alg.cfg, chunk=chunk))
    layout = {"requested": requested, "chunk": chunk, "backend": backend, "devices": ndev,
              "estimated_bytes": needed, "available_bytes": available}
    return alg, layout


def run_experiment(cfg: ExperimentConfig, *, data=None, progress: bool = True,
                   checkpoint: str | None = None, devices: int | None = None,
                   memory_limit: int | None = None) -> dict:
    """Builds data (unless given), model and algorithm, runs, evaluates. Returns a JSON-able
    dict: config, metrics (of the restart with the lowest training objective), restart
    diagnostics, per-round history and wall time.

    checkpoint: .npz path saved after every chunk and resumed from if present.
    devices: split the clients over this many devices (a ``clients`` mesh; None = one).
    memory_limit: bytes the run may use (default: the device's free memory); the run is
    refused before compiling when the estimate exceeds it (``resolve_layout``).
    The result's "layout" records the client layout used and the memory estimate.
    """
    root = jax.random.key(cfg.seed)
    if data is None:
        data = build_dataset(cfg.dataset, jax.random.fold_in(root, 0), **cfg.data)
    model = build_model(cfg.model, data, **cfg.model_args)
    alg = build_algorithm(cfg.algorithm, model, cfg.params, data)
    alg, layout = resolve_layout(alg, data, restarts=cfg.restarts, devices=devices,
                                 memory_limit=memory_limit)
    if devices is not None and devices > 1:
        from fedclust_jax.core.sharding import client_mesh, shard_clients
        if devices > jax.device_count():
            raise ValueError(f"asked for {devices} devices, {jax.device_count()} available")
        data = shard_clients(data, client_mesh(jax.devices()[:devices]))
    t0 = time.perf_counter()
    states, history = run_rounds(alg, data, jax.random.fold_in(root, 1), rounds=cfg.rounds,
                                 restarts=cfg.restarts, rounds_per_chunk=cfg.rounds_per_chunk,
                                 progress=progress, checkpoint=checkpoint, config=cfg.to_dict())
    objective = np.asarray(jax.jit(jax.vmap(alg.objective, in_axes=(0, None)))(states, data))
    chosen = int(np.nanargmin(objective)) if np.isfinite(objective).any() else 0
    evaluate = jax.jit(alg.evaluate)
    pick = lambda r: jax.tree.map(lambda a: a[r], states)
    result_metrics = summarize(alg, evaluate(pick(chosen), data), data)
    wall = time.perf_counter() - t0
    restarts_info: dict[str, Any] = {"objective": objective.tolist(), "chosen": chosen}
    if cfg.restarts > 1:
        per = [summarize(alg, evaluate(pick(r), data), data) for r in range(cfg.restarts)]
        for key in ("param_error", "misclustering"):
            vals = [p.get(key) for p in per]
            if all(v is not None for v in vals):
                restarts_info[f"oracle_best_{key}"] = float(min(vals))
                restarts_info[key] = vals
    return {
        "algorithm": cfg.algorithm, "config": cfg.to_dict(), "data": data.summary(),
        "metrics": result_metrics, "restarts": restarts_info,
        "history": {k: v[chosen].tolist() for k, v in history.items()},
        "wall_s": wall, "layout": layout,
    }


TABLE_COLUMNS = (("test_acc", "acc"), ("test_loss", "loss"), ("misclustering", "miscl"),
                 ("ari", "ARI"), ("param_error", "param err"), ("num_clusters_found", "K found"))


def format_table(results: list[dict]) -> str:
    """Plain-text table, one row per result (columns present in any result)."""
    cols = [(k, h) for k, h in TABLE_COLUMNS if any(r["metrics"].get(k) is not None for r in results)]
    header = ["algorithm"] + [h for _, h in cols] + ["time s"]
    rows = []
    for r in results:
        row = [r["algorithm"]]
        for k, _ in cols:
            v = r["metrics"].get(k)
            row.append("-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)))
        row.append(f"{r['wall_s']:.1f}")
        rows.append(row)
    widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
    fmt = lambda row: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def save_results(results: list[dict], path: str):
    with open(path, "w") as f:
        json.dump(results, f, indent=2, default=float)


STUDY_KEYS = ("dataset", "data", "model", "model_args", "rounds", "seed", "restarts",
              "rounds_per_chunk", "algorithms")


def study_configs(study: dict) -> list[tuple[str, ExperimentConfig]]:
    """(label, ExperimentConfig) for every algorithm of a study dict (see ``presets``),
    all validated before anything runs."""
    unknown = sorted(set(study) - set(STUDY_KEYS))
    if unknown:
        raise ValueError(f"unknown study key(s) {unknown}; allowed: {list(STUDY_KEYS)}")
    if not study.get("algorithms"):
        raise ValueError("a study needs at least one entry under 'algorithms'")
    shared = {k: study[k] for k in ("dataset", "data", "model", "model_args", "rounds", "seed",
                                    "restarts", "rounds_per_chunk") if k in study}
    out = []
    for label, params in study["algorithms"].items():
        params = dict(params or {})
        name = params.pop("algorithm", label)
        restarts = params.pop("restarts", shared.get("restarts", 1))
        cfg = ExperimentConfig(**{**shared, "restarts": restarts}, algorithm=name, params=params)
        out.append((label, cfg))
    return out


def run_study(study: dict, *, progress: bool = True, checkpoint: str | None = None,
              devices: int | None = None) -> list[dict]:
    """Runs every algorithm of a study on the same data (same seed), returns the results.
    checkpoint: a path; algorithm ``label`` checkpoints to ``<path stem>-<label>.npz``."""
    configs = study_configs(study)
    first = configs[0][1]
    data = build_dataset(first.dataset, jax.random.fold_in(jax.random.key(first.seed), 0), **first.data)
    results = []
    for label, cfg in configs:
        path = None if checkpoint is None else f"{os.path.splitext(checkpoint)[0]}-{label}.npz"
        r = run_experiment(cfg, data=data, progress=progress, checkpoint=path, devices=devices)
        r["algorithm"] = label
        results.append(r)
    return results
