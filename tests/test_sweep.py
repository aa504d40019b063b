"""Sweeps: a point equals the single run, grid order, seed axis, one program per static
group, CSV columns, and bad entries refused before compute."""

import csv
import json

import numpy as np
import pytest

from fedclust_jax import cli
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.results import save_rows
from fedclust_jax.sweep import parse_sweep, plan, run_sweep

TINY = {"num_clients": 12, "samples_per_client": 16, "test_samples_per_client": 16, "dim": 6}
IFCA = {"num_clusters": 2, "lr": 0.05, "option": "gradient"}


def study(sweep, **kw):
    return {"dataset": "synthetic-regression", "data": dict(TINY), "rounds": 4, "restarts": 2,
            "eval_every": 2, "algorithms": {"ifca": dict(IFCA)}, "sweep": sweep, **kw}


@pytest.fixture(scope="module")
def swept():
    """3 step sizes x 2 seeds, at most 4 points per call (the second call is padded)."""
    stats = {}
    rows = run_sweep(study({"seed": [0, 1], "ifca.lr": [0.02, 0.05, 0.1]}), progress=False,
                     max_points=4, stats=stats)
    return rows, stats


def test_point_equals_the_single_run(swept):
    rows, _ = swept
    row = next(r for r in rows if r["seed"] == 1 and r["ifca.lr"] == 0.1)
    single = run_experiment(ExperimentConfig(
        dataset="synthetic-regression", data=TINY, algorithm="ifca", params={**IFCA, "lr": 0.1},
        rounds=4, restarts=2, seed=1, eval_every=2), progress=False)
    for key, value in single["metrics"].items():
        if isinstance(value, float):
            np.testing.assert_allclose(row[key], value, rtol=1e-6, atol=1e-6, err_msg=key)
        else:
            assert row[key] == value, key
    for key, curve in single["curves"].items():
        np.testing.assert_allclose(np.asarray(row["curves"][key], float), np.asarray(curve, float),
                                   rtol=1e-6, atol=1e-6, err_msg=key)


def test_traced_grid_and_seeds_compile_once(swept):
    rows, stats = swept
    assert stats == {"programs": 1, "traces": 1}
    assert [(r["seed"], r["ifca.lr"]) for r in rows] == [
        (0, 0.02), (0, 0.05), (0, 0.1), (1, 0.02), (1, 0.05), (1, 0.1)]
    assert [r["point"] for r in rows] == list(range(6))
    assert {r["program"] for r in rows} == {0}
    assert [r["params.lr"] for r in rows] == [r["ifca.lr"] for r in rows]
    # each seed has its own data: the seed-0 and seed-1 points differ
    assert rows[0]["test_loss"] != rows[3]["test_loss"]


def test_static_values_make_separate_programs():
    _, groups, _ = plan(study({"ifca.num_clusters": [2, 3], "ifca.lr": [0.02, 0.1],
                               "seed": [0, 1]}))
    assert len(groups) == 2
    assert [len(g["items"]) for g in groups] == [4, 4]
    assert all(g["traced"] == ("lr",) for g in groups)
    _, groups, _ = plan(study({"rounds": [2, 4]}))
    assert len(groups) == 2


def test_grid_order_product_and_zip():
    _, paths, grid = parse_sweep(study({"seed": [0, 1], "ifca.lr": [0.1, 0.2, 0.3]}))
    assert paths == ["seed", "ifca.lr"]
    assert grid == [(0, 0.1), (0, 0.2), (0, 0.3), (1, 0.1), (1, 0.2), (1, 0.3)]
    _, _, grid = parse_sweep(study({"seed": [0, 1, 2], "ifca.lr": [0.1, 0.2, 0.3],
                                    "mode": "zip"}))
    assert grid == [(0, 0.1), (1, 0.2), (2, 0.3)]


def test_csv_and_json_rows(swept, tmp_path):
    rows, _ = swept
    path = tmp_path / "r.csv"
    assert save_rows(rows, str(path)) == str(path)
    with open(path) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows)
    cols = list(table[0])
    assert cols[:7] == ["algorithm", "algorithm_name", "point", "program", "swept", "seed",
                        "ifca.lr"]
    assert json.loads(table[0]["swept"]) == ["seed", "ifca.lr"]
    for col in ("params.lr", "data.num_clients", "rounds", "test_loss", "misclustering", "ari",
                "curves"):
        assert col in cols, col
    assert json.loads(table[2]["curves"]) == rows[2]["curves"]
    assert float(table[2]["ifca.lr"]) == rows[2]["ifca.lr"]
    path = tmp_path / "r.json"
    save_rows(rows, str(path))
    assert json.loads(path.read_text())[2]["curves"]["round"] == [2, 4]


BAD = [
    ({"ifca.foo": [1]}, "'ifca.foo'"),
    ({"fedavg.lr": [0.1]}, "'fedavg.lr'"),
    ({"seed": []}, "'seed' = []"),
    ({"ifca.lr": 0.1}, "'ifca.lr' = 0.1"),
    ({"seed": [0, 1], "ifca.lr": [0.1], "mode": "zip"}, "equal length"),
    ({"ifca.lr": [0.1, -1.0]}, "'ifca.lr' = -1.0"),
    ({"data.num_clients": [12, 0]}, "'data.num_clients' = 0"),
    ({"ifca.num_clusters": [2, 13]}, "num_clusters"),
    ({"seed": [0], "mode": "grid"}, "mode"),
]


@pytest.mark.parametrize("sweep, named", BAD)
def test_bad_entries_exit_2_with_one_line(sweep, named, tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(study(sweep)))
    assert cli.main(["sweep", "--config", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedclust-jax: error: sweep")
    assert named in err


def test_output_must_be_csv_or_json(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(study({"seed": [0]})))
    assert cli.main(["sweep", "--config", str(path), "--output", str(tmp_path / "r.txt")]) == 2
    assert ".csv or .json" in capsys.readouterr().err
    assert cli.main(["compare", "--config", str(path)]) == 2
    assert "fedclust-jax sweep" in capsys.readouterr().err


def test_readme_sweep_example_is_valid():
    import pathlib
    import tomllib
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split("## Sweeps", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    _, paths, grid = parse_sweep(tomllib.loads(block))
    assert paths == ["seed", "ifca.lr"] and len(grid) == 6
