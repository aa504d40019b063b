"""What a run leaves behind: checkpoint names, resume messages, the JSON's effective
configuration and environment, the fallback file, per-dataset defaults and `list NAME`."""

import json
import os

import pytest

from fedclust_jax import results as results_mod
from fedclust_jax.algorithms.registry import ALGORITHMS, effective_params, make_config
from fedclust_jax.cli import main
from fedclust_jax.experiment import study_configs
from fedclust_jax.presets import dataset_defaults, dataset_study, preset

TINY = ["--dataset", "gaussian-mixture", "--data", "num_clients=8", "--data",
        "samples_per_client=10", "--data", "test_samples_per_client=5", "--data", "dim=5",
        "--model-arg", "hidden=[4]", "--rounds", "2", "--restarts", "1"]


def test_checkpoint_is_the_given_file_for_one_algorithm(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert main(["run", "--algorithm", "fedavg", "--checkpoint", str(ck)] + TINY) == 0
    assert os.listdir(tmp_path) == ["ck.npz"]
    capsys.readouterr()
    assert main(["run", "--algorithm", "fedavg", "--checkpoint", str(ck)] + TINY
                + ["--rounds", "3"]) == 0
    err = capsys.readouterr().err
    assert "resuming from round 2 of 3" in err
    assert "\r" not in err  # stderr is not a terminal: plain lines


def test_checkpoints_per_algorithm_json_and_settings(tmp_path, capsys):
    ck = tmp_path / "ck" / "ck.npz"
    out = tmp_path / "new" / "folder" / "r.json"
    assert main(["compare", "--algorithms", "fedavg,ifca", "--checkpoint", str(ck),
                 "--output", str(out), "--no-progress"] + TINY) == 0
    assert sorted(os.listdir(tmp_path / "ck")) == ["ck-fedavg.npz", "ck-ifca.npz"]
    captured = capsys.readouterr()
    assert str(tmp_path / "ck" / "ck-fedavg.npz") in captured.err
    assert str(tmp_path / "ck" / "ck-ifca.npz") in captured.err
    printed = captured.out
    assert printed.index("num_clusters=4") < printed.index("algorithm ")  # settings above the table
    r = json.loads(out.read_text())
    ifca = r[1]
    assert next(iter(ifca)) == "command" and ifca["command"].startswith(
        f"fedclust-jax compare --algorithms fedavg,ifca --checkpoint {ck}")
    assert ifca["effective"]["params"]["num_clusters"] == 4
    assert ifca["effective"]["params"]["weighting"] == "equal"  # defaults included
    assert ifca["effective"]["model"] == "mlp" and ifca["config"]["model_args"] == {"hidden": [4]}
    env = ifca["environment"]
    assert {"fedclust_jax", "jax", "jaxlib", "backend", "device"} <= set(env)


def test_results_go_to_a_fallback_file_when_writing_fails(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.json"
    real = results_mod._write_json

    def flaky(results, path):
        if path == str(out):
            raise PermissionError(13, "Permission denied")
        return real(results, path)
    monkeypatch.setattr(results_mod, "_write_json", flaky)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--algorithm", "fedavg", "--output", str(out), "--no-progress"] + TINY) == 1
    err = capsys.readouterr().err
    written = [f for f in os.listdir(tmp_path) if f.startswith("fedclust-results-")]
    assert len(written) == 1 and written[0] in err and "Permission denied" in err
    assert json.loads((tmp_path / written[0]).read_text())["algorithm"] == "fedavg"


@pytest.mark.parametrize("dataset, model", [
    ("femnist", "femnist-cnn"), ("shakespeare", "shakespeare-lstm"),
    ("ifca-rotated-cifar10", "cifar-cnn"), ("srfca-rotated-mnist", "mlp"),
    ("srfca-rotated-cifar10", "resnet9"), ("synthetic-regression", "linear"),
])
def test_a_dataset_brings_its_own_model_and_settings(dataset, model):
    study = dataset_study(dataset, ["fedavg", "ifca"])
    configs = dict(study_configs(study))  # no data built
    assert configs["ifca"].model == model
    entry = dataset_defaults(dataset)
    for key, value in entry.training.items():
        if key in configs["fedavg"].params:
            assert configs["fedavg"].params[key] == value
    if dataset != "synthetic-regression":  # the synthetic preset's restarts stay with it
        assert configs["ifca"].restarts == 1


def test_dataset_flag_does_not_keep_the_preset(monkeypatch, capsys):
    from fedclust_jax import cli
    seen = {}

    def fake_run(study, **kw):
        seen["study"] = study
        raise ValueError("stop here")
    monkeypatch.setattr("fedclust_jax.experiment.run_study", fake_run)
    assert cli.main(["compare", "--dataset", "femnist", "--algorithms", "fedavg,ifca"]) == 2
    study = seen["study"]
    assert study["model"] == "femnist-cnn" and study["rounds"] == 200
    assert study["algorithms"]["ifca"]["lr"] == 0.04 and "restarts" not in study["algorithms"]["ifca"]
    assert study["algorithms"]["fedavg"]["batch_size"] == 100


def test_every_builtin_dataset_declares_defaults_and_they_validate():
    from fedclust_jax.data.registry import DATASETS
    builtin = [n for n, fn in DATASETS.items() if fn.__module__.startswith("fedclust_jax.")]
    assert len(builtin) >= 20
    for name in builtin:
        entry = DATASETS.defaults[name]
        assert entry is not None and entry.source, name
        if not entry.unsupported:
            study_configs(dataset_study(name))


def test_presets_follow_the_dataset_table():
    assert preset("ifca-synthetic")["algorithms"]["ifca"]["restarts"] == 10
    assert preset("mixture-classification")["algorithms"]["ifca"]["num_clusters"] == 4


def test_registry_uses_the_configs_own_local_defaults():
    cfg = make_config(ALGORITHMS["brifca"].config_cls, {}, "brifca")
    assert cfg.local.steps == 1 and cfg.local.lr == 0.01
    assert effective_params("brifca", {"lr": 0.5})["lr"] == 0.5
    assert effective_params("brifca", {"lr": 0.5})["steps"] == 1


def test_list_name_shows_defaults_types_and_meanings(capsys):
    assert main(["list", "ifca"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.split()[:1] == ["lr"])
    assert "0.1" in line and "float" in line and "step size" in line
    line = next(l for l in out.splitlines() if l.split()[:1] == ["participation"])
    assert "1.0" in line and "fraction" in line
    assert main(["list", "brifca"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.split()[:1] == ["steps"])
    assert line.split()[1] == "1"
    assert main(["list", "femnist"]) == 0
    out = capsys.readouterr().out
    assert "num_clients" in out and "FEDCLUST_DATA" in out and "femnist-cnn" in out
    assert main(["list", "ifca-rotated-mnist"]) == 0
    out = capsys.readouterr().out
    assert "2400" in out and "num_clients" in out
    assert main(["list", "mlp"]) == 0 and "hidden" in capsys.readouterr().out
    assert main(["list", "nope"]) == 2


def test_a_diverged_run_says_so_and_exits_1(capsys):
    argv = ["run", "--algorithm", "fedavg", "--lr", "1e30", "--no-progress", "--data",
            "num_clients=4", "--data", "dim=5", "--data", "samples_per_client=5", "--rounds", "2"]
    assert main(argv) == 1
    assert "diverged" in capsys.readouterr().err


def test_run_prints_the_curves_of_the_chosen_restart(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--algorithm", "ifca", "--eval-every", "1", "--output", str(out),
                 "--no-progress"] + TINY + ["--restarts", "2"]) == 0
    printed = capsys.readouterr().out
    r = json.loads(out.read_text())     # `run` writes one result object
    curves = r["curves"]
    assert printed.index("algorithm ") < printed.index("curves of ifca")  # after the table
    block = printed[printed.index("curves of ifca"):].splitlines()
    assert f"restart {r['restarts']['chosen']} of 2 (lowest training objective)" in block[0]
    assert block[1].split() == ["round", "acc", "loss", "miscl", "ARI", "K", "found", "train_loss"]
    rows = [line.split() for line in block[3:5]]
    assert [int(row[0]) for row in rows] == curves["round"] == [1, 2]
    for i, row in enumerate(rows):
        for j, key in enumerate(("test_acc", "test_loss", "misclustering", "ari"), start=1):
            assert float(row[j]) == pytest.approx(curves[key][i], abs=5e-5)
        assert int(row[5]) == curves["num_clusters_found"][i]


def test_curve_blocks_per_algorithm_thinned_to_twenty_rows():
    from fedclust_jax.results import format_curves
    rounds = list(range(5, 255, 5))  # 50 points
    pts = {"round": rounds, "test_loss": [1.0 / t for t in rounds],
           "num_clusters_found": [2] * 50}
    results = [{"algorithm": "fedavg", "restarts": {"objective": [0.1], "chosen": 0}},
               {"algorithm": "ifca", "restarts": {"objective": [0.3, 0.2], "chosen": 1},
                "curves": pts},
               {"algorithm": "local", "restarts": {"objective": [0.1], "chosen": 0},
                "curves": {"round": [5], "test_acc": [0.5], "test_loss": [0.7]}}]
    text = format_curves(results)
    ifca, local = text.split("\n\n")
    lines = ifca.splitlines()
    assert lines[0] == ("curves of ifca, restart 1 of 2 (lowest training objective); "
                        "20 of 50 evaluated rounds shown")
    assert lines[1].split() == ["round", "loss", "K", "found"]
    shown = [int(line.split()[0]) for line in lines[3:]]
    assert len(shown) == 20 and shown[0] == 5 and shown[-1] == 250 and shown == sorted(shown)
    assert lines[-1].split() == ["250", "0.0040", "2"]
    assert local.splitlines()[0] == "curves of local"
    assert local.splitlines()[3].split() == ["5", "0.5000", "0.7000"]
    assert max(len(line) for line in text.splitlines()) <= 100
    assert format_curves(results[:1]) == ""
