"""benchmarks/threshold_table1.py: result files written by ``table`` are read back by
``--combine`` (mean +- std over seeds), and mixed settings or disagreeing seeds are refused."""

import importlib.util
import pathlib
import sys

import pytest

_PATH = pathlib.Path(__file__).parents[2] / "benchmarks" / "threshold_table1.py"
_spec = importlib.util.spec_from_file_location("threshold_table1", _PATH)
table1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table1)


def _write(tmp_path, monkeypatch, name, seeds, acc, argv=()):
    """A result file for ``seeds`` where every method scores ``acc[i]`` on seed i (rotation)
    and ``acc[i] + 1`` (private label)."""
    argv = ["--seeds", str(len(seeds)), "--first-seed", str(seeds[0]), *argv]
    monkeypatch.setattr(sys, "argv", ["threshold_table1.py", *argv])
    args = table1.make_parser().parse_args(argv)
    results = {task: {m: ([a + off for a in acc], [0.5] * len(seeds), args.rounds)
                      for m in table1.METHODS}
               for task, off in (("rotation", 0.0), ("label", 1.0))}
    miscls = {"rotation": [0.0] * len(seeds)}
    path = tmp_path / name
    path.write_text(table1.table(results, {}, 1.0, args, seeds, miscls))
    return str(path)


def _combined(paths):
    return dict(line.split(": ", 1) for line in table1.combine(paths)[1])


def test_combine_one_seed_files(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "s0.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "s1.md", [1], [90.0])
    out = _combined([a, b])
    assert out["Rotation, FC"] == "85.0 ± 5.0 over seeds [0, 1]"
    assert out["Private label, GT (oracle)"] == "86.0 ± 5.0 over seeds [0, 1]"
    assert len(out) == 2 * len(table1.METHODS)


def test_combine_reads_per_seed_lines_of_a_several_seed_file(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "s01.md", [0, 1], [70.0, 80.0])
    b = _write(tmp_path, monkeypatch, "s2.md", [2], [90.0])
    out = _combined([a, b])
    assert out["Rotation, IFCA"] == "80.0 ± 8.2 over seeds [0, 1, 2]"
    assert out["Private label, Local"] == "81.0 ± 8.2 over seeds [0, 1, 2]"


def test_combine_accepts_a_seed_repeated_with_the_same_value(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "s01.md", [0, 1], [70.0, 80.0])
    b = _write(tmp_path, monkeypatch, "s1.md", [1], [80.0])
    out = _combined([a, b])
    assert out["Rotation, KNN"] == "75.0 ± 5.0 over seeds [0, 1]"


def test_combine_refuses_different_settings(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "mlp.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "softmax.md", [1], [90.0], argv=["--hidden", "0"])
    with pytest.raises(SystemExit, match="different settings"):
        table1.combine([a, b])


def test_combine_refuses_a_seed_with_two_values(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "a.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "b.md", [0], [81.0])
    with pytest.raises(SystemExit, match="seed 0"):
        table1.combine([a, b])


def test_main_combine_writes_the_lines_and_refuses_its_own_output(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "s0.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "s1.md", [1], [90.0])
    out = tmp_path / "combined.md"
    table1.main(["--combine", a, b, "--out", str(out)])
    text = out.read_text()
    assert "- Rotation, FC: 85.0 ± 5.0 over seeds [0, 1]" in text
    assert "Setting: MLP 784-200-10, SGD lr 0.1," in text
    with pytest.raises(SystemExit, match="not a per-run result file"):
        table1.combine([a, str(out)])
