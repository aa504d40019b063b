"""The user algorithm, dataset and model of ``examples/`` through every entry point: run,
compare (a study), a sweep with the step size traced, checkpoint and resume, and plot."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fedclust_jax import registration
from fedclust_jax.experiment import ExperimentConfig, run_experiment, run_study

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
PLUGINS = [str(EXAMPLES / f) for f in ("fesem.py", "swapped_labels.py", "resmlp.py")]
DATA = dict(num_clients=8, samples_per_client=16, test_samples_per_client=8)
PARAMS = dict(num_clusters=2, lr=0.1, steps=5)


@pytest.fixture(scope="module", autouse=True)
def plugins():
    registration.load_plugins(PLUGINS)


def config(**kw):
    base = dict(dataset="swapped-labels", data=DATA, model="resmlp",
                model_args=dict(width=8, depth=1), algorithm="fesem", params=PARAMS,
                rounds=4, seed=1)
    base.update(kw)
    return ExperimentConfig(**base)


def test_registered_names_are_listed_and_checked():
    from fedclust_jax.cli import list_everything
    text = list_everything()
    assert all(name in text for name in ("fesem", "swapped-labels", "resmlp"))
    assert "lr" in list_everything("fesem")
    with pytest.raises(ValueError, match="already registered"):
        registration.register_model("resmlp", lambda data: None)
    with pytest.raises(ValueError, match="subclasses"):
        registration.register_algorithm("not-an-algorithm", object, dict)
    with pytest.raises(ValueError, match="no parameter"):
        config(params=dict(PARAMS, beta=0.1))


def test_run_finds_the_two_clusters():
    out = run_experiment(config(rounds=6, restarts=2, eval_every=2), progress=False)
    m = out["metrics"]
    assert m["num_clusters_found"] == 2 and m["misclustering"] == 0.0, m
    assert m["test_acc"] > 0.9, m
    assert out["curves"]["round"] == [2, 4, 6] and len(out["history"]["distance"]) == 6


def test_compare_row_equals_the_single_run():
    study = dict(dataset="swapped-labels", data=DATA, model="resmlp",
                 model_args=dict(width=8, depth=1), rounds=4, seed=1,
                 algorithms={"fesem": PARAMS, "fedavg": dict(lr=0.1, steps=2)})
    rows = run_study(study, progress=False)
    single = run_experiment(config(), progress=False)
    assert [r["algorithm"] for r in rows] == ["fesem", "fedavg"]
    np.testing.assert_allclose(rows[0]["metrics"]["test_loss"], single["metrics"]["test_loss"],
                               rtol=1e-6)
    assert rows[0]["metrics"]["test_acc"] > rows[1]["metrics"]["test_acc"]  # one model fails


def test_sweep_traces_the_step_size_and_equals_run(tmp_path):
    from fedclust_jax.plot import plot_results
    from fedclust_jax.results import save_results
    from fedclust_jax.sweep import run_sweep
    study = dict(dataset="swapped-labels", data=DATA, model="resmlp",
                 model_args=dict(width=8, depth=1), rounds=4, seed=1, eval_every=2,
                 algorithms={"fesem": dict(num_clusters=2, steps=5)},
                 sweep={"fesem.lr": [0.05, 0.1]})
    stats = {}
    rows = run_sweep(study, progress=False, stats=stats)
    assert stats["programs"] == 1 and stats["traces"] == 1       # one compiled program
    single = run_experiment(config(eval_every=2), progress=False)
    np.testing.assert_allclose(rows[1]["test_loss"], single["metrics"]["test_loss"], rtol=1e-5)
    path = tmp_path / "rows.json"
    save_results(rows, str(path))
    png = tmp_path / "sweep.png"
    plot_results(str(path), str(png))
    assert png.stat().st_size > 0


def test_checkpoint_resume_equals_the_uninterrupted_run(tmp_path):
    path = str(tmp_path / "ck.npz")
    whole = run_experiment(config(rounds=4), progress=False)
    run_experiment(config(rounds=2), progress=False, checkpoint=path)
    resumed = run_experiment(config(rounds=4), progress=False, checkpoint=path)
    assert resumed["history"]["distance"] == pytest.approx(whole["history"]["distance"], rel=1e-6)
    assert resumed["metrics"]["test_loss"] == pytest.approx(whole["metrics"]["test_loss"], rel=1e-6)


def test_cli_takes_plugins(tmp_path, capsys):
    from fedclust_jax import cli
    import json
    plugins = [a for p in PLUGINS for a in ("--plugin", p)]
    study = tmp_path / "study.json"
    study.write_text(json.dumps(dict(dataset="swapped-labels", data=DATA, model="resmlp",
                                     rounds=2, algorithms={"fesem": PARAMS})))
    code = cli.main(plugins + ["run", "--config", str(study), "--no-progress"])
    assert code == 0 and "fesem" in capsys.readouterr().out
    assert cli.main(["--plugin", str(tmp_path / "missing.py"), "list"]) == 2
    assert "does not exist" in capsys.readouterr().err
