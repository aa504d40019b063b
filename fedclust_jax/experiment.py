"""Config -> data, model, algorithm -> the round loop -> results: the host driver.

``fedclust_jax.loop`` holds the loop itself (keys, init, a chunk of rounds in ``lax.scan``,
evaluation records, end of run); this module drives it from the host: builds the data and
the algorithm, picks the client layout and checks memory, cuts the rounds into chunks
(progress between them, a checkpoint after each), places state on a device mesh, and turns
the end of run into metrics. Keys are ``loop``'s (``core.keys``), so results do not depend
on chunk sizes, and a resumed run equals the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import checkpoint as ckpt
from fedclust_jax import config_check, registry_check
from fedclust_jax import loop, metrics, tracking
from fedclust_jax.contract import check_algorithm
from fedclust_jax.core.memory import OutOfMemoryAtStart, out_of_memory_line
from fedclust_jax.core.sharding import active_mesh, place_for_split, replicated
from fedclust_jax.loop import (curve_rounds, curves_from_records, eval_record, eval_spec,  # noqa: F401
                               scan_rounds, split_history)
from fedclust_jax.presets import default_model
from fedclust_jax.progress import (DEFAULT_CADENCE, Cadence, ChunkSchedule, Progress,  # noqa: F401
                                   RunInterrupted, chunk_length, metrics_text)  # (re-exported)
from fedclust_jax.results import format_table, save_results  # noqa: F401 (re-exported)
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm, make_config
from fedclust_jax.data.federated import check_dtype
from fedclust_jax.data.points import true_points
from fedclust_jax.data.registry import DATASETS, build_dataset
from fedclust_jax.models.base import with_dtype
from fedclust_jax.models.registry import MODELS, build_model


def _swept(default):
    """A study-level field a sweep may vary as a path of its own (``sweep.GLOBAL_PATHS``)."""
    return dataclasses.field(default=default, metadata={"swept": True})


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One run: dataset (name and builder parameters), model (None = the model the dataset's
    paper trains, as the dataset declares (``data.defaults``); linear / MLP where it has none), algorithm (name and
    flat parameters), rounds, seed and random restarts.

    rounds_per_chunk: rounds compiled into one ``lax.scan`` (None: chosen from measured
    time so that progress comes at least every 10 s, ``progress.ChunkSchedule``).
    eval_every: E records the evaluation curves every E rounds inside the scan
    (``eval_record``; None: no curves).
    dtype: storage of params and data, "float32" or "bfloat16" (losses, per-cluster sums,
    optimizer state and metrics stay float32; ``models.base.with_dtype``, ``data.astype``).

    Every value is type- and range-checked on construction (``config_check``), before any
    data is built; values typed on the command line (``CliText``) are converted.
    """

    dataset: str = "synthetic-regression"
    data: dict = dataclasses.field(default_factory=dict)
    model: str | None = _swept(None)
    model_args: dict = dataclasses.field(default_factory=dict)
    algorithm: str = "ifca"
    params: dict = dataclasses.field(default_factory=dict)
    rounds: int = _swept(100)
    seed: int = _swept(0)
    restarts: int = _swept(1)
    rounds_per_chunk: int | None = None
    eval_every: int | None = _swept(None)
    dtype: str = _swept("float32")

    def __post_init__(self):
        if not isinstance(self.dataset, str) or self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; available: {', '.join(sorted(DATASETS))}")
        if not isinstance(self.algorithm, str) or self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}; available: {', '.join(sorted(ALGORITHMS))}")
        for key in ("rounds", "seed", "restarts", "rounds_per_chunk", "eval_every"):
            object.__setattr__(self, key, config_check.check_study_value(key, getattr(self, key)))
        if self.rounds < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {self.rounds!r}")
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        model = config_check.check_study_value("model", self.model)
        object.__setattr__(self, "model", model if model is not None else default_model(self.dataset))
        object.__setattr__(self, "data", registry_check.check_data(self.dataset, self.data))
        object.__setattr__(self, "model_args", registry_check.check_model_args(self.model, self.model_args))
        # Validate the algorithm's parameters now, before any data is built.
        params = registry_check.check_algorithm(self.algorithm, self.params)
        object.__setattr__(self, "params", params)
        alg_cfg = make_config(ALGORITHMS[self.algorithm].config_cls, params, self.algorithm)
        config_check.check_model_state(self.algorithm, alg_cfg, self.model,
                                       getattr(MODELS.get(self.model), "stateful", False))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def run_rounds(alg, data, key, *, rounds: int, restarts: int = 1,
               rounds_per_chunk: int | None = None, progress: bool = True,
               checkpoint: str | None = None, config: dict | None = None, mesh=None,
               eval_every: int | None = None, label: str | None = None,
               checkpoint_every=None, tracker=None):
    """Runs ``rounds`` rounds of ``alg`` for ``restarts`` independent initialisations from
    the run key ``key`` (``loop.restart_keys``), in chunks of rounds (``loop.run_chunk``).

    checkpoint: a .npz path (``fedclust_jax.checkpoint``) saved at the cadence
    ``checkpoint_every`` ("60s" or "50r", a ``progress.Cadence``; default
    ``progress.DEFAULT_CADENCE``) and after the last round; if it exists the run resumes
    from it (``config`` must match the one it was written with; "rounds" may grow). The
    chunks are cut to meet the cadence; round t's key depends on t alone, so the results do
    not depend on the cut.
    mesh: a ``clients`` mesh (``core.sharding``): per-client state leaves are split over it
    from init on, and every chunk returns them with the same shardings.
    The round state is donated to each compiled chunk of rounds (its buffers are reused for
    the next state). eval_every: E adds "eval.<name>" entries to the history ([R, rounds,
    ...], recorded after every E-th round; ``loop.split_history`` takes them out).
    label: the name progress lines and an interruption give (default ``alg.name``).
    tracker: a ``tracking.Tracked`` given each chunk's history as it returns.
    An interrupt (Ctrl-C, SIGTERM turned into KeyboardInterrupt) writes the last finished
    chunk's state (kept on the host after every chunk when there is a checkpoint) and raises
    ``progress.RunInterrupted`` with the rounds done and the round the file holds (at most
    the chunk behind; a SIGKILL loses at most the cadence). A save that fails raises
    ``checkpoint.SaveFailed`` (one line; the file keeps its last good round). The device out of memory before the first chunk of rounds
    ended (init included) raises ``core.memory.OutOfMemoryAtStart``.
    Returns (final states with leading axis R, per-round metrics dict of [R, rounds] arrays).
    """
    label = label or alg.name
    cadence = Cadence.parse(checkpoint_every) if checkpoint_every is not None else DEFAULT_CADENCE
    spec = eval_spec(alg, data) if eval_every else None
    init_keys, round_keys = loop.restart_keys(key, restarts)
    placed_init, placed = {}, {}  # jit keyword arguments: out_shardings where there is a mesh
    split = None
    if mesh is not None:
        from fedclust_jax.core.sharding import state_shardings
        shapes = jax.eval_shape(lambda k, d: loop.init_states(alg, k, d), init_keys, data)
        shardings = state_shardings(shapes, mesh, data.num_clients)
        placed_init, placed = dict(out_shardings=shardings), dict(out_shardings=(shardings, replicated(mesh)))
    elif (split := active_mesh()) is not None:
        # client walks split over host devices: the state lives replicated on their mesh
        # from init on, so the chunk's input and output agree and it compiles once; the
        # data and keys are placed there once, not copied at every call
        placed_init = placed = dict(out_shardings=replicated(split))
        data = place_for_split(data, split)
        round_keys = jax.device_put(round_keys, replicated(split))
    done, history, saved_round, ended, last = 0, [], None, False, None
    try:
        states = jax.jit(lambda k, d: loop.init_states(alg, k, d), **placed_init)(init_keys, data)
        found = ckpt.restore(checkpoint, states, config or {}) if checkpoint else None
        if found is not None:
            states, saved, done, _ = found
            if done > rounds:
                raise ValueError(f"checkpoint {checkpoint} is at round {done}, past the {rounds} "
                                 f"asked for; ask for at least {done} rounds or remove it")
            history, saved_round = ([saved] if saved else []), done
            if mesh is not None and jax.process_count() == 1:
                states = jax.device_put(states, shardings)
            elif split is not None:
                states = jax.device_put(states, replicated(split))
        chunk = jax.jit(lambda s, k, d, ts: loop.run_chunk(alg, s, k, d, ts, eval_every=eval_every,
                                                           spec=spec),
                        donate_argnums=(0,), **placed)
        schedule = ChunkSchedule(rounds, rounds_per_chunk,
                                 cadence=cadence if checkpoint else None)
        bar = Progress(label, rounds, progress, start=done)
        start, last = done, None    # last: the host copy of the last finished chunk
        while start < rounds:
            stop = schedule.next_stop(start)
            states, hist = chunk(states, round_keys, data, jnp.arange(start, stop))
            jax.block_until_ready(states)     # the schedule times compute, not dispatch
            ended = True
            done = stop
            history.append(hist)
            if checkpoint:
                last = ckpt.snapshot(checkpoint, states, _merge(history), stop, config or {})
                if schedule.save_due(stop):
                    ckpt.write(last)
                    saved_round = stop
                    schedule.saved()
            if tracker is not None:
                tracker.chunk(start, stop, hist, spec)
            bar.update(stop, metrics_text(hist))
            start = stop
        if checkpoint and saved_round != rounds:     # zero rounds: the file still says so
            ckpt.save(checkpoint, states, _merge(history), rounds, config or {})
            saved_round = rounds
    except KeyboardInterrupt:
        saved_round = ckpt.write_on_interrupt(last, saved_round)
        if tracker is not None:
            tracker.close("interrupted")
        raise RunInterrupted(label, done, rounds, checkpoint, saved_round) from None
    except Exception as e:
        oom = out_of_memory_line(e)
        if oom is None or ended:
            raise
        raise OutOfMemoryAtStart(oom) from None
    return states, _merge(history)


def _merge(histories: list[dict]) -> dict:
    """Per-round histories of successive chunks joined along the round axis (axis 1)."""
    if not histories:
        return {}
    return {k: np.concatenate([np.asarray(h[k]) for h in histories], axis=1) for k in histories[0]}


def summarize(alg, evaluation: dict, data) -> dict:
    """Client-averaged scalar metrics from ``alg.evaluate`` output (numpy, host side)."""
    ev = {k: v if k == "cluster_params" else np.asarray(v) for k, v in evaluation.items()}
    if "point_assign" in ev:    # algorithms that cluster points, not clients (UIFCA, k-FED)
        return point_summary(ev, data)
    mean = lambda k: metrics.client_mean(ev[k], data.count_test) if k in ev else None
    out = {"test_loss": mean("test_loss"), "assigned_test_loss": mean("assigned_test_loss")}
    if data.task == "classification":
        out["test_acc"], out["assigned_test_acc"] = mean("test_acc"), mean("assigned_test_acc")
    clusters = alg.clusters_clients
    assign = ev.get("assign")
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


def point_summary(ev: dict, data) -> dict:
    """Point-level metrics of ev["point_assign"] int[N, n_max] (-1 on padding): clusters
    found, the objective, and where the data carry point_cluster, purity, misclustering
    (Hungarian matching) and ARI over the real points."""
    assign = np.asarray(ev["point_assign"])
    out = {"num_clusters_found": int(len(np.unique(assign[assign >= 0])))}
    if "objective" in ev:
        out["objective"] = float(ev["objective"])
    truth = None if data.point_cluster is None else true_points(data).ravel()
    found = assign.ravel()
    out["purity"] = None if truth is None else metrics.purity(found, truth)
    out["misclustering"] = None if truth is None else metrics.misclustering(found, truth)
    out["ari"] = None if truth is None else metrics.adjusted_rand_index(found, truth)
    return out


def _flat_cluster_params(params):
    leaves = jax.tree.leaves(params)
    if len(leaves) != 1:
        return None
    return np.asarray(leaves[0], np.float32).reshape(leaves[0].shape[0], -1)


def resolve_layout(alg, data, *, restarts: int = 1, devices: int | None = None,
                   memory_limit: int | None = None):
    """(algorithm, layout dict): the client layout ``alg.layout_chunk`` resolved for this
    backend (``core.clients.resolve_chunk``; "auto" on an accelerator is one vmap, cut to
    the largest power-of-two chunk that fits), and the memory pre-check
    (``core.memory``): ValueError with advice when the estimate exceeds ``memory_limit``
    (default: the device's free memory; on a CPU, available RAM). The algorithm is rebuilt
    with the resolved chunk. layout: requested, chunk (None = one vmap), backend, devices,
    estimated_bytes (by part) and available_bytes."""
    from fedclust_jax.core import memory
    from fedclust_jax.core.clients import AUTO, resolve_chunk

    backend, ndev = jax.default_backend(), devices or 1
    requested = alg.layout_chunk
    chunk = resolve_chunk(requested, data.num_clients, backend=backend, devices=ndev)
    available = memory_limit if memory_limit is not None else memory.available_bytes()
    try:
        if requested == AUTO:
            chunk = memory.fit_chunk(alg, data, restarts=restarts, available=available,
                                     chunk=chunk)
        needed = memory.estimate(alg, data, restarts=restarts, chunk=chunk)
    except Exception:   # an algorithm whose shapes cannot be traced abstractly: no estimate
        needed = None
    if needed is not None and available is not None and needed["total"] > available:
        fits = memory.largest_fitting_chunk(alg, data, restarts=restarts, available=available,
                                            below=chunk or data.num_clients + 1)
        memory.check_fits(needed, available, fits)
    if requested == AUTO:
        alg = alg.with_chunk(chunk)
    layout = {"requested": requested, "chunk": chunk, "backend": backend, "devices": ndev,
              "estimated_bytes": needed, "available_bytes": available}
    return alg, layout


def _halved_layout(alg, layout: dict, data, oom: str, label: str, progress: bool):
    """(algorithm, layout) with half the clients per chunk after the device ran out of
    memory at the start of a run whose layout the package chose (``chunk="auto"``); a
    layout the user asked for, or one client per chunk, stops in one line."""
    from fedclust_jax.core import memory
    from fedclust_jax.core.clients import AUTO
    from fedclust_jax.algorithms.base import has_chunk
    chunk = layout["chunk"] or data.num_clients
    if layout["requested"] != AUTO or not has_chunk(alg.cfg) or chunk == 1:
        asked = ("" if layout["requested"] == AUTO or not has_chunk(alg.cfg)
                 else f" with --chunk {layout['requested']}")
        raise ValueError(f"{label}: the run does not fit in the device's memory{asked} ({oom}); "
                         f"{memory.ADVICE}")
    half = max(1, chunk // 2)
    if progress:
        print(f"{label}: out of device memory ({oom}); {half} client(s) per chunk",
              file=sys.stderr, flush=True)
    layout = {**layout, "chunk": half,
              "out_of_memory_at": layout.get("out_of_memory_at", []) + [chunk]}
    return alg.with_chunk(half), layout


def stored_data(cfg: ExperimentConfig, data):
    """``data`` stored in ``cfg.dtype`` (unchanged for float32)."""
    return data if cfg.dtype == "float32" else data.astype(cfg.dtype)


def build_run_algorithm(cfg: ExperimentConfig, data):
    """The algorithm of ``cfg`` on ``data`` (already ``stored_data``): its model with params
    stored in ``cfg.dtype``; with bfloat16, an algorithm whose round promotes its state to
    float32 is refused here with one line (``core.memory.check_state_dtypes``)."""
    model = with_dtype(build_model(cfg.model, data, **cfg.model_args), cfg.dtype)
    alg = build_algorithm(cfg.algorithm, model, cfg.params, data)
    if cfg.dtype != "float32":
        from fedclust_jax.core.memory import check_state_dtypes
        check_state_dtypes(alg, data)
    return alg


def model_builder(cfg: ExperimentConfig):
    """The registered builder of ``cfg``'s model when it names one (None: the default)."""
    return MODELS.get(cfg.model) if cfg.model else None


def check_labelled(label: str, cfg: ExperimentConfig, data) -> None:
    """Builds ``cfg``'s algorithm on ``data`` and traces it abstractly
    (``contract.check_algorithm``); a break is one line naming ``label`` (a user's class
    that inherits a built-in's name is called by the label it runs under)."""
    alg = None
    try:
        alg = build_run_algorithm(cfg, data)
        check_algorithm(alg, data, model_builder(cfg))
    except ValueError as e:
        text = str(e)
        named = f"algorithm {alg.name!r}" if alg is not None else None
        raise type(e)(f"algorithm {label!r}{text[len(named):]}"
                      if named and text.startswith(named) else f"{label}: {text}") from None


def end_of_run(alg, states, data, restarts: int, to_host=lambda tree: tree):
    """(objective float32[R], evaluation) after the last round: the training objective of
    each of the R restarts (states with leading axis R) and ``evaluation(r)``, restart r's
    ``alg.evaluate`` on the host, each computed at most once. An algorithm that declares
    ``fused_end_of_run`` gets one ``objective_and_evaluate`` call per restart, where the
    objective and the evaluation share one pass over the clients; otherwise the objective
    is vmapped over the restarts and ``alg.evaluate`` runs for the restarts asked for
    (``loop.objective_and_evaluate`` is the same end of run, all restarts at once)."""
    pick = lambda r: jax.tree.map(lambda a: a[r], states)
    done: dict[int, dict] = {}
    if alg.fused_end_of_run:
        both = jax.jit(alg.objective_and_evaluate)
        values = []
        for r in range(restarts):
            value, done[r] = to_host(both(pick(r), data))
            values.append(np.asarray(value))
        objective = np.asarray(values, np.float32)
    else:
        objective = np.asarray(to_host(jax.jit(jax.vmap(alg.objective, in_axes=(0, None)))(states, data)))
    evaluate = jax.jit(alg.evaluate)

    def evaluation(r: int) -> dict:
        if r not in done:
            done[r] = to_host(evaluate(pick(r), data))
        return done[r]
    return objective, evaluation


def run_experiment(cfg: ExperimentConfig, *, data=None, progress: bool = True,
                   checkpoint: str | None = None, devices: int | None = None,
                   memory_limit: int | None = None, label: str | None = None,
                   keep_state: bool = False, checkpoint_every=None, loggers=None) -> dict:
    """Builds data (unless given), model and algorithm, runs, evaluates. Returns a JSON-able
    dict: config, metrics (of the restart with the lowest training objective), restart
    diagnostics, per-round history (the algorithm's round metrics), wall time and, with
    ``eval_every``, curves (the evaluation records plus the scalar round metrics).

    checkpoint: .npz path saved at the cadence ``checkpoint_every`` ("60s" or "50r"; see
    ``run_rounds``) and resumed from if present.
    devices: split the clients over this many devices (a ``clients`` mesh; None = one).
    memory_limit: bytes the run may use (default: the device's free memory); the run is
    refused before compiling when the estimate exceeds it (``resolve_layout``). With the
    layout the package chose (``chunk="auto"``), a device out of memory before the first
    chunk of rounds ended runs again with half the clients per chunk (the layout records
    the chunks that did not fit, "out_of_memory_at").
    label: the name progress lines give (a study's label; default the algorithm's name).
    keep_state: also return "trained", the chosen restart's ``trained.Trained`` (cluster
    models, assignment, per-client metrics, ``predict``, ``save``); not JSON, so drop it
    before writing the dict as JSON.
    loggers: trackers (``tracking.loggers``: --log texts or sinks) given the run's
    settings, its metrics as each chunk returns and its summary.
    The result's "layout" records the client layout used and the memory estimate.
    """
    if data is None:
        data = build_dataset(cfg.dataset, loop.data_key(cfg.seed), **cfg.data)
    data = stored_data(cfg, data)
    alg = build_run_algorithm(cfg, data)
    alg, layout = resolve_layout(alg, data, restarts=cfg.restarts, devices=devices,
                                 memory_limit=memory_limit)
    check_algorithm(alg, data, model_builder(cfg))
    mesh, host_data, to_host = None, data, lambda tree: tree
    if devices is not None and devices > 1:  # -- sharding hook (core/sharding.py) --
        from fedclust_jax.core.sharding import client_mesh, shard_clients, to_host
        if devices > jax.device_count():
            raise ValueError(f"asked for {devices} devices, {jax.device_count()} available")
        mesh = client_mesh(jax.devices()[:devices])
        data = shard_clients(data, mesh)
    elif (split := active_mesh()) is not None:   # walks split over host devices
        data = place_for_split(data, split)
    tracker = tracking.track_run(loggers, label or cfg.algorithm, cfg, host_data, checkpoint)
    t0 = time.perf_counter()
    while True:
        try:
            states, history = run_rounds(
                alg, data, loop.run_key(cfg.seed), rounds=cfg.rounds, restarts=cfg.restarts,
                rounds_per_chunk=cfg.rounds_per_chunk, progress=progress, checkpoint=checkpoint,
                config=cfg.to_dict(), mesh=mesh, eval_every=cfg.eval_every, label=label,
                checkpoint_every=checkpoint_every, tracker=tracker)
            break
        except OutOfMemoryAtStart as e:   # the estimate is a model: "auto" halves its chunk
            alg, layout = _halved_layout(alg, layout, data, str(e), label or cfg.algorithm,
                                         progress)
    objective, evaluation = end_of_run(alg, states, data, cfg.restarts, to_host)
    chosen = int(np.nanargmin(objective)) if np.isfinite(objective).any() else 0
    result_metrics = summarize(alg, evaluation(chosen), host_data)
    wall = time.perf_counter() - t0
    restarts_info: dict[str, Any] = {"objective": objective.tolist(), "chosen": chosen}
    if cfg.restarts > 1:
        per = [summarize(alg, evaluation(r), host_data) for r in range(cfg.restarts)]
        for key in ("param_error", "misclustering"):
            vals = [p.get(key) for p in per]
            if all(v is not None for v in vals):
                restarts_info[f"oracle_best_{key}"] = float(min(vals))
                restarts_info[key] = vals
    done = curve_rounds(cfg.rounds, cfg.eval_every)
    history, records = split_history(history, done)
    out = {
        "algorithm": cfg.algorithm, "config": cfg.to_dict(), "data": host_data.summary(),
        "metrics": result_metrics, "restarts": restarts_info,
        "history": {k: v[chosen].tolist() for k, v in history.items()},
        "wall_s": wall, "layout": layout,
    }
    if cfg.eval_every:
        out["curves"] = curves_from_records({k: v[chosen] for k, v in records.items()}, done,
                                            eval_spec(alg, host_data),
                                            {k: v[chosen] for k, v in history.items()})
    if tracker is not None:
        tracker.finish(out)
    if keep_state:
        from fedclust_jax.trained import from_evaluation
        state = jax.device_get(jax.tree.map(lambda a: a[chosen], to_host(states)))
        out["trained"] = from_evaluation(label or cfg.algorithm, cfg.to_dict(), alg.model,
                                         host_data, evaluation(chosen), state)
    return out


STUDY_KEYS = ("dataset", "data", "model", "model_args", "rounds", "seed", "restarts",
              "rounds_per_chunk", "eval_every", "dtype", "algorithms")


def study_configs(study: dict) -> list[tuple[str, ExperimentConfig]]:
    """(label, ExperimentConfig) for every algorithm of a study dict (see ``presets``),
    all type- and range-checked before anything runs. An algorithm's entry may hold its own
    "restarts" and "rounds" (e.g. SR-FCA's REFINE steps) besides its parameters."""
    if not isinstance(study, dict):
        raise ValueError(f"a study must be a table of {list(STUDY_KEYS)}, got {type(study).__name__}")
    if "sweep" in study:
        raise ValueError("this study has a [sweep] table; run it with `fedclust-jax sweep "
                         "--config FILE` (or fedclust_jax.sweep.run_sweep), or remove the table")
    unknown = sorted(set(study) - set(STUDY_KEYS))
    if unknown:
        raise ValueError(f"unknown study key(s) {unknown}; allowed: {list(STUDY_KEYS)}")
    algorithms = study.get("algorithms")
    if not algorithms:
        raise ValueError("a study needs at least one entry under 'algorithms'")
    if not isinstance(algorithms, dict):
        raise ValueError(f"'algorithms' must be a table {{label: {{parameter: value}}}}, got {algorithms!r}")
    for key in ("data", "model_args"):
        if key in study and not isinstance(study[key], dict):
            raise ValueError(f"'{key}' must be a table {{parameter: value}}, got {study[key]!r}")
    shared = {k: study[k] for k in ("dataset", "data", "model", "model_args", "rounds", "seed",
                                    "restarts", "rounds_per_chunk", "eval_every", "dtype")
              if k in study}
    out = []
    for label, params in algorithms.items():
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"algorithms.{label} must be a table {{parameter: value}}, got {params!r}")
        params = dict(params or {})
        name = params.pop("algorithm", label)
        own = {k: params.pop(k) for k in ("restarts", "rounds") if k in params}
        try:
            cfg = ExperimentConfig(**{**shared, **own}, algorithm=name, params=params)
        except ValueError as e:
            raise type(e)(f"{e} (algorithm {label!r})" if label != name else str(e)) from None
        out.append((label, cfg))
    return out


def checkpoint_paths(checkpoint: str | None, labels: list[str]) -> dict[str, str | None]:
    """The checkpoint file of each algorithm: ``checkpoint`` itself when one algorithm runs,
    ``<stem>-<label><ext>`` for each when several do."""
    if checkpoint is None:
        return {label: None for label in labels}
    if len(labels) == 1:
        return {labels[0]: checkpoint}
    stem, ext = os.path.splitext(checkpoint)
    return {label: f"{stem}-{label}{ext or '.npz'}" for label in labels}


def load_study_data(cfg: ExperimentConfig):
    """The study's data (built once from the first config's dataset and seed); unreadable
    files become a ValueError that names the dataset."""
    import json
    import zipfile
    try:
        return build_dataset(cfg.dataset, loop.data_key(cfg.seed), **cfg.data)
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"dataset {cfg.dataset!r}: its files could not be read ({type(e).__name__}: "
                         f"{e}); check or re-download them") from None


def effective_data(cfg: ExperimentConfig) -> dict:
    """Every parameter of the dataset builder as used: ``cfg.data`` over its defaults."""
    fields, _ = config_check.signature_fields(DATASETS[cfg.dataset])
    out = {k: d for k, (_, d) in fields.items() if d is not dataclasses.MISSING}
    out.update(cfg.data)
    return out


def check_fits_data(label: str, cfg: ExperimentConfig, data):
    """Stops before compute when a setting cannot work on the built data: a minibatch larger
    than every client's training set."""
    from fedclust_jax.algorithms.registry import effective_params
    batch = effective_params(cfg.algorithm, cfg.params, data).get("batch_size")
    largest = int(np.max(np.asarray(data.count))) if data.num_clients else 0
    if batch is not None and batch > largest:
        raise ValueError(f"{label}: batch_size {batch} is larger than every client's training "
                         f"data (the largest client has {largest} examples); use a batch size of "
                         f"at most {largest}, or none for full-batch steps")


def run_study(study: dict, *, progress: bool = True, checkpoint: str | None = None,
              devices: int | None = None, on_start=None, checkpoint_every=None,
              on_result=None, keep_state: bool = False, loggers=None) -> list[dict]:
    """Runs every algorithm of a study on the same data (same seed), returns the results,
    each with "effective" (every parameter as run, the model) and "environment" (versions,
    backend, device) added.

    checkpoint: a path; with one algorithm exactly that file, with several
    ``<stem>-<label>.npz`` each (``checkpoint_paths``), saved at the cadence
    ``checkpoint_every`` (``run_rounds``). An algorithm's result is added to its file when it
    ends, so a rerun takes it from there without running (nor building the data when every
    algorithm has ended) and resumes the others; a file of another configuration is refused
    in one line before anything runs.
    on_start: called with (label, config, data) before each algorithm runs.
    on_result: called with the results so far after each algorithm ends (or is taken from
    its checkpoint), e.g. to write them as they come.
    keep_state: each result also holds "trained" (``run_experiment``'s); an algorithm ended
    in its checkpoint is then evaluated again from it (no rounds run).
    loggers: trackers (``tracking.loggers``), checked before anything runs; one logged run
    per algorithm, several grouped as one study.
    """
    from fedclust_jax.algorithms.registry import effective_params
    from fedclust_jax.models.registry import DEFAULT_MODEL
    from fedclust_jax.results import environment
    configs = study_configs(study)
    loggers = tracking.loggers(loggers, group=tracking.study_group(configs))
    paths = checkpoint_paths(checkpoint, [label for label, _ in configs])
    ended = {label: finished_result(paths[label], cfg) for label, cfg in configs}
    data = None
    if keep_state or any(r is None for r in ended.values()):
        data = load_study_data(configs[0][1])
        for label, cfg in configs:
            check_fits_data(label, cfg, data)
        for label, cfg in configs:           # every contract before the first one trains
            if keep_state or ended[label] is None:
                check_labelled(label, cfg, data)
    env = environment()
    results = []
    for label, cfg in configs:
        r = None if keep_state else ended[label]
        if r is not None:
            if progress:
                print(f"{label}: ended in {paths[label]} (round {cfg.rounds} of {cfg.rounds}); "
                      f"its result is kept", file=sys.stderr, flush=True)
        else:
            if on_start is not None:
                on_start(label, cfg, data)
            r = run_experiment(cfg, data=data, progress=progress, checkpoint=paths[label],
                               devices=devices, label=label, checkpoint_every=checkpoint_every,
                               keep_state=keep_state, loggers=loggers)
            r["algorithm"] = label
            r["effective"] = {"dataset": cfg.dataset, "data": effective_data(cfg),
                              "model": cfg.model or DEFAULT_MODEL[data.task],
                              "model_args": cfg.model_args,
                              "params": effective_params(cfg.algorithm, cfg.params, data),
                              "rounds": cfg.rounds, "seed": cfg.seed, "restarts": cfg.restarts,
                              "eval_every": cfg.eval_every, "checkpoint": paths[label]}
            r["environment"] = env
            if paths[label] is not None and jax.process_count() == 1:
                ckpt.attach(paths[label], result={k: v for k, v in r.items() if k != "trained"})
        results.append(r)
        if on_result is not None:
            on_result(list(results))
    return results


def finished_result(path: str | None, cfg: ExperimentConfig) -> dict | None:
    """The result kept in the checkpoint ``path`` of a run of ``cfg`` that has ended (its
    rounds done and its result attached), else None. A file of another configuration is
    refused (ValueError, one line). Several processes: None (each resumes from its files)."""
    if path is None or jax.process_count() > 1 or not os.path.exists(path):
        return None
    meta = ckpt.read_meta(path)
    ckpt.check_config(path, meta, cfg.to_dict())
    if meta["rounds_done"] != cfg.rounds or not isinstance(meta.get("result"), dict):
        return None
    return meta["result"]
