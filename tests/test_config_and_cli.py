"""Bad configuration fails early with a clear message; the CLI runs end to end."""

import json
import os

import pytest

from fedclust_jax.algorithms.ifca import IFCAConfig
from fedclust_jax.cli import main
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.experiment import ExperimentConfig, run_experiment, study_configs


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-0.1), "lr = -0.1 is out of range"),
    (dict(steps=0), "steps = 0 is too small"),
    (dict(batch_size=0), "batch_size"),
    (dict(optimizer="lbfgs"), "optimizer"),
])
def test_local_training_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LocalTraining(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_clusters=0), "num_clusters = 0 is too small"),
    (dict(participation=0.0), "participation"),
    (dict(participation=1.2), "participation"),
    (dict(option="III"), "option"),
])
def test_ifca_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IFCAConfig(**kwargs)


def test_experiment_rejects_before_compute():
    with pytest.raises(ValueError, match="unknown algorithm 'ifcaa'"):
        ExperimentConfig(algorithm="ifcaa")
    with pytest.raises(ValueError, match="no parameter"):
        ExperimentConfig(algorithm="ifca", params=dict(clusters=2))
    with pytest.raises(ValueError, match="lr = -1.0 is out of range"):
        ExperimentConfig(algorithm="fedavg", params=dict(lr=-1.0))
    with pytest.raises(ValueError, match="more than the 4 clients"):
        run_experiment(ExperimentConfig(dataset="gaussian-mixture",
                                        data=dict(num_clients=4, num_clusters=2),
                                        algorithm="ifca", params=dict(num_clusters=5)),
                       progress=False)
    with pytest.raises(ValueError, match="unknown study key"):
        study_configs({"algorithms": {"ifca": {}}, "epochs": 3})


def test_cli_compare_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["compare", "--preset", "mixture-classification", "--algorithms", "fedavg,ifca",
                 "--rounds", "2", "--restarts", "1",
                 "--data", "num_clients=8", "--data", "samples_per_client=10", "--no-progress",
                 "--output", str(out)])
    assert code == 0
    table = capsys.readouterr().out
    assert "ifca" in table and "fedavg" in table and "acc" in table
    results = json.loads(out.read_text())
    assert [r["algorithm"] for r in results] == ["fedavg", "ifca"]
    assert 0.0 <= results[1]["metrics"]["test_acc"] <= 1.0
    assert results[1]["config"]["params"]["num_clusters"] == 4  # from the preset


def test_cli_reports_bad_input(capsys):
    assert main(["run", "--algorithm", "ifca", "--lr", "-1", "--no-progress"]) == 2
    assert "lr = -1.0 is out of range" in capsys.readouterr().err
    assert main(["run", "--algorithm", "nope"]) == 2
    assert main(["compare", "--set", "bogus=1"]) == 2


def test_cli_help_and_list(capsys):
    for argv in (["--help"], ["run", "--help"], ["compare", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
    assert "--participation" in capsys.readouterr().out
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "synthetic-regression" in listing and "ifca" in listing


def test_accelerator_extras_are_jaxs_own():
    """`pip install -e ".[cuda12]"` (or cuda13, tpu) pulls JAX's extra of that name."""
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    for name in ("cuda12", "cuda13", "tpu"):
        assert extras[name] == [f"jax[{name}]>=0.10"], (name, extras.get(name))
