"""The device suite's dry run: every in-process part at toy size on the CPU, files parse, and
a second run resumes from the first one's archive (its parts kept, its tables' checkpoints
resumed)."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

from fedclust_jax import reproduce
from fedclust_jax.data.sources import write_idx
from test_tables import tiny_leaf

ROOT = Path(__file__).resolve().parents[2]


def tiny_mnist(root: Path) -> None:
    rng = np.random.default_rng(0)
    (root / "mnist").mkdir(parents=True)
    for split, n in (("train", 200), ("t10k", 40)):
        write_idx(root / "mnist" / f"{split}-images-idx3-ubyte.gz",
                  rng.integers(0, 256, (n, 28, 28)))
        write_idx(root / "mnist" / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, n))


def suite(tmp_path, *args, timeout=300):
    out = "out"
    if "--out-as" in args:
        i = args.index("--out-as")
        out, args = args[i + 1], args[:i] + args[i + 2:]
    return subprocess.run([sys.executable, "benchmarks/device_suite.py", "--dry-run", "--data-dir",
                           str(tmp_path / "data"), "--out", str(tmp_path / out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})   # as on a device: no install


def test_dry_run_writes_each_part_its_table_and_a_parsable_summary(tmp_path):
    tiny_mnist(tmp_path / "data")
    tiny_leaf(tmp_path / "data")
    res = suite(tmp_path, "--parts", "sweep", "ifca-figure3b",
                "--archive", str(tmp_path / "suite.tar.gz"))
    assert res.returncode == 0, res.stdout + res.stderr
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    status = {r["part"]: r for r in summary["parts"]}
    assert list(status)[:4] == ["tests", "roofline", "roofline-bf16", "sweep"]
    assert status["tests"]["status"] == status["roofline"]["status"] == "skipped"
    for part in ("sweep", "ifca-figure3b"):
        assert status[part]["status"] == "ok", status[part]
    # the table went through the reproduce command at CI size
    record = json.loads((out / "ifca" / "figure3b.json").read_text())
    assert record["table"] == "ifca-figure3b" and record["quick"] and record["rows"]
    assert (out / "ifca" / "figure3b.md").read_text().startswith(
        "`python -m fedclust_jax.reproduce ifca-figure3b --quick")
    assert (out / "ifca-figure3b.txt").read_text().startswith(sys.executable + " -m fedclust_jax.reproduce")
    assert "sweep of 2 points / one run" in (out / "sweep_speed.md").read_text()
    assert set(status) >= set(reproduce.table_ids())     # every study file is a part
    assert (out / "summary.md").read_text().startswith("`python benchmarks/device_suite.py --dry-run")
    with tarfile.open(tmp_path / "suite.tar.gz") as tar:
        assert "device_suite/summary.json" in tar.getnames()
        # the table ran with a checkpoint saved every round: its points, ended, are packed
        kept = {n: tar.extractfile(n).read() for n in tar.getnames()
                if n.startswith("device_suite/checkpoints/ifca-figure3b/") and n.endswith(".npz")}
    assert kept

    # the next run resumes from the archive: the sweep part is kept, the table resumes from
    # its checkpoints (every point ended: none is run again) and gives the same rows
    res = suite(tmp_path, "--parts", "sweep", "ifca-figure3b", "--resume-from",
                str(tmp_path / "suite.tar.gz"), "--out-as", "out2")
    assert res.returncode == 0, res.stdout + res.stderr
    out2 = tmp_path / "out2"
    status = {r["part"]: r for r in json.loads((out2 / "summary.json").read_text())["parts"]}
    assert status["sweep"]["status"] == "ok" and "--resume-from" in status["sweep"]["reason"]
    assert status["ifca-figure3b"]["status"] == "ok", status["ifca-figure3b"]
    assert "--checkpoint" in (out2 / "ifca-figure3b.txt").read_text().splitlines()[0]
    for name, before in kept.items():    # not saved again: the points were not rerun
        assert (out2 / name.removeprefix("device_suite/")).read_bytes() == before, name
    again = json.loads((out2 / "ifca" / "figure3b.json").read_text())
    drop = lambda rows: [{k: v for k, v in r.items() if not k.endswith("wall_s")} for r in rows]
    assert drop(again["rows"]) == drop(record["rows"])


def test_a_table_with_a_full_run_in_done_is_skipped(tmp_path):
    tiny_mnist(tmp_path / "data")
    done = tmp_path / "done" / "ifca"
    done.mkdir(parents=True)
    (done / "table1.json").write_text(json.dumps({"table": "ifca-table1", "quick": False}))
    res = suite(tmp_path, "--parts", "ifca-table1", "--done", str(tmp_path / "done"), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    status = {r["part"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())["parts"]}
    assert status["ifca-table1"]["status"] == "skipped"
    assert "full run" in status["ifca-table1"]["reason"]


def test_prepare_data_refuses_a_missing_source(tmp_path):
    res = subprocess.run([sys.executable, "benchmarks/device_suite.py", "--prepare-data",
                          "--source", str(tmp_path), "--data-dir", str(tmp_path / "d")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})   # as on a device: no install
    assert res.returncode != 0 and "not found under" in res.stderr
