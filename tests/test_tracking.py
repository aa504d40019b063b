"""Trackers (``fedclust_jax.tracking``): each sink is read back with its tool's own reader
(TensorBoard's EventAccumulator, MLflow's client on its SQLite store, W&B's record
protocol buffers from the offline run folder): the effective settings as parameters, every
curve point at its round, the summary; a sweep's points grouped with their swept values;
a resumed run continues the same logged run without a step logged twice; a sink that is
not installed is one line before compute; a sink that fails warns once and the run goes on.

A tracker's test is skipped only where its package is not installed; under CI (CI set)
a missing one fails instead, so CI runs them all.
"""

import glob
import importlib
import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import time

import pytest

from fedclust_jax import tracking
from fedclust_jax.experiment import run_study
from fedclust_jax.sweep import run_sweep

TINY = {"num_clients": 8, "samples_per_client": 10, "test_samples_per_client": 5, "dim": 4}
STUDY = {"dataset": "synthetic-regression", "data": dict(TINY), "rounds": 20, "seed": 0,
         "eval_every": 5, "algorithms": {"ifca": {"num_clusters": 2, "option": "gradient",
                                                  "lr": 0.1}}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow SQLite store for the module (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def experiment(request, monkeypatch):
    """This test's own MLflow experiment in the shared store."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", request.node.name)
    return request.node.name


def need(module: str):
    """The tracker's package; a skip where it is not installed (a failure under CI)."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def event_runs(logdir) -> dict:
    """{run folder relative to logdir: EventAccumulator} (TensorBoard's reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = {}
    for events in sorted(glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"),
                                   recursive=True)):
        folder = os.path.dirname(events)
        key = os.path.relpath(folder, logdir)
        if key not in out:
            acc = EventAccumulator(folder)
            acc.Reload()
            out[key] = acc
    return out


def scalars(acc, tag) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def session_hparams(acc) -> dict:
    """The hparams the run's session-start record holds (TensorBoard's HPARAMS plugin)."""
    from tensorboard.plugins.hparams import metadata
    content = acc.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
    info = metadata.parse_session_start_info_plugin_data(content)
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
            for k, v in info.hparams.items()}


def wandb_records(path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``): the leveldb-style log W&B writes
    (a 7-byte header, then 32 KiB blocks of records framed by crc32, length and type),
    each record one of W&B's own ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", path
    block, pos, out, parts = 32768, 7, [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:             # a block's tail too short for a header
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        if length == 0 and kind == 0:
            break
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):                      # FULL or LAST: a record is whole
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            out.append(record)
            parts = []
    return out


def ended_records(path, wait_s: float = 30.0) -> list:
    """The records of a run file once W&B's writer process has written its exit record
    (it writes after ``finish`` returns)."""
    deadline = time.monotonic() + wait_s
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) \
                or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def wandb_run(folder) -> dict:
    """config, history rows {step: {key: value}}, summary of every run file under folder."""
    runs = {}
    found = glob.glob(os.path.join(folder, "wandb", "offline-run-*", "run-*.wandb"))
    for path in sorted(found):      # (wandb/latest-run links to the newest folder)
        for rec in ended_records(path):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                run = runs.setdefault(rec.run.run_id, {"config": {}, "history": {},
                                                       "summary": {}, "files": set()})
                run.update(name=rec.run.display_name, group=rec.run.run_group)
                run["files"].add(path)
                current = run
                for item in rec.run.config.update:
                    run["config"][item.key] = json.loads(item.value_json)
            elif kind == "config":
                for item in rec.config.update:
                    current["config"][item.key] = json.loads(item.value_json)
            elif kind == "history":
                row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                       for i in rec.history.item}
                step = row.pop("_step", rec.history.step.num)
                assert step not in current["history"], f"step {step} logged twice"
                current["history"][step] = row
            elif kind == "summary":
                for item in rec.summary.update:
                    current["summary"][item.key or "/".join(item.nested_key)] = \
                        json.loads(item.value_json)
    return runs


def curve(result, name="test_loss"):
    return list(zip(result["curves"]["round"], result["curves"][name]))


# ---- the sinks, one run each ---------------------------------------------------------------

def test_tensorboard_reads_back_every_curve_point_round_metric_and_the_settings(tmp_path):
    need("tensorboard")
    logdir = str(tmp_path / "tb")
    [r] = run_study(STUDY, progress=False, loggers=[f"tensorboard:{logdir}"])
    [(folder, acc)] = event_runs(logdir).items()
    assert folder.startswith("ifca-")
    got = scalars(acc, "test_loss")
    assert [s for s, _ in got] == [5, 10, 15, 20]
    assert [v for _, v in got] == pytest.approx([v for _, v in curve(r)], rel=1e-5)
    assert [s for s, _ in scalars(acc, "train_loss")] == list(range(1, 21))
    assert scalars(acc, "final/test_loss")[0][1] == pytest.approx(r["metrics"]["test_loss"])
    hp = session_hparams(acc)
    assert hp["params.lr"] == pytest.approx(0.1) and hp["data.num_clients"] == 8
    assert hp["algorithm"] == "ifca" and hp["rounds"] == 20


def test_mlflow_reads_back_from_its_sqlite_store(store, experiment):
    need("mlflow")
    from mlflow.tracking import MlflowClient
    uri = store
    [r] = run_study(STUDY, progress=False, loggers=[f"mlflow:{uri}"])
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.run_name == "ifca" and run.info.status == "FINISHED"
    assert run.data.params["params.lr"] == "0.1" and run.data.params["eval_every"] == "5"
    history = client.get_metric_history(run.info.run_id, "test_loss")
    assert [m.step for m in history] == [5, 10, 15, 20]
    assert [m.value for m in history] == pytest.approx([v for _, v in curve(r)], rel=1e-5)
    assert run.data.metrics["final/test_loss"] == pytest.approx(r["metrics"]["test_loss"])
    assert run.data.metrics["restarts/chosen"] == 0


def test_wandb_offline_run_folder_holds_the_run(tmp_path, monkeypatch, capsys):
    need("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    [r] = run_study(STUDY, progress=False, loggers=["wandb:fedclust-test"])
    assert "W&B logs offline (WANDB_MODE=offline); upload later with `wandb sync" \
        in capsys.readouterr().err
    [run] = wandb_run(tmp_path).values()
    assert run["name"] == "ifca" and run["config"]["params.lr"] == 0.1
    points = [(t, row["test_loss"]) for t, row in sorted(run["history"].items())
              if "test_loss" in row]
    assert [t for t, _ in points] == [5, 10, 15, 20]
    assert [v for _, v in points] == pytest.approx([v for _, v in curve(r)], rel=1e-5)
    assert run["summary"]["final/test_loss"] == pytest.approx(r["metrics"]["test_loss"])


README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def printed_curve(out: str) -> list[tuple[int, float]]:
    """(round, acc) of the curves table the command printed."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["round", "acc"])
    rows = []
    for line in lines[head + 2:]:
        if not line.split() or not line.split()[0].isdigit():
            break
        rows.append((int(line.split()[0]), float(line.split()[1])))
    return rows


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FEDCLUST_SLOW") != "1",
                    reason="slow README example: set FEDCLUST_SLOW=1 to run it")
def test_the_readme_tracker_command_reads_back_from_each_sink(tmp_path):
    """The README's command (a 20-round IFCA run, curves every 5 rounds, all three sinks)
    run as a user runs it: TensorBoard's event files, MLflow's mlflow.db and the offline W&B
    run folder each hold the 4 accuracy points it prints, its settings and its summary.
    About a minute of CPU on 2 cores: marked slow (FEDCLUST_SLOW=1), as the README's
    presets are."""
    need("tensorboard")
    need("mlflow")
    need("wandb")
    from mlflow.tracking import MlflowClient
    [command] = [line for line in README.splitlines()
                 if line.startswith("fedclust-jax run") and "--log" in line]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WANDB_"))}
    env["WANDB_MODE"] = "offline"
    script = pathlib.Path(sys.executable).with_name("fedclust-jax")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "fedclust_jax"]
    proc = subprocess.run(argv + command.split()[1:], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "W&B logs offline (WANDB_MODE=offline)" in proc.stderr
    printed = printed_curve(proc.stdout)
    assert [t for t, _ in printed] == [5, 10, 15, 20]
    acc = [v for _, v in printed]

    chosen = int(re.search(r"curves of ifca, restart (\d+) of 3", proc.stdout)[1])
    tag = f"test_acc/restart_{chosen}"      # each restart a series; the summary says which

    [(folder, tb)] = event_runs(tmp_path / "runs").items()
    assert folder.startswith("ifca-")
    assert scalars(tb, "restarts/chosen")[0][1] == chosen
    assert [s for s, _ in scalars(tb, tag)] == [5, 10, 15, 20]
    assert [v for _, v in scalars(tb, tag)] == pytest.approx(acc, abs=5e-5)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("fedclust_jax").experiment_id])
    assert run.info.run_name == "ifca" and run.info.status == "FINISHED"
    assert run.data.params["dataset"] == "rotated-digits" and run.data.params["rounds"] == "20"
    assert run.data.metrics["restarts/chosen"] == chosen
    history = client.get_metric_history(run.info.run_id, tag)
    assert [m.step for m in history] == [5, 10, 15, 20]
    assert [m.value for m in history] == pytest.approx(acc, abs=5e-5)
    assert run.data.metrics["final/test_acc"] == pytest.approx(acc[-1], abs=5e-5)

    [wb] = wandb_run(tmp_path).values()
    assert wb["name"] == "ifca" and wb["config"]["eval_every"] == 5
    points = [(t, row[tag]) for t, row in sorted(wb["history"].items()) if tag in row]
    assert [t for t, _ in points] == [5, 10, 15, 20]
    assert [v for _, v in points] == pytest.approx(acc, abs=5e-5)
    assert wb["summary"]["final/test_acc"] == pytest.approx(acc[-1], abs=5e-5)


# ---- several runs: a compare, restarts, a sweep, a resume ------------------------------------

def test_a_compare_logs_one_run_per_algorithm_and_restarts_as_series(tmp_path):
    need("tensorboard")
    logdir = str(tmp_path / "tb")
    study = {**STUDY, "rounds": 10, "algorithms": {**STUDY["algorithms"],
                                                   "fedavg": {"lr": 0.05, "restarts": 2}}}
    run_study(study, progress=False, loggers=[f"tensorboard:{logdir}"])
    runs = event_runs(logdir)
    assert sorted(k.split(os.sep)[1].split("-")[0] for k in runs) == ["fedavg", "ifca"]
    assert len({k.split(os.sep)[0] for k in runs}) == 1       # one group: the study
    fedavg = next(acc for k, acc in runs.items() if "fedavg-" in k)
    tags = fedavg.Tags()["scalars"]
    assert {"test_loss/restart_0", "test_loss/restart_1", "restarts/chosen"} <= set(tags)


def test_a_sweep_logs_a_run_per_point_with_its_swept_values_grouped(tmp_path, store,
                                                                     experiment, monkeypatch):
    need("tensorboard")
    need("mlflow")
    need("wandb")
    from mlflow.tracking import MlflowClient
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logdir, uri = str(tmp_path / "tb"), store
    sweep = {**STUDY, "rounds": 10, "sweep": {"ifca.lr": [0.05, 0.1]}}
    rows = run_sweep(sweep, progress=False,
                     loggers=[f"tensorboard:{logdir}", f"mlflow:{uri}", "wandb"])
    runs = event_runs(logdir)
    assert len(runs) == 2 and len({k.split(os.sep)[0] for k in runs}) == 1
    group = next(iter(runs)).split(os.sep)[0]
    assert group.startswith("sweep-")
    by_lr = {session_hparams(acc)["ifca.lr"]: acc for acc in runs.values()}
    assert sorted(by_lr) == pytest.approx([0.05, 0.1])
    for row in rows:
        acc = next(a for lr, a in by_lr.items() if abs(lr - row["ifca.lr"]) < 1e-9)
        got = scalars(acc, "test_loss")
        assert [s for s, _ in got] == [5, 10]
        assert [v for _, v in got] == pytest.approx(row["curves"]["test_loss"], rel=1e-5)
    client = MlflowClient(uri)
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                               filter_string=f"tags.group = '{group}'")
    assert sorted(r.data.params["ifca.lr"] for r in found) == ["0.05", "0.1"]
    assert all(len(client.get_metric_history(r.info.run_id, "test_loss")) == 2 for r in found)
    wb = list(wandb_run(tmp_path).values())        # the points' runs, side by side
    assert sorted(r["config"]["ifca.lr"] for r in wb) == [0.05, 0.1]
    assert {r["group"] for r in wb} == {group}
    assert all(sorted(t for t, row in r["history"].items() if "test_loss" in row) == [5, 10]
               for r in wb)


def test_a_resumed_run_continues_the_same_logged_run_without_a_step_twice(
        tmp_path, monkeypatch, store, experiment):
    need("tensorboard")
    need("mlflow")
    need("wandb")
    from mlflow.tracking import MlflowClient
    from test_resume import interrupt_at
    from fedclust_jax.progress import RunInterrupted
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logdir, uri = str(tmp_path / "tb"), store
    ck = str(tmp_path / "ck.npz")
    sinks = [f"tensorboard:{logdir}", f"mlflow:{uri}", "wandb"]
    study = {**STUDY, "rounds_per_chunk": 5}
    with monkeypatch.context() as m:
        interrupt_at(m, lambda label, done: done >= 10)
        with pytest.raises(RunInterrupted):
            run_study(study, progress=False, checkpoint=ck, checkpoint_every="5r",
                      loggers=sinks)
    assert os.path.exists(tmp_path / "ck.trackers.json")
    [r] = run_study(study, progress=False, checkpoint=ck, checkpoint_every="5r", loggers=sinks)
    [(folder, acc)] = event_runs(logdir).items()          # the same folder, two event files
    assert len(glob.glob(os.path.join(logdir, folder, "events.*"))) == 2
    # TensorBoard reads a folder's event files in name order; two written by one process in
    # the same second order by a counter compared as text ("10" before "9"): compare by step.
    assert sorted(s for s, _ in scalars(acc, "train_loss")) == list(range(1, 21))
    assert [v for _, v in sorted(scalars(acc, "test_loss"))] == pytest.approx(
        [v for _, v in curve(r)], rel=1e-5)
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == \
        list(range(1, 21))
    [wb] = wandb_run(tmp_path).values()           # one run id, a folder per start
    assert len(wb["files"]) == 2 and sorted(wb["history"]) == list(range(1, 21))


def test_a_resumed_sweep_call_continues_its_points_runs(tmp_path, monkeypatch):
    need("tensorboard")
    from test_resume import interrupt_at
    from fedclust_jax.progress import RunInterrupted
    logdir, folder = str(tmp_path / "tb"), str(tmp_path / "ck")
    sweep = {**STUDY, "rounds": 10, "sweep": {"ifca.lr": [0.05, 0.1]}}
    with monkeypatch.context() as m:
        interrupt_at(m, lambda label, done: done >= 6)
        with pytest.raises(RunInterrupted):
            run_sweep(sweep, progress=False, checkpoint=folder, checkpoint_every="1r",
                      loggers=[f"tensorboard:{logdir}"])
    rows = run_sweep(sweep, progress=False, checkpoint=folder, checkpoint_every="1r",
                     loggers=[f"tensorboard:{logdir}"])
    runs = event_runs(logdir)
    assert len(runs) == 2
    for row, acc in zip(rows, (runs[k] for k in sorted(runs))):
        assert sorted(s for s, _ in scalars(acc, "test_loss")) == [5, 10]   # by step: above
    assert not glob.glob(os.path.join(folder, "*.trackers.json"))   # the calls ended


def test_steps_already_logged_before_a_kill_are_not_logged_again(tmp_path):
    """A resume file saying step 15 was logged (a kill after logging, before the save at
    round 10): the resumed run logs from step 16 on."""
    sent = []

    class Memory(tracking.Sink):
        name = extra = module = "json"

        def key(self):
            return "memory"

        def start(self, run):
            sent.append(("start", run.resume))
            return self

        def state(self):
            return {"id": "m1"}

        def log(self, step, values):
            sent.append(step)

        def summary(self, values):
            sent.append("summary")

        def flush(self):
            pass

        def close(self, status):
            sent.append(status)
    path = str(tmp_path / "ck.trackers.json")
    tracking._write_resume(path, {"ifca": {"sinks": {"memory": {"id": "m1"}}, "step": 15}})
    run = tracking.loggers([Memory()]).track("ifca", {}, resume_file=path)
    import numpy as np
    run.chunk(10, 20, {"train_loss": np.zeros((1, 10))}, None)
    run.finish({"metrics": {"test_loss": 1.0}})
    assert sent == [("start", {"id": "m1"}), 16, 17, 18, 19, 20, "summary", "finished"]


# ---- what is refused, what fails, what is imported -------------------------------------------

@pytest.mark.parametrize("text, says", [
    ("tensorboard", "give the folder for the event files, e.g. --log tensorboard:runs"),
    ("neptune", "unknown tracker 'neptune'; use tensorboard:DIR, mlflow"),
])
def test_a_bad_sink_is_one_line(text, says):
    with pytest.raises(ValueError) as e:
        tracking.loggers([text])
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_sink_not_installed_stops_the_command_before_compute(monkeypatch, capsys):
    from fedclust_jax.cli import main
    monkeypatch.setattr(tracking.MLflow, "available", lambda self: False)
    code = main(["run", "--algorithm", "ifca", "--rounds", "2", "--log", "mlflow"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == ("fedclust-jax: error: --log mlflow: the mlflow package is not installed; "
                   "pip install 'fedclust_jax[mlflow]'\n")


def test_a_failing_sink_warns_once_and_the_run_and_other_sinks_go_on(tmp_path, capsys):
    need("tensorboard")

    class Broken(tracking.Sink):
        name = "broken"
        module = "json"

        def key(self):
            return "broken"

        def start(self, run):
            return self

        def state(self):
            return {}

        def log(self, step, values):
            raise OSError("disk full")
    logdir = str(tmp_path / "tb")
    study = {**STUDY, "algorithms": {**STUDY["algorithms"], "fedavg": {"lr": 0.05}}}
    results = run_study(study, progress=False, loggers=[Broken(), f"tensorboard:{logdir}"])
    err = capsys.readouterr().err
    assert err.count("warning: the broken logger (broken) failed (OSError: disk full); "
                     "the run goes on without it") == 1
    assert [r["algorithm"] for r in results] == ["ifca", "fedavg"]
    for acc in event_runs(logdir).values():
        assert [s for s, _ in scalars(acc, "test_loss")] == [5, 10, 15, 20]


def test_no_tracker_is_imported_unless_asked_for():
    code = ("import sys, fedclust_jax.cli, fedclust_jax.experiment, fedclust_jax.sweep, "
            "fedclust_jax.tracking; print(sorted(m for m in ('tensorboard', 'mlflow', 'wandb') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command", [["run", "--algorithm", "ifca"], ["compare"],
                                     ["sweep", "--config", "missing.toml"],
                                     ["reproduce", "ifca-figure3a", "--quick"]])
def test_every_command_takes_log_and_refuses_a_bad_sink_in_one_line(command, capsys):
    from fedclust_jax.cli import main
    code = main(command + ["--log", "neptune"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--log 'neptune': unknown tracker 'neptune'" in err


def test_wandb_goes_offline_without_a_login_or_a_network_and_says_why(tmp_path, monkeypatch):
    """No network is used: the reachability probe is replaced."""
    from fedclust_jax.tracking import wandb_sink
    for k in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))           # no login there
    monkeypatch.setattr(wandb_sink, "_reachable", lambda *a, **k: pytest.fail("probed"))
    assert wandb_sink.mode() == ("offline", "no W&B login: `wandb login` or WANDB_API_KEY")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb_sink, "_reachable", lambda host, port, timeout=3.0: False)
    assert wandb_sink.mode() == ("offline", "api.wandb.ai cannot be reached")
    monkeypatch.setattr(wandb_sink, "_reachable", lambda host, port, timeout=3.0: True)
    assert wandb_sink.mode() == ("online", None)
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_sink.mode() == ("offline", "WANDB_MODE=offline")


def test_a_failure_of_the_logging_itself_warns_once_and_the_run_goes_on(tmp_path, capsys,
                                                                       monkeypatch):
    need("tensorboard")
    from fedclust_jax.tracking import runs

    def broken(*args):
        raise KeyError("eval.table")
    monkeypatch.setattr(runs, "_curve_rounds", broken)           # a sweep call's records
    monkeypatch.setattr(runs.Tracked, "_curves", broken)          # a run's curve points
    study = {**STUDY, "rounds": 10, "algorithms": {**STUDY["algorithms"],
                                                   "fedavg": {"lr": 0.05}}}
    results = run_study(study, progress=False, loggers=[f"tensorboard:{tmp_path / 'tb'}"])
    assert [r["algorithm"] for r in results] == ["ifca", "fedavg"]
    assert results[0]["curves"]["round"] == [5, 10]
    err = capsys.readouterr().err
    assert err.count("fedclust-jax: warning: logging ifca failed (KeyError: 'eval.table'); "
                     "the run goes on without its trackers") == 1
    assert "logging fedavg failed" not in err                    # said once for the command
