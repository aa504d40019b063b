"""A command killed with SIGKILL at random moments resumes to the result of the
uninterrupted command, bit for bit: a sweep of two programs, a comparison of three
algorithms and a paper table (``reproduce --quick``), each killed three times (seeded
random delays after its progress lines start) with a checkpoint saved every one or two
rounds, then run to the end. The uninterrupted reference runs first, as a process like the
killed ones (it also fills the compilation cache they read)."""

import csv
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
       "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
TINY = {"num_clients": 8, "samples_per_client": 10, "test_samples_per_client": 5, "dim": 4}


def uninterrupted(cmd: list[str], cwd):
    """The reference: ``cmd`` run to the end in a process like the killed ones (the command
    line's host devices included: results depend on them at float rounding)."""
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def killed_three_times_then_run(cmd: list[str], cwd, seed: int, delay_s: float = 0.6) -> str:
    """Runs ``cmd`` three times, each killed (SIGKILL) a seeded random moment after its
    first progress line, then once to the end; returns the last run's stderr."""
    rng = random.Random(seed)
    for _ in range(3):
        proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        guard = threading.Timer(120, proc.kill)   # a hung run fails the test, not the suite
        guard.start()
        try:
            for line in proc.stderr:
                if " rounds " in line:           # a progress line: rounds are running
                    break
            time.sleep(rng.uniform(0.0, delay_s))
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        finally:
            guard.cancel()
            if proc.poll() is None:
                proc.kill()
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_a_killed_sweep_resumes_to_the_uninterrupted_rows(tmp_path):
    study = {"dataset": "synthetic-regression", "data": TINY, "rounds": 200, "restarts": 2,
             "eval_every": 50,
             "algorithms": {"ifca": {"num_clusters": 2, "option": "gradient"},
                            "fedavg": {"lr": 0.05}},
             "sweep": {"seed": [0, 1], "ifca.lr": [0.02, 0.1]}}
    (tmp_path / "s.json").write_text(json.dumps(study))
    uninterrupted([sys.executable, "-m", "fedclust_jax", "sweep", "--config", "s.json",
                   "--output", "whole.csv", "--no-progress"], tmp_path)
    err = killed_three_times_then_run(
        [sys.executable, "-m", "fedclust_jax", "sweep", "--config", "s.json", "--output", "r.csv",
         "--checkpoint", "ck", "--checkpoint-every", "2r"], tmp_path, seed=1)
    assert "resuming from round" in err or "ended in ck" in err, err[-2000:]
    read = lambda name: [{k: v for k, v in r.items() if k != "program_wall_s"}
                         for r in csv.DictReader(io.StringIO((tmp_path / name).read_text()))]
    rows = read("r.csv")
    assert len(rows) == 6 and rows == read("whole.csv")
    assert all(json.loads(r["curves"])["round"] == [50, 100, 150, 200] for r in rows)


def test_a_killed_compare_of_three_algorithms_resumes_to_the_uninterrupted_results(tmp_path):
    args = ["compare", "--algorithms", "fedavg,ifca,local", "--data", "num_clients=8", "--data",
            "dim=4", "--rounds", "200", "--eval-every", "50"]
    uninterrupted([sys.executable, "-m", "fedclust_jax", *args, "--output", "whole.json",
                   "--no-progress"], tmp_path)
    err = killed_three_times_then_run(
        [sys.executable, "-m", "fedclust_jax", *args, "--output", "r.json", "--checkpoint",
         "ck.npz", "--checkpoint-every", "2r"], tmp_path, seed=2)
    assert "resuming from round" in err or "ended in ck-" in err, err[-2000:]
    keep = lambda name: [{k: r[k] for k in ("algorithm", "metrics", "curves", "history",
                                            "restarts")}
                         for r in json.loads((tmp_path / name).read_text())]
    assert keep("r.json") == keep("whole.json")
    assert [r["algorithm"] for r in keep("r.json")] == ["fedavg", "ifca", "local"]


def test_a_killed_table_resumes_to_the_uninterrupted_rows(tmp_path):
    """The cheapest table, IFCA Figure 3 (b) at CI size, over four seeds (a point each)."""
    seeds = [0, 1, 2, 3]
    table = [sys.executable, "-m", "fedclust_jax.reproduce", "ifca-figure3b", "--quick",
             "--seeds", *map(str, seeds)]
    uninterrupted([*table, "--out", "whole", "--no-progress"], tmp_path)
    err = killed_three_times_then_run(
        [*table, "--out", "out", "--checkpoint", "ck", "--checkpoint-every", "1r"],
        tmp_path, seed=3, delay_s=1.0)
    assert "resuming from round" in err or "ended in ck" in err, err[-2000:]
    rows = lambda folder: [{k: v for k, v in r.items() if not k.endswith("wall_s")}
                           for r in json.loads((tmp_path / folder / "figure3b.json").read_text())["rows"]]
    assert rows("out") == rows("whole") and len(rows("out")) == len(seeds)
