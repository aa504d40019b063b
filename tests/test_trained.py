"""Results you can hold: a run's chosen restart as a ``Trained`` (predict, save, load), the
command line's --save-state, and an algorithm's own round metrics in curves and plots."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax import load_trained, register_algorithm
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.cli import main
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax import loop

TINY = dict(dataset="gaussian-mixture", data={"num_clients": 8, "samples_per_client": 12,
                                               "test_samples_per_client": 6, "dim": 4},
            model_args={"hidden": [8]}, rounds=4, seed=1)


@pytest.fixture(scope="module")
def ifca_run():
    cfg = ExperimentConfig(**TINY, algorithm="ifca", params={"num_clusters": 4, "lr": 0.2},
                           restarts=2)
    return cfg, run_experiment(cfg, progress=False, keep_state=True)


def _accuracy(logits, y, count):
    right = (np.argmax(np.asarray(logits), -1) == np.asarray(y))[:count]
    return float(right.mean())


def test_predict_uses_the_model_each_client_is_scored_with(ifca_run):
    """Client i's test accuracy from ``predict(client=i)`` equals the per-client metric of
    the chosen restart (IFCA scores a client with its best cluster model)."""
    cfg, result = ifca_run
    trained = result["trained"]
    data = build_dataset(cfg.dataset, loop.data_key(cfg.seed), **cfg.data)
    assert trained.num_clusters == 4 and trained.assign.shape == (8,)
    assert set(trained.metrics) >= {"test_loss", "test_acc", "assigned_test_acc"}
    for i in range(data.num_clients):
        x, y = data.x_test[i], data.y_test[i]
        best = int(np.argmin(trained.metrics["test_loss_matrix"][i]))
        got = _accuracy(trained.predict(x, cluster=best), y, int(data.count_test[i]))
        assert got == pytest.approx(float(trained.metrics["test_acc"][i]), abs=1e-6)
        own = _accuracy(trained.predict(x, client=i), y, int(data.count_test[i]))
        assert own == pytest.approx(float(trained.metrics["assigned_test_acc"][i]), abs=1e-6)
    assert np.mean(trained.metrics["test_acc"]) == pytest.approx(result["metrics"]["test_acc"])
    with pytest.raises(ValueError, match="pass cluster="):
        trained.predict(data.x_test[0])
    with pytest.raises(ValueError, match="not one of the 4 cluster models"):
        trained.predict(data.x_test[0], cluster=4)
    with pytest.raises(ValueError, match=r"model takes \[n, 4\]"):
        trained.predict(jnp.zeros((2, 3)), cluster=0)


def test_save_and_load_give_the_same_models_and_predictions(ifca_run, tmp_path):
    cfg, result = ifca_run
    trained = result["trained"]
    path = trained.save(str(tmp_path / "run.npz"))
    back = load_trained(path)
    assert back.algorithm == "ifca" and back.config == cfg.to_dict()
    np.testing.assert_array_equal(back.assign, trained.assign)
    for a, b in zip(np.asarray(trained.metrics["test_loss"]), back.metrics["test_loss"]):
        assert a == b
    x = build_dataset(cfg.dataset, loop.data_key(cfg.seed), **cfg.data).x_test[2]
    np.testing.assert_array_equal(np.asarray(back.predict(x, cluster=3)),
                                  np.asarray(trained.predict(x, cluster=3)))
    (tmp_path / "foreign.npz").write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a saved fedclust_jax run"):
        load_trained(str(tmp_path / "foreign.npz"))


def test_save_state_from_the_command_line(tmp_path, capsys):
    """compare writes one state file per algorithm; a foreign file at the path is kept."""
    (tmp_path / "s-local.npz").write_text("mine")
    args = ["compare", "--algorithms", "fedavg,local", "--dataset", "gaussian-mixture",
            "--data", "num_clients=4", "--data", "dim=3", "--model-arg", "hidden=[4]",
            "--rounds", "2", "--no-progress", "--save-state", str(tmp_path / "s.npz")]
    assert main(args) == 0
    out = capsys.readouterr()
    assert (tmp_path / "s-local.npz").read_text() == "mine"
    assert "s-local-1.npz" in out.out and "is kept" in out.err
    fedavg = load_trained(str(tmp_path / "s-fedavg.npz"))
    local = load_trained(str(tmp_path / "s-local-1.npz"))
    assert fedavg.num_clusters == 1 and fedavg.params()[0] is not None
    assert local.num_clusters == 4     # one model per client
    x = np.zeros((5, 3), np.float32)
    assert fedavg.predict(x).shape == (5, 10)


class NormFedAvg(FedAvg):
    """FedAvg that also reports its model's norm each round (a user's round metric)."""

    name = "norm-fedavg"

    def round(self, state, key, data):
        state, metrics = super().round(state, key, data)
        norm = jnp.sqrt(sum(jnp.sum(a.astype(jnp.float32) ** 2)
                            for a in __import__("jax").tree.leaves(state.params)))
        return state, {**metrics, "model_norm": norm}


def test_a_round_metric_reaches_curves_and_a_plot_panel(tmp_path):
    register_algorithm("norm-fedavg", NormFedAvg, FedAvgConfig, replace=True)
    out = tmp_path / "r.json"
    assert main(["run", "--algorithm", "norm-fedavg", "--dataset", "gaussian-mixture",
                 "--data", "num_clients=4", "--data", "dim=3", "--model-arg", "hidden=[4]",
                 "--rounds", "4", "--eval-every", "2", "--no-progress", "--output",
                 str(out)]) == 0
    result = json.loads(out.read_text())
    history, curves = result["history"]["model_norm"], result["curves"]
    assert len(history) == 4 and curves["round"] == [2, 4]
    assert curves["model_norm"] == pytest.approx([history[1], history[3]])
    from fedclust_jax.plot import curve_metrics, load_results
    _, records = load_results([str(out)])
    assert "model_norm" in curve_metrics(records)
    assert main(["plot", str(out), "-o", str(tmp_path / "r.png")]) == 0
    assert main(["plot", str(out), "--metric", "model_norm", "-o", str(tmp_path / "n.png")]) == 0
    from fedclust_jax.results import format_curves
    assert "model_norm" in format_curves([result]).splitlines()[1]


def test_the_progress_line_shows_round_metrics():
    from fedclust_jax.progress import metrics_text
    history = {"eval.test_loss": np.zeros((2, 3)), "model_norm": np.array([[1.0, 2.0], [3.0, 1.5]]),
               "train_loss": np.array([[0.5, 0.25], [0.3, 0.125]]), "sizes": np.zeros((2, 2, 4))}
    assert metrics_text(history) == "train loss 0.125 model norm 1.5"
