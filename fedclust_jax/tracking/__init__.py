"""Trackers: TensorBoard, MLflow and Weights & Biases receive what the progress path has.

``--log SINK`` (repeatable; ``loggers=[...]`` from Python, the same strings or sink objects):

    tensorboard:DIR        event files under DIR (``tensorboard --logdir DIR``), extra [tensorboard]
    mlflow[:TRACKING_URI]  an MLflow store; default $MLFLOW_TRACKING_URI, else the SQLite file
                           mlflow.db in the working folder (``mlflow ui`` there shows it), extra [mlflow]
    wandb[:PROJECT]        a W&B run in PROJECT (default $WANDB_PROJECT, else fedclust_jax); offline
                           when WANDB_MODE=offline, without a W&B login or without network (said
                           on stderr with the folder ``wandb sync`` uploads), extra [wandb]

What each receives, per run (``run``: one; ``compare``: one per algorithm; ``sweep``: one per
point and algorithm, grouped by sweep; ``reproduce``: those of its runner):
  parameters   the effective settings (dataset, model, rounds, seed, restarts, eval_every,
               dtype, ``data.<k>``, ``model_args.<k>``, ``params.<k>``; a sweep point's
               swept paths too), at the start of the run;
  metrics      as each chunk of rounds returns (not after the run), at step = rounds done:
               the algorithm's scalar round metrics (every round; a sweep: at the curve
               rounds) and, with ``eval_every``, every curve point (``loop.curves_from_records``:
               test_loss, test_acc, misclustering, ari, num_clusters_found, ...). With R > 1
               restarts each restart is its own series, ``<metric>/restart_<r>`` (which restart
               the run reports is known only at its end: the summary's ``restarts/chosen``);
  summary      at the end: the final metrics as ``final/<metric>``, the restart diagnostics
               as ``restarts/<key>`` and the wall time.
TensorBoard writes each run to ``DIR/[<group>/]<name>-<id>`` with its parameters as hparams
(the HPARAMS tab compares a sweep's points); MLflow puts runs in the experiment
$MLFLOW_EXPERIMENT_NAME (default fedclust_jax), tagged ``group``; W&B groups them by ``group``.

Resume: a run with a checkpoint keeps, beside it, ``<stem>.trackers.json`` (a sweep call:
beside its state file) holding each sink's run identity and the last step logged; the
resumed run continues the same logged runs and logs only later steps, so no step is logged
twice (rounds redone after a kill give the same values and are skipped).

Failures: a sink that is asked for but not installed is refused before any compute, one line
naming the extra (``loggers`` raises ValueError; the command line exits 2). A sink that
fails during a run (a full disk, a lost server) is said once on stderr and dropped; the
run and every other sink go on.

Only this package speaks to the trackers, and it imports a tracker's package only when a
run asks for that sink.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid

__all__ = ["Loggers", "TensorBoard", "MLflow", "WandB", "loggers", "sink", "run_params",
           "add_log_argument"]

LOG_HELP = ("log the run to a tracker (repeatable): tensorboard:DIR, mlflow[:TRACKING_URI] "
            "(default: mlflow.db here) or wandb[:PROJECT] (offline with WANDB_MODE=offline or "
            "no network); needs the extra of that name, e.g. pip install 'fedclust_jax[mlflow]'")


def add_log_argument(parser):
    """``--log SINK`` (repeatable) on an argparse parser or group."""
    parser.add_argument("--log", action="append", metavar="SINK", help=LOG_HELP)


class Sink:
    """A tracker asked for: ``start(run)`` opens one logged run (``RunInfo``) and returns
    its handle, with ``log(step, values)``, ``summary(values)``, ``state()`` (what a resume
    needs to reopen it, JSON-able) and ``close(status)`` ("finished", "interrupted",
    "failed"). ``module``: the package it needs; ``extra``: the pip extra that brings it."""

    name = extra = module = ""

    def key(self) -> str:
        """The sink as written after --log (it names the sink in a resume file)."""
        raise NotImplementedError

    def start(self, run: "RunInfo"):
        raise NotImplementedError

    def available(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key()!r})"


class TensorBoard(Sink):
    """Event files under ``logdir`` (written with the ``tensorboard`` package alone)."""

    name = extra = module = "tensorboard"

    def __init__(self, logdir: str):
        self.logdir = logdir

    def key(self) -> str:
        return f"tensorboard:{self.logdir}"

    def start(self, run):
        from fedclust_jax.tracking.tensorboard_sink import TensorBoardRun
        return TensorBoardRun(self.logdir, run)


class MLflow(Sink):
    """An MLflow tracking store: ``uri`` (default $MLFLOW_TRACKING_URI, else
    ``sqlite:///mlflow.db`` in the working folder)."""

    name = extra = module = "mlflow"

    def __init__(self, uri: str | None = None):
        self.uri = uri

    def key(self) -> str:
        return "mlflow" + (f":{self.uri}" if self.uri else "")

    def start(self, run):
        from fedclust_jax.tracking.mlflow_sink import MLflowRun
        return MLflowRun(self.uri, run)


class WandB(Sink):
    """A Weights & Biases run in ``project`` (default $WANDB_PROJECT, else fedclust_jax)."""

    name = extra = module = "wandb"

    def __init__(self, project: str | None = None):
        self.project = project

    def key(self) -> str:
        return "wandb" + (f":{self.project}" if self.project else "")

    def start(self, run):
        from fedclust_jax.tracking.wandb_sink import WandBRun
        return WandBRun(self.project, run)


USAGE = "use tensorboard:DIR, mlflow, mlflow:TRACKING_URI, wandb or wandb:PROJECT"


def sink(text) -> Sink:
    """A ``Sink`` from its --log text (a Sink is returned as is); ValueError (one line)."""
    if isinstance(text, Sink):
        return text
    if not isinstance(text, str):
        raise ValueError(f"--log {text!r}: {USAGE}")
    name, sep, arg = text.strip().partition(":")
    name = name.lower()
    if name == "tensorboard":
        if not arg:
            raise ValueError(f"--log {text}: give the folder for the event files, e.g. "
                             f"--log tensorboard:runs")
        return TensorBoard(arg)
    if name == "mlflow":
        return MLflow(arg or None)
    if name in ("wandb", "w&b"):
        return WandB(arg or None)
    raise ValueError(f"--log {text!r}: unknown tracker {name!r}; {USAGE}")


class Loggers:
    """The sinks of a command (``loggers``), the group its runs belong to and the sinks
    that failed (dropped for the rest of the process, said once)."""

    def __init__(self, sinks: list[Sink], group: str | None = None, failed: set | None = None):
        self.sinks, self.group = sinks, group
        self.failed = set() if failed is None else failed

    def grouped(self, group: str | None) -> "Loggers":
        """These loggers with ``group`` (kept when one is set already)."""
        return self if self.group or not group else Loggers(self.sinks, group, self.failed)

    def track(self, name: str, params: dict, *, resume_file: str | None = None,
              eval_every: int | None = None, key: str | None = None) -> "Tracked":
        """One logged run on every sink (opened at its first chunk)."""
        return Tracked(self, RunInfo(name, self.group, params), resume_file, eval_every,
                       key or name)

    def call(self, points: list[tuple[str, dict]], *, state_path: str | None,
             eval_every: int | None) -> "CallTracker":
        """The logged runs of a sweep call's points: (name, parameters) each, in call order."""
        resume = None if state_path is None else resume_path(state_path)
        return CallTracker([self.track(name, params, resume_file=resume, eval_every=eval_every)
                            for name, params in points], resume)

    def warn(self, s: Sink, e: BaseException):
        if s.key() in self.failed:
            return
        self.failed.add(s.key())
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"fedclust-jax: warning: the {s.name} logger ({s.key()}) failed "
              f"({type(e).__name__}: {first}); the run goes on without it",
              file=sys.stderr, flush=True)


def loggers(specs, group: str | None = None) -> Loggers | None:
    """``Loggers`` from --log texts or ``Sink`` objects (a ``Loggers`` is returned as is;
    None or [] gives None). Refuses, in one line (ValueError), a malformed one or one whose
    package is not installed, before anything runs."""
    if specs is None or isinstance(specs, Loggers):
        return specs.grouped(group) if isinstance(specs, Loggers) else None
    if isinstance(specs, (str, Sink)):
        specs = [specs]
    sinks = [sink(s) for s in specs]
    if not sinks:
        return None
    for s in sinks:
        if not s.available():
            raise ValueError(f"--log {s.key()}: the {s.name} package is not installed; "
                             f"pip install 'fedclust_jax[{s.extra}]'")
    keys = [s.key() for s in sinks]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"--log {twice} is given twice; give each sink once")
    return Loggers(sinks, group)


class RunInfo:
    """What a sink opens a run with: its name, group (None: none), parameters (flat
    {key: number, string or bool}) and, on resume, the state the sink returned before."""

    def __init__(self, name: str, group: str | None, params: dict, resume: dict | None = None):
        self.name, self.group, self.params, self.resume = name, group, params, resume


def resume_path(checkpoint: str) -> str:
    """The file beside a checkpoint that holds its logged runs: ``<stem>.trackers.json``."""
    stem, _ = os.path.splitext(checkpoint)
    return stem + ".trackers.json"


RESUME_KIND = "fedclust_jax tracked runs"


def _read_resume(path: str | None) -> dict:
    if path is None or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return saved.get("runs", {}) if saved.get("format") == RESUME_KIND else {}


def _write_resume(path: str, runs: dict):
    from fedclust_jax.checkpoint import write_json
    write_json(path, {"format": RESUME_KIND, "runs": runs}, what="trackers file")


class Tracked:
    """One logged run on every sink of ``loggers``: ``chunk`` after each chunk of rounds,
    ``records`` for a sweep call's curve points, ``finish`` with the result, ``close`` on
    an interrupt. Opened at the first chunk: a first chunk that starts past round 0 is a
    resume and reopens the runs ``resume_file`` names; steps up to the last one logged are
    skipped. Every call to a sink is guarded (``Loggers.warn``)."""

    def __init__(self, loggers: Loggers, run: RunInfo, resume_file: str | None,
                 eval_every: int | None, key: str):
        self.loggers, self.run, self.resume_file = loggers, run, resume_file
        self.eval_every, self.key = eval_every, key
        self.handles: dict[str, object] = {}
        self.opened, self.closed, self.last = False, False, 0

    # ---- opening, guarding
    def _open(self, resuming: bool):
        if self.opened:
            return
        self.opened = True
        if not _is_first_process():
            return
        saved = _read_resume(self.resume_file).get(self.key, {}) if resuming else {}
        self.last = int(saved.get("step", 0)) if saved else 0
        for s in self.loggers.sinks:
            if s.key() in self.loggers.failed:
                continue
            info = RunInfo(self.run.name, self.run.group, self.run.params,
                           saved.get("sinks", {}).get(s.key()))
            try:
                self.handles[s.key()] = s.start(info)
            except Exception as e:
                self.loggers.warn(s, e)

    def _each(self, method: str, *args):
        for s in self.loggers.sinks:
            h = self.handles.get(s.key())
            if h is None or s.key() in self.loggers.failed:
                continue
            try:
                getattr(h, method)(*args)
            except Exception as e:
                self.loggers.warn(s, e)
                self.handles.pop(s.key(), None)

    def _save(self):
        if self.resume_file is None or not self.handles:
            return
        runs = _read_resume(self.resume_file)
        states = {}
        for k, h in self.handles.items():
            try:
                states[k] = h.state()
            except Exception:
                continue
        runs[self.key] = {"sinks": states, "step": self.last}
        try:
            _write_resume(self.resume_file, runs)
        except Exception as e:      # without it a resume starts new logged runs; said once
            if self.resume_file not in self.loggers.failed:
                self.loggers.failed.add(self.resume_file)
                print(f"fedclust-jax: warning: {self.resume_file} could not be written "
                      f"({type(e).__name__}: {str(e).strip()[:200]}); a resumed run will "
                      f"start new logged runs", file=sys.stderr, flush=True)

    def _steps(self, steps: dict):
        """Logs {step: {name: value}} in step order, those after the last step logged."""
        new = sorted(t for t in steps if t > self.last and steps[t])
        for t in new:
            self._each("log", t, steps[t])
        if new:
            self.last = new[-1]
        self._each("flush")
        self._save()

    # ---- what the runner calls
    def chunk(self, start: int, stop: int, history: dict, spec: dict | None):
        """After the chunk of rounds start..stop-1 (``experiment.run_rounds``): history
        {name: [R, stop - start, ...]} as it came back, "eval.<name>" records included."""
        self._open(resuming=start > 0)
        if not self.handles:
            return
        from fedclust_jax import loop
        import numpy as np
        steps: dict[int, dict] = {}
        scalars = {k: np.asarray(v) for k, v in history.items() if not k.startswith("eval.")}
        for name, v in scalars.items():
            if v.ndim != 2 or not np.issubdtype(v.dtype, np.number):
                continue
            for i in range(v.shape[1]):
                _put(steps.setdefault(start + 1 + i, {}), name, v[:, i])
        rounds = loop.curve_rounds(stop, self.eval_every, start)
        if rounds:
            _, records = loop.split_history(history, rounds, start)
            self._curves(steps, rounds, records, spec)
        self._steps(steps)

    def records(self, start: int, stop: int, records: dict, spec: dict | None):
        """A sweep call's chunk: this point's records {name: [R, T, ...]} at the curve
        rounds of start..stop-1, "round.<name>" for the algorithm's round metrics."""
        self._open(resuming=start > 0)
        if not self.handles:
            return
        import numpy as np
        rounds = _curve_rounds(start, stop, self.eval_every)
        steps: dict[int, dict] = {}
        own = {k: np.asarray(v) for k, v in records.items() if k.startswith("round.")}
        evals = {k: v for k, v in records.items() if not k.startswith("round.")}
        if rounds and evals:
            self._curves(steps, rounds, evals, spec)
        for key, v in own.items():
            for i, t in enumerate(rounds):
                _put(steps.setdefault(t, {}), key[len("round."):], v[:, i])
        self._steps(steps)

    def _curves(self, steps: dict, rounds: list[int], records: dict, spec):
        from fedclust_jax import loop
        import numpy as np
        restarts = int(np.asarray(next(iter(records.values()))).shape[0])
        for r in range(restarts):
            curves = loop.curves_from_records({k: np.asarray(v)[r] for k, v in records.items()},
                                              rounds, spec or {"kind": "clients"})
            for name, values in curves.items():
                if name == "round" or not values or isinstance(values[0], list):
                    continue
                for t, x in zip(rounds, values):
                    steps.setdefault(t, {})[_series(name, r, restarts)] = float(x)

    def finish(self, result: dict):
        """The summary (``summary_values``) and the end of the logged run."""
        self._open(resuming=True)
        self._each("summary", summary_values(result))
        self._save()
        self.close("finished")

    def close(self, status: str = "finished"):
        if self.closed:
            return
        self.closed = True
        self._each("close", status)
        self.handles.clear()


class CallTracker:
    """The logged runs of a sweep call's points (``Loggers.call``); ``records`` takes the
    call's records {name: [c, R, T, ...]} and gives each point its own."""

    def __init__(self, runs: list[Tracked], resume_file: str | None):
        self.runs, self.resume_file = runs, resume_file

    def records(self, start: int, stop: int, records: dict, spec: dict | None):
        import numpy as np
        for j, run in enumerate(self.runs):
            run.records(start, stop, {k: np.asarray(v)[j] for k, v in records.items()}, spec)

    def finish(self, results: list[dict]):
        """Each point's summary: {"metrics": ..., "wall_s": ...} in call order."""
        for run, result in zip(self.runs, results):
            run.finish(result)
        if self.resume_file is not None and os.path.exists(self.resume_file):
            os.remove(self.resume_file)     # the call's rows are kept: nothing to resume

    def close(self, status: str):
        for run in self.runs:
            run.close(status)


def _is_first_process() -> bool:
    """Only process 0 of a multi-host run logs."""
    if "jax" not in sys.modules:
        return True
    import jax
    return jax.process_index() == 0


def _curve_rounds(start: int, stop: int, every: int | None) -> list[int]:
    from fedclust_jax import loop
    return loop.curve_rounds(stop, every, start)


def _series(name: str, r: int, restarts: int) -> str:
    return name if restarts == 1 else f"{name}/restart_{r}"


def _put(step: dict, name: str, per_restart):
    """Each restart's value of a round metric at one step."""
    values = list(per_restart)
    for r, x in enumerate(values):
        step[_series(name, r, len(values))] = float(x)


def _scalar(v):
    """A parameter value a tracker shows: numbers, strings and bools as they are, None as
    "none", anything else as its JSON."""
    if v is None:
        return "none"
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return json.dumps(v, default=str)


def run_params(label: str, cfg, data) -> dict:
    """The effective settings of one run as flat parameters (``run``, ``compare``):
    algorithm (the label) and algorithm_name, dataset, model, rounds, seed, restarts,
    eval_every, dtype, ``data.<k>`` (every builder parameter as used), ``model_args.<k>``
    and ``params.<k>`` (every algorithm parameter as it runs on ``data``)."""
    from fedclust_jax.algorithms.registry import effective_params
    from fedclust_jax.experiment import effective_data
    out = {"algorithm": label, "algorithm_name": cfg.algorithm, "dataset": cfg.dataset,
           "model": cfg.model, "rounds": cfg.rounds, "seed": cfg.seed,
           "restarts": cfg.restarts, "eval_every": cfg.eval_every, "dtype": cfg.dtype}
    out.update({f"data.{k}": v for k, v in effective_data(cfg).items()})
    out.update({f"model_args.{k}": v for k, v in cfg.model_args.items()})
    out.update({f"params.{k}": v for k, v in effective_params(cfg.algorithm, cfg.params,
                                                              data).items()})
    return flat_params(out)


def track_run(loggers, name: str, cfg, data, checkpoint: str | None = None):
    """The ``Tracked`` run of ``run_experiment`` (None without loggers): its parameters
    (``run_params``), its resume file beside ``checkpoint``, its curve rounds."""
    loggers = globals()["loggers"](loggers)
    if loggers is None:
        return None
    return loggers.track(name, run_params(name, cfg, data), eval_every=cfg.eval_every,
                         resume_file=None if checkpoint is None else resume_path(checkpoint))


def study_group(configs: list) -> str | None:
    """The group of a study's runs: ``study-<hash of their configurations>`` when it has
    several algorithms (the same study, rerun, joins the same group), else None."""
    if len(configs) < 2:
        return None
    from fedclust_jax.sweep_store import fingerprint
    return "study-" + fingerprint([[label, cfg.to_dict()] for label, cfg in configs])[:8]


def sweep_loggers(specs, study: dict) -> Loggers | None:
    """``loggers`` grouped as the sweep ``study``: ``sweep-<its fingerprint>``
    (``sweep.grid_key``; a rerun of the same sweep joins the same group)."""
    found = loggers(specs)
    if found is None:
        return None
    from fedclust_jax.sweep import grid_key
    return found.grouped("sweep-" + grid_key(study)[0][:8])


def flat_params(params: dict) -> dict:
    """{key: number, string or bool} (``_scalar``)."""
    return {str(k): _scalar(v) for k, v in params.items()}


def sweep_params(row: dict) -> dict:
    """A sweep point's parameters from its row before metrics (``sweep._row``): the swept
    paths and the effective settings; "swept" names the swept paths."""
    skip = ("curves", "program_wall_s", "program")
    out = {k: v for k, v in row.items() if k not in skip}
    out["swept"] = ",".join(row.get("swept") or [])
    return flat_params(out)


def summary_values(result: dict) -> dict:
    """What a run's summary holds, flat: ``final/<metric>`` for every final metric (the
    result's "metrics"), ``restarts/<key>`` for the restart diagnostics (lists as
    ``restarts/<key>/<r>``) and ``wall_s``."""
    out: dict = {}
    for k, v in (result.get("metrics") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"final/{k}"] = float(v)
    for k, v in (result.get("restarts") or {}).items():
        if isinstance(v, list):
            for r, x in enumerate(v):
                if isinstance(x, (int, float)):
                    out[f"restarts/{k}/{r}"] = float(x)
        elif isinstance(v, (int, float)):
            out[f"restarts/{k}"] = float(v)
    if isinstance(result.get("wall_s"), (int, float)):
        out["wall_s"] = float(result["wall_s"])
    return out


def new_id() -> str:
    """A short random id for a new logged run."""
    return uuid.uuid4().hex[:8]
