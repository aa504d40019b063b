"""The user algorithms, dataset and model of ``examples/`` through every entry point: run,
compare (a study), a sweep with a parameter traced, checkpoint and resume, and plot.
FeSEM with the step size traced; FedProx (the local-step mechanism's proximal term) with mu
traced, equal to FedAvg at mu = 0; SCAFFOLD's per-client control variates against the
option-II formulas written out by hand; FedAvgM (a field added to FedAvg's state) equal to
FedAvg at zero momentum and to its server step written out by hand."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fedclust_jax import registration
from fedclust_jax.experiment import ExperimentConfig, run_experiment, run_study

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
PLUGINS = [str(EXAMPLES / f) for f in ("fesem.py", "swapped_labels.py", "resmlp.py",
                                        "fedprox.py", "scaffold.py", "fedavgm.py")]
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
    assert all(name in text for name in ("fesem", "swapped-labels", "resmlp", "fedprox",
                                         "scaffold"))
    assert "lr" in list_everything("fesem") and "proximal" in list_everything("fedprox")
    with pytest.raises(ValueError, match="mu = -0.1 is out of range; mu takes a finite "
                                         "number >= 0"):
        config(algorithm="fedprox", params=dict(mu=-0.1))
    with pytest.raises(ValueError, match="plain SGD"):
        config(algorithm="scaffold", params=dict(optimizer="adam"))
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
                 algorithms={"fesem": PARAMS, "fedavg": dict(lr=0.1, steps=2),
                             "scaffold": dict(lr=0.1, steps=2)})
    rows = run_study(study, progress=False)
    single = run_experiment(config(), progress=False)
    assert [r["algorithm"] for r in rows] == ["fesem", "fedavg", "scaffold"]
    assert np.isfinite(rows[2]["metrics"]["test_loss"])
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
    study.write_text(json.dumps(dict(dataset="swapped-labels", data=DATA, model="resmlp",
                                     rounds=2, algorithms={"fedprox": dict(mu=-1.0)})))
    assert cli.main(plugins + ["run", "--config", str(study), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "mu = -1.0 is out of range" in err and len(err.strip().splitlines()) == 1


# ---- FedProx and SCAFFOLD: the local-step mechanism from a plugin ----------------------

PROX = dict(lr=0.1, steps=3)


def test_fedprox_at_mu_zero_is_fedavg_and_a_sweep_traces_mu(tmp_path):
    """``run`` at mu = 0 (no term: FedAvg's program) and the sweep's traced mu = 0 point
    equal FedAvg on the same seed; mu = 0.5 changes the run; one compiled program; plot;
    checkpoint and resume of mu = 0.5 equal the sweep's uninterrupted mu = 0.5 point."""
    from fedclust_jax.plot import plot_results
    from fedclust_jax.results import save_results
    from fedclust_jax.sweep import run_sweep
    fedavg = run_experiment(config(algorithm="fedavg", params=PROX, eval_every=2), progress=False)
    prox0 = run_experiment(config(algorithm="fedprox", params=dict(PROX, mu=0.0), eval_every=2),
                           progress=False)
    assert prox0["history"]["train_loss"] == pytest.approx(fedavg["history"]["train_loss"],
                                                           rel=1e-6)
    assert prox0["metrics"]["test_loss"] == pytest.approx(fedavg["metrics"]["test_loss"], rel=1e-6)
    study = dict(dataset="swapped-labels", data=DATA, model="resmlp",
                 model_args=dict(width=8, depth=1), rounds=4, seed=1, eval_every=2,
                 algorithms={"fedprox": PROX}, sweep={"fedprox.mu": [0.0, 0.5]})
    stats = {}
    rows = run_sweep(study, progress=False, stats=stats)
    assert stats["programs"] == 1 and stats["traces"] == 1       # mu traced: one program
    np.testing.assert_allclose(rows[0]["test_loss"], fedavg["metrics"]["test_loss"], rtol=1e-5)
    assert abs(rows[1]["test_loss"] - rows[0]["test_loss"]) > 1e-5
    path = tmp_path / "rows.json"
    save_results(rows, str(path))
    png = tmp_path / "sweep.png"
    plot_results(str(path), str(png))
    assert png.stat().st_size > 0

    ck = str(tmp_path / "ck.npz")
    half = config(algorithm="fedprox", params=dict(PROX, mu=0.5), rounds=2)
    run_experiment(half, progress=False, checkpoint=ck)
    resumed = run_experiment(config(algorithm="fedprox", params=dict(PROX, mu=0.5)),
                             progress=False, checkpoint=ck)
    assert resumed["history"]["train_loss"][:2] == pytest.approx(
        run_experiment(half, progress=False)["history"]["train_loss"], rel=1e-6)
    np.testing.assert_allclose(resumed["metrics"]["test_loss"], rows[1]["test_loss"], rtol=1e-5)


def test_scaffold_matches_option_ii_written_out():
    """Round 1 (c = c_i = 0) is FedAvg's round; two rounds with half the clients taking
    part and eta_g = 0.5 give the x, c and c_i of Karimireddy et al.'s Algorithm 1, option
    II, computed by hand (full-batch gradients of the squared error)."""
    import jax
    import jax.numpy as jnp
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
    from fedclust_jax.core.participation import participants
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.models.linear import linear_regression
    from helpers import small_regression
    import sys
    scaffold = sys.modules[registration.load_plugins([str(EXAMPLES / "scaffold.py")])[0]]
    data = small_regression(num_clients=4, samples_per_client=5, dim=3, separation=1.0)
    model = linear_regression(3, init="normal")
    local = LocalTraining(steps=3, lr=0.05)
    key = jax.random.key(0)

    full = scaffold.Scaffold(model, scaffold.ScaffoldConfig(local=local, chunk=None))
    ours = jax.jit(full.round)(full.init(key, data), jax.random.key(1), data)[0]
    fedavg = FedAvg(model, FedAvgConfig(local=local, chunk=None))
    theirs = jax.jit(fedavg.round)(fedavg.init(key, data), jax.random.key(1), data)[0]
    np.testing.assert_allclose(ours.params["theta"], theirs.params["theta"], rtol=1e-6, atol=1e-7)

    alg = scaffold.Scaffold(model, scaffold.ScaffoldConfig(local=local, global_lr=0.5,
                                                           participation=0.5, chunk=1))
    step = jax.jit(alg.round)
    state = alg.init(key, data)
    x = np.asarray(state.params["theta"], np.float64)
    c, ci = np.zeros(3), np.zeros((4, 3))
    xs, ys = np.asarray(data.x, np.float64), np.asarray(data.y, np.float64)
    for t in range(2):
        round_key = jax.random.key(10 + t)
        state = step(state, round_key, data)[0]
        ids = np.asarray(participants(round_key, 4, 0.5)[0])
        dys, dcs = [], []
        for i in ids:
            y = x.copy()
            for _ in range(local.steps):
                g = -2.0 / 5 * xs[i].T @ (ys[i] - xs[i] @ y)
                y = y - local.lr * (g - ci[i] + c)
            new = ci[i] - c + (x - y) / (local.steps * local.lr)
            dys.append(y - x)
            dcs.append(new - ci[i])
            ci[i] = new
        x = x + 0.5 * np.mean(dys, axis=0)
        c = c + len(ids) / 4 * np.mean(dcs, axis=0)
    assert np.abs(c).max() > 0.1                        # the correction is not negligible
    np.testing.assert_allclose(state.params["theta"], x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.control["theta"], c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state.client_control["theta"], ci, rtol=1e-4, atol=1e-5)


# ---- FedAvgM: a built-in's state extended by a subclass --------------------------------

def test_fedavgm_is_fedavg_at_zero_momentum_and_its_step_by_hand(tmp_path):
    """At beta = 0 and eta = 1 FedAvgM's run equals FedAvg's; two rounds at beta = 0.5,
    eta = 0.7 give Hsu et al.'s v and w computed from FedAvg's own rounds; the added
    state field survives a checkpoint and resume."""
    import sys

    import jax
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig, GlobalState
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.models.linear import linear_regression
    from helpers import small_regression
    fedavg = run_experiment(config(algorithm="fedavg", params=PROX), progress=False)
    zero = run_experiment(config(algorithm="fedavgm", params=dict(
        PROX, server_momentum=0.0, server_lr=1.0)), progress=False)
    assert zero["history"]["train_loss"] == pytest.approx(fedavg["history"]["train_loss"],
                                                          rel=1e-5)
    assert zero["metrics"]["test_loss"] == pytest.approx(fedavg["metrics"]["test_loss"], rel=1e-5)

    fedavgm = sys.modules[registration.load_plugins([str(EXAMPLES / "fedavgm.py")])[0]]
    data = small_regression(num_clients=4, samples_per_client=5, dim=3, separation=1.0)
    model = linear_regression(3, init="normal")
    local = LocalTraining(steps=3, lr=0.05)
    alg = fedavgm.FedAvgM(model, fedavgm.FedAvgMConfig(local=local, server_momentum=0.5,
                                                       server_lr=0.7, chunk=None))
    plain = jax.jit(FedAvg(model, FedAvgConfig(local=local, chunk=None)).round)
    state = alg.init(jax.random.key(0), data)
    w, v = np.asarray(state.params["theta"]), np.zeros(3)
    for t in range(2):
        key = jax.random.key(10 + t)
        mean = plain(GlobalState(params={"theta": w}, round=state.round), key, data)[0]
        state = jax.jit(alg.round)(state, key, data)[0]
        v = 0.5 * v + (w - np.asarray(mean.params["theta"]))
        w = w - 0.7 * v
        np.testing.assert_allclose(state.velocity["theta"], v, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(state.params["theta"], w, rtol=1e-5, atol=1e-7)
    assert int(state.round) == 2 and np.abs(v).max() > 1e-3

    ck = str(tmp_path / "ck.npz")
    momentum = dict(PROX, server_momentum=0.5)
    whole = run_experiment(config(algorithm="fedavgm", params=momentum), progress=False)
    run_experiment(config(algorithm="fedavgm", params=momentum, rounds=2), progress=False,
                   checkpoint=ck)
    resumed = run_experiment(config(algorithm="fedavgm", params=momentum), progress=False,
                             checkpoint=ck)
    assert resumed["metrics"]["test_loss"] == pytest.approx(whole["metrics"]["test_loss"],
                                                            rel=1e-6)
    assert abs(whole["metrics"]["test_loss"] - zero["metrics"]["test_loss"]) > 1e-4
