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
    return dict(line.split(": ", 1) for line in table1.combine(paths).lines)


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


def test_combine_refuses_a_seed_with_two_values_and_lists_every_one(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "a.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "b.md", [0], [81.0])
    with pytest.raises(SystemExit) as e:
        table1.combine([a, b])
    lines = str(e.value.code).splitlines()
    n = 2 * len(table1.METHODS)
    assert lines[0].startswith(f"{n} of the {n} values found in more than one file differ, "
                               "not combined (--first-wins")
    assert f"rotation FC seed 0: 80.0 in {a}, 81.0 in {b}" in lines[1:]
    assert len(lines) == n + 1


def test_first_wins_uses_the_first_value_and_the_file_lists_the_differences(tmp_path,
                                                                            monkeypatch):
    a = _write(tmp_path, monkeypatch, "s0.md", [0], [80.0])
    b = _write(tmp_path, monkeypatch, "s01.md", [0, 1], [81.0, 90.0])
    out = tmp_path / "combined.md"
    table1.main(["--combine", a, b, "--first-wins", "--out", str(out)])
    text = out.read_text()
    n = 2 * len(table1.METHODS)
    assert "- Rotation, FC: 85.0 ± 5.0 over seeds [0, 1]" in text
    assert (f"{n} of the {n} values found in more than one file differ; the first file's "
            "value is used:") in text
    assert f"- rotation FC seed 0: 80.0 in {a}, 81.0 in {b}" in text


def test_combine_counts_the_agreeing_shared_values(tmp_path, monkeypatch):
    a = _write(tmp_path, monkeypatch, "s01.md", [0, 1], [70.0, 80.0])
    b = _write(tmp_path, monkeypatch, "s1.md", [1], [80.0])
    c = _write(tmp_path, monkeypatch, "s0.md", [0], [71.0])
    with pytest.raises(SystemExit) as e:
        table1.combine([a, b, c])
    n = 2 * len(table1.METHODS)
    assert str(e.value.code).startswith(f"{n} of the {2 * n} values found in more than one file")


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


def _record(task, method, acc, miscl=None, rounds=200):
    setting = dict(hidden=0, lr=0.1, batch_size=50, rounds=rounds, fc_rounds=None, tc_iters=10,
                   fc_groups=16, tc_method="gram")
    return dict(task=task, method=method, seeds=[0], rounds=rounds, acc=[acc], loss=[0.5],
                misclustering=miscl, seconds=42.0, cpu_seconds=40.0,
                uptime_before="12:00:00 up 1:00,  0 user,  load average: 1.00, 2.00, 3.00",
                setting=setting, machine="x86_64, JAX 0 on cpu",
                command="python benchmarks/threshold_table1.py --seeds 1 --jsonl R.jsonl")


def test_combine_jsonl_of_two_records_gives_the_table(tmp_path):
    import json
    path = tmp_path / "t1.jsonl"
    path.write_text(json.dumps(_record("label", "IFCA", 88.25, [0.0])) + "\n"
                    + json.dumps(_record("rotation", "FC", 87.0)) + "\n")
    notes = tmp_path / "notes.md"
    notes.write_text("## Notes\n\nhand-written\n")
    out = tmp_path / "t1.md"
    table1.main(["--combine", str(path), "--notes-file", str(notes), "--out", str(out)])
    lines = out.read_text().splitlines()
    assert lines[0] == (f"Generated by `python benchmarks/threshold_table1.py --combine {path} "
                        f"--notes-file {notes} --out {out}`.")
    assert ("| IFCA | not run | 54.6 | not run | 0.588 | 88.2 | 65.4 | 0.500 | 0.531 |"
            in lines)
    assert ("| FC (Federated-Clustering) | 87.0 | 75.4 | 0.500 | 0.475 | not run | 77.0 | "
            "not run | 0.468 |" in lines)
    assert any(line.startswith("IFCA misclustering") and line.endswith("Private label 0.000.")
               for line in lines)
    assert "| FC (rotation) | 42 | 40 | 1.00, 2.00, 3.00 |" in lines
    assert "| IFCA (label) | 42 | 40 | 1.00, 2.00, 3.00 |" in lines
    assert "Command: `python benchmarks/threshold_table1.py --seeds 1 --jsonl R.jsonl`." in \
        " ".join(lines)
    assert lines[-1] == "hand-written"


def test_combine_jsonl_refuses_records_of_different_settings(tmp_path):
    import json
    path = tmp_path / "t1.jsonl"
    path.write_text(json.dumps(_record("rotation", "FC", 87.0)) + "\n"
                    + json.dumps(_record("rotation", "IFCA", 80.0, [0.25], rounds=300)) + "\n")
    with pytest.raises(SystemExit, match="different settings"):
        table1.combine_jsonl([str(path)], [])


def test_the_command_line_keeps_notes_file_and_drops_note_text():
    assert table1.without_notes(["--seeds", "1", "--note", "a b", "--notes-file", "N.md",
                                 "--note=c", "--out", "F.md"]) == [
        "--seeds", "1", "--notes-file", "N.md", "--out", "F.md"]
