"""Trackers: TensorBoard, MLflow and Weights & Biases receive what the progress path has.

``--log SINK`` (repeatable; ``loggers=[...]`` from Python, the same strings or sink objects):

    tensorboard:DIR        event files under DIR (``tensorboard --logdir DIR``), extra [tensorboard]
    mlflow[:TRACKING_URI]  an MLflow store; default $MLFLOW_TRACKING_URI, else the SQLite file
                           mlflow.db in the working folder (shown by ``mlflow ui
                           --backend-store-uri sqlite:///mlflow.db`` run there), extra [mlflow]
    wandb[:PROJECT]        a W&B run in PROJECT (default $WANDB_PROJECT, else fedclust_jax); offline
                           when WANDB_MODE=offline, without a W&B login or without network (said
                           on stderr with the folder ``wandb sync`` uploads), extra [wandb]

What each receives, per run (``run``: one; ``compare``: one per algorithm; ``sweep``: one per
point and algorithm, grouped by sweep; ``reproduce``: those of its runner, grouped by table):
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
import sys
import uuid

from fedclust_jax.tracking.params import run_params, sweep_params, summary_values  # noqa: F401
from fedclust_jax.tracking.runs import (CallTracker, RunInfo, Tracked, _write_resume,  # noqa: F401
                                        resume_path)

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


def track_run(specs, name: str, cfg, data, checkpoint: str | None = None):
    """The ``Tracked`` run of ``run_experiment`` (None without loggers): its parameters
    (``run_params``), its resume file beside ``checkpoint``, its curve rounds."""
    found = loggers(specs)
    if found is None:
        return None
    return found.track(name, run_params(name, cfg, data), eval_every=cfg.eval_every,
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


def new_id() -> str:
    """A short random id for a new logged run."""
    return uuid.uuid4().hex[:8]
