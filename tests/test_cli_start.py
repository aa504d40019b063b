"""What a run says before it computes: the data line and every algorithm's effective
settings, flushed before anything compiles (also when stdout is a pipe), the time left
once a round is timed, a sweep's plan; and the formats of `run` (one JSON object, one
line when a study has several algorithms)."""

import io
import json
import os
import subprocess
import sys

from fedclust_jax import experiment
from fedclust_jax.cli import main
from fedclust_jax.progress import Progress, duration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--data", "num_clients=8", "--data", "dim=5", "--rounds", "3"]


def test_settings_come_before_the_first_progress_line_through_a_pipe(tmp_path):
    """stdout and stderr into one pipe: the order lines arrive in is the order they were
    flushed, so the settings of both algorithms precede every progress line."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("PYTHONUNBUFFERED", None)
    out = subprocess.run([sys.executable, "-m", "fedclust_jax", "compare", "--algorithms",
                          "fedavg,ifca", "--restarts", "2"] + TINY, cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    first_progress = next(i for i, line in enumerate(lines) if "/3 rounds" in line)
    before = "\n".join(lines[:first_progress])
    assert lines[0].startswith("8 clients, regression") and "true clusters 2" in lines[0]
    assert "fedavg: rounds=3 restarts=2 model=linear" in before
    assert "ifca: rounds=3 restarts=2 model=linear" in before
    assert "num_clusters=2" in before and "weighting=equal" in before  # defaults included
    assert before.index("fedavg:") < before.index("ifca:")
    after = "\n".join(lines[first_progress:])
    assert "layout: fedavg" in after and after.index("layout:") < after.index("algorithm ")


def test_settings_are_printed_before_the_first_algorithm_runs(monkeypatch, capsys):
    seen = []
    real = experiment.run_experiment

    def spy(cfg, **kwargs):
        seen.append(capsys.readouterr().out)
        return real(cfg, **kwargs)
    monkeypatch.setattr(experiment, "run_experiment", spy)
    assert main(["compare", "--algorithms", "fedavg,ifca", "--restarts", "1", "--no-progress"]
                + TINY) == 0
    assert "fedavg: rounds=3" in seen[0] and "ifca: rounds=3" in seen[0]
    assert seen[1] == ""                     # said once, before the first
    assert "fedavg: rounds=" not in capsys.readouterr().out   # not again after the runs


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_says_the_time_left_and_warns_once_past_an_hour():
    now = [0.0]
    s = io.StringIO()
    bar = Progress("femnist", 200, stream=s, clock=lambda: now[0], min_interval_s=0.0)
    for done, t in [(1, 96.0), (2, 176.0), (3, 256.0), (10, 816.0)]:
        now[0] = t
        bar.update(done, "train loss 1")
    lines = s.getvalue().splitlines()
    assert "left" not in lines[0]            # the first chunk compiles: no estimate
    assert lines[1] == "femnist: about 4.4 h left (198 rounds at 80 s a round)"
    assert lines[2].endswith("176.0s (4.4 h left) train loss 1")
    assert sum("about" in line for line in lines) == 1
    assert "(4.2 h left)" in lines[-1]


def test_a_run_of_days_says_days_and_a_short_run_no_warning():
    now = [0.0]
    s = io.StringIO()
    bar = Progress("ifca", 10**6, stream=s, clock=lambda: now[0], min_interval_s=0.0)
    now[0] = 5.0
    bar.update(1)
    now[0] = 6.0
    bar.update(2)
    assert "about 11.6 days left" in s.getvalue()
    s = Tty()
    bar = Progress("ifca", 10, stream=s, clock=lambda: now[0])
    for done in range(1, 11):
        now[0] += 1.0
        bar.update(done)
    assert "about" not in s.getvalue() and "(8 s left)" in s.getvalue()
    assert s.getvalue().endswith("\n") and "left" not in s.getvalue().split("\r")[-1]
    assert [duration(x) for x in (45, 720, 4 * 3600, 3 * 86400)] == \
        ["45 s", "12 min", "4.0 h", "3.0 days"]


def test_unknown_true_clusters_are_said_unknown_in_the_summary_and_the_json():
    import jax
    import numpy as np
    from fedclust_jax.data.synthetic import mixed_linear_regression
    from fedclust_jax.experiment import ExperimentConfig, run_experiment
    data = mixed_linear_regression(jax.random.key(0), num_clients=4, dim=5,
                                   samples_per_client=10, test_samples_per_client=10)
    unlabeled = data.replace(cluster=np.full_like(np.asarray(data.cluster), -1))
    assert unlabeled.summary().endswith("true clusters unknown")
    assert data.summary().endswith(f"true clusters {data.num_true_clusters}")
    cfg = ExperimentConfig(dataset="synthetic-regression", algorithm="fedavg", rounds=1)
    r = run_experiment(cfg, data=unlabeled, progress=False)
    assert r["data"].endswith("true clusters unknown")


def test_run_output_is_one_object_and_compare_a_list(tmp_path, capsys):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main(["run", "--algorithm", "ifca", "--restarts", "1", "--no-progress",
                 "--output", str(one)] + TINY) == 0
    result = json.loads(one.read_text())
    assert isinstance(result, dict) and result["algorithm"] == "ifca"
    assert main(["compare", "--algorithms", "ifca", "--restarts", "1", "--no-progress",
                 "--output", str(two)] + TINY) == 0
    assert [r["algorithm"] for r in json.loads(two.read_text())] == ["ifca"]


def test_run_on_a_study_of_several_algorithms_names_them_in_one_line(tmp_path, capsys):
    study = tmp_path / "study.toml"
    study.write_text("[algorithms.ifca]\n[algorithms.fedavg]\n")
    assert main(["run", "--config", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("fedclust-jax: error: `run` runs one algorithm and the study has 2 (ifca, "
                   "fedavg); pass --algorithm LABEL, e.g. --algorithm ifca, or use `compare` "
                   "to run them all")


def test_sweep_prints_its_plan_before_compute(tmp_path, monkeypatch, capsys):
    from fedclust_jax import sweep
    study = tmp_path / "s.toml"
    study.write_text('dataset = "synthetic-regression"\nrounds = 60\neval_every = 10\n'
                     'data = {num_clients = 8, dim = 5}\n'
                     '[algorithms.ifca]\nnum_clusters = 2\nrestarts = 2\n'
                     '[algorithms.fedavg]\nlr = 0.01\n'
                     '[sweep]\nseed = [0, 1]\n"ifca.lr" = [0.01, 0.1, 1.0]\n')

    def stop(*a, **k):
        raise ValueError("stopped before compute")
    monkeypatch.setattr(sweep, "run_sweep", stop)
    assert main(["sweep", "--config", str(study)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("sweep: 6 point(s), product of seed = [0,1], ifca.lr = [0.01,0.1,1]; "
                      "dataset synthetic-regression num_clients=8 dim=5")
    assert out[1] == "ifca: rounds=60 restarts=2 model=linear eval_every=10"
    assert out[2].split() == ["num_clusters=2", "(other", "parameters", "at", "their",
                              "defaults)"]
    assert out[3].startswith("fedavg: rounds=60 restarts=1")
