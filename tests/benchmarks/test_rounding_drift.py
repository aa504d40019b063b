"""benchmarks/rounding_drift.py: the per-seed distance and the accuracy rows on known
snapshots, and the checkpoint refusals before any run."""

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import rounding_drift  # noqa: E402


def snapshots(tmp_path):
    """Two runs of 2 seeds, one method, leaves of 3 and 4 values; B's seed 1 differs by 3-4-0."""
    a = {"Global/r1/0": np.array([[1.0, 0, 0], [0, 3, 0]]), "Global/r1/1": np.zeros((2, 4)),
         "Global/acc": np.array([70.0, 80.0])}
    b = {"Global/r1/0": np.array([[1.0, 0, 0], [0, 6, 0]]), "Global/r1/1": np.array([[0.0] * 4, [4, 0, 0, 0]]),
         "Global/acc": np.array([71.0, 79.5])}
    out = []
    for name, d in (("a", a), ("b", b)):
        np.savez(tmp_path / f"{name}.npz", **d)
        out.append(np.load(tmp_path / f"{name}.npz"))
    return out


def test_distance_is_relative_l2_per_seed(tmp_path):
    a, b = snapshots(tmp_path)
    np.testing.assert_allclose(rounding_drift.distance(a, b, "Global", 1), [0.0, 5.0 / 3.0])


def test_table_gives_both_runs_and_their_difference(tmp_path):
    a, b = snapshots(tmp_path)
    args = argparse.Namespace(methods=["Global"], seeds=2, checkpoints=[1])
    text = rounding_drift.table(a, b, ["A: x", "B: y"], args)
    assert "| 1 | 0.0e+00 | 1.7e+00 |" in text
    assert "| A: x | 70.00 | 80.00 | 75.00 ± 5.00 |" in text
    assert "| B - A | +1.00 | -0.50 | +0.25 |" in text


@pytest.mark.parametrize("points", [["5", "2", "50"], ["0", "50"], ["1", "20"]])
def test_bad_checkpoints_refused_before_any_run(points, capsys):
    with pytest.raises(SystemExit):
        rounding_drift.main(["--data-dir", "/nonexistent", "--checkpoints", *points])
    assert "checkpoint" in capsys.readouterr().err


def test_missing_data_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rounding_drift.main(["--data-dir", str(tmp_path)])
    assert "no mnist/ folder" in capsys.readouterr().err
