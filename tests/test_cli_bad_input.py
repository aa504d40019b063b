"""Every bad value stops with exit code 2 and one line on stderr, no traceback, before any
data is built or any round runs."""

import json

import pytest

from fedclust_jax import experiment
from fedclust_jax.cli import main

TINY = ["--data", "num_clients=8", "--data", "samples_per_client=10", "--data", "dim=5",
        "--rounds", "2", "--no-progress"]


@pytest.fixture
def no_compute(monkeypatch):
    """Fails the test if data is built or an algorithm runs."""
    def refuse(*a, **k):
        raise AssertionError("compute started before the bad value was caught")
    monkeypatch.setattr(experiment, "build_dataset", refuse)
    monkeypatch.setattr(experiment, "run_experiment", refuse)


def one_line_error(capsys, *words):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("fedclust-jax")
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.mark.parametrize("argv, words", [
    (["--set", "lr=abc"], ["lr", "'abc'", "not a number", "> 0"]),
    (["--data", "num_clients=abc"], ["num_clients", "'abc'", "integer >= 1"]),
    (["--lr", "inf"], ["lr", "inf", "finite"]),
    (["--lr", "nan"], ["lr", "nan", "finite"]),
    (["--lr", "-1"], ["lr = -1", "> 0"]),
    (["--lr", "0"], ["lr = 0", "> 0"]),
    (["--rounds", "-1"], ["rounds", "in [0, "]),
    (["--rounds", "ten"], ["rounds", "'ten'", "integer"]),
    (["--rounds", "5000000000"], ["rounds", "too large", "32-bit", "at most 2147483646"]),
    (["--rounds", "2147483647"], ["rounds", "too large"]),
    (["--seed", "1.5"], ["seed", "integer"]),
    (["--restarts", "0"], ["restarts", ">= 1"]),
    (["--data", "num_clients=0"], ["num_clients", ">= 1"]),
    (["--data", "num_clients=-4"], ["num_clients", ">= 1"]),
    (["--data", "noise_std=inf"], ["noise_std", "finite"]),
    (["--data", "bogus=1"], ["bogus", "accepted"]),
    (["--batch-size", "0"], ["batch_size", ">= 1"]),
    (["--local-steps", "0"], ["steps", ">= 1"]),
    (["--clusters", "2.5"], ["num_clusters", "integer"]),
    (["--participation", "1.5"], ["participation", "(0, 1]"]),
    (["--participation", "nan"], ["participation", "finite"]),
    (["--chunk", "0"], ["chunk", ">= 1"]),
    (["--set", "weight_sharing=maybe"], ["weight_sharing", "true or false"]),
    (["--set", "momentum=1e400"], ["momentum", "finite"]),
    (["--set", "ifca.nonsense=1"], ["nonsense"]),
    (["--set", "lr"], ["KEY=VALUE"]),
    (["--model", "mlp", "--model-arg", "hidden=abc"], ["hidden", "list"]),
    (["--model", "nope"], ["unknown model 'nope'"]),
    (["--devices", "0"], ["devices", ">= 1"]),
    (["--devices", "4096"], ["--devices 4096", "device(s) here"]),
    (["--algorithm", "nope"], ["unknown algorithm 'nope'"]),
])
def test_run_rejects_bad_values(argv, words, capsys, no_compute):
    if "--algorithm" not in argv:
        argv = ["--algorithm", "ifca"] + argv
    assert main(["run"] + TINY + argv) == 2
    one_line_error(capsys, *words)


@pytest.mark.parametrize("argv, words", [
    (["--dataset", "nope"], ["unknown dataset 'nope'"]),
    (["--dataset", "threshold-blobs"], ["threshold-blobs", "threshold_clustering"]),
    (["--preset", "rotated-digits", "--dataset", "femnist"], ["--preset", "femnist"]),
    (["--algorithms", ","], ["--algorithms"]),
    (["--option", "III"], ["invalid choice"]),
    (["--rounds"], ["expected one argument"]),
])
def test_compare_rejects_bad_values(argv, words, capsys, no_compute):
    with_exit = argv in (["--option", "III"], ["--rounds"])
    if with_exit:  # argparse's own errors exit 2 themselves, on one line
        with pytest.raises(SystemExit) as e:
            main(["compare"] + argv)
        assert e.value.code == 2
    else:
        assert main(["compare"] + argv) == 2
    one_line_error(capsys, *words)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, words", [
    ('dataset = "gaussian-mixture"\n[algorithms.ifca]\nlr = "0.1"\n', ["lr", "the string '0.1'", "number"]),
    ('rounds = "ten"\n[algorithms.ifca]\n', ["rounds", "'ten'", "integer"]),
    ('rounds = 2.5\n[algorithms.ifca]\n', ["rounds", "integer"]),
    ('seed = true\n[algorithms.ifca]\n', ["seed", "boolean"]),
    ('[data]\nnum_clients = "many"\n[algorithms.ifca]\n', ["num_clients", "integer"]),
    ('[data]\nnum_clients = 0\n[algorithms.ifca]\n', ["num_clients", ">= 1"]),
    ('[algorithms.ifca]\nweight_sharing = "yes"\n', ["weight_sharing", "true or false"]),
    ('[algorithms.ifca]\nnum_clusters = 2.0e0\nparticipation = 2\n', ["participation", "(0, 1]"]),
    ('[algorithms.ifca]\noption = 2\n', ["option", "string"]),
    ('[algorithms.ifca]\nrestarts = 0\n', ["restarts", ">= 1"]),
    ('[algorithms]\nifca = 3\n', ["algorithms.ifca", "table"]),
    ('data = 3\n[algorithms.ifca]\n', ["data", "table"]),
    ('epochs = 3\n[algorithms.ifca]\n', ["unknown study key", "epochs"]),
    ('rounds = \n', ["not valid TOML"]),
])
def test_study_file_values_are_checked(tmp_path, text, words, capsys, no_compute):
    path = write(tmp_path, "study.toml", text)
    assert main(["run", "--config", path, "--no-progress"]) == 2
    one_line_error(capsys, *words)


def test_json_study_checked(tmp_path, capsys, no_compute):
    path = write(tmp_path, "s.json", json.dumps({"algorithms": {"ifca": {"lr": float("inf")}}}))
    assert main(["run", "--config", path]) == 2
    one_line_error(capsys, "lr", "finite")
    path = write(tmp_path, "l.json", "[1, 2]")
    assert main(["run", "--config", path]) == 2
    one_line_error(capsys, "must hold a table")


def test_run_needs_one_algorithm_of_a_study(tmp_path, capsys, no_compute):
    path = write(tmp_path, "two.toml", "[algorithms.ifca]\n[algorithms.fedavg]\n")
    assert main(["run", "--config", path]) == 2
    one_line_error(capsys, "--algorithm", "compare")


@pytest.mark.parametrize("flag,example", [("--output", "results.json"), ("--checkpoint", "ck.npz")])
def test_unwritable_paths_stop_before_compute(tmp_path, flag, example, capsys, no_compute):
    assert main(["run", "--algorithm", "ifca", flag, str(tmp_path)] + TINY) == 2
    one_line_error(capsys, flag, "is a folder", "e.g. " + repr(str(tmp_path / example)))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["run", "--algorithm", "ifca", flag, str(blocker / "x" / "r.json")] + TINY) == 2
    one_line_error(capsys, flag, f"{str(blocker)!r} is a file, not a folder")


def test_batch_larger_than_every_client_stops_before_rounds(capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("rounds started")
    monkeypatch.setattr(experiment, "run_experiment", refuse)
    assert main(["run", "--algorithm", "ifca", "--batch-size", "100000"] + TINY) == 2
    one_line_error(capsys, "batch_size 100000", "10 examples", "at most 10")


def test_corrupt_data_files_are_one_line(tmp_path, capsys):
    leaf = tmp_path / "femnist" / "train"
    leaf.mkdir(parents=True)
    (leaf / "all.json").write_text("{not json")
    (tmp_path / "femnist" / "test").mkdir()
    (tmp_path / "femnist" / "test" / "all.json").write_text("{not json")
    assert main(["run", "--dataset", "femnist", "--algorithm", "fedavg", "--data-dir",
                 str(tmp_path), "--rounds", "1", "--no-progress"]) == 2
    one_line_error(capsys, "femnist")
    assert main(["run", "--dataset", "femnist", "--algorithm", "fedavg", "--data-dir",
                 str(tmp_path / "missing"), "--rounds", "1", "--no-progress"]) == 2
    one_line_error(capsys, "femnist", "not found")


def test_restarts_that_cannot_fit_stop_before_rounds(capsys, monkeypatch):
    """``--restarts 100000`` (the default synthetic data) is refused by the memory pre-check
    before anything is compiled: exit code 2 and one line naming the need and the advice.
    The free memory is pinned at 8 GiB, so the answer does not depend on the machine."""
    from fedclust_jax.core import memory

    def refuse(*a, **k):
        raise AssertionError("rounds started")
    monkeypatch.setattr(experiment, "run_rounds", refuse)
    monkeypatch.setattr(memory, "available_bytes", lambda device=None: 8 * 2**30)
    assert main(["run", "--algorithm", "ifca", "--restarts", "100000", "--rounds", "2",
                 "--no-progress"]) == 2
    one_line_error(capsys, "needs about", "8.00 GB is available", "fewer --restarts",
                   "--chunk")


@pytest.mark.parametrize("content", [b"\x93NUMPY random bytes " * 50, b"", b"PK\x03\x04 not a zip"])
def test_a_checkpoint_that_is_not_ours_is_one_line(tmp_path, content, capsys, no_compute):
    """Random bytes (numpy would offer to unpickle them) or an empty file: one line that
    says the file is not a fedclust_jax checkpoint and how to start afresh."""
    ck = tmp_path / "ck.npz"
    ck.write_bytes(content)
    assert main(["run", "--algorithm", "ifca", "--checkpoint", str(ck)] + TINY) == 2
    err = one_line_error(capsys, "not a fedclust_jax checkpoint", "remove it",
                         "another path")
    assert "pickle" not in err


def test_an_npz_of_other_arrays_is_not_a_checkpoint(tmp_path, capsys, no_compute):
    import numpy as np
    ck = tmp_path / "ck.npz"
    np.savez(ck, weights=np.ones(3))
    assert main(["run", "--algorithm", "ifca", "--checkpoint", str(ck)] + TINY) == 2
    one_line_error(capsys, "not a fedclust_jax checkpoint", "without its header")
    np.savez(ck, meta=np.array([{"rounds_done": 1}], dtype=object))
    assert main(["run", "--algorithm", "ifca", "--checkpoint", str(ck)] + TINY) == 2
    assert "pickle" not in one_line_error(capsys, "not a fedclust_jax checkpoint")


@pytest.mark.parametrize("argv, words", [
    (["--local-steps", "3000000000"], ["steps", "too large", "2147483647", "32-bit"]),
    (["--seed", "5000000000"], ["seed", "too large", "4294967295"]),
    (["--data", "num_clients=3000000000"], ["num_clients", "too large"]),
    (["--model", "mlp", "--model-arg", "hidden=[3000000000]"], ["hidden", "entry 3000000000", "at most 2147483647"]),
    (["--restarts", "3000000000"], ["restarts", "too large"]),
    (["--eval-every", "3000000000"], ["eval_every", "too large"]),
    (["--data-dir", "/nowhere"], ["--data-dir", "reads no files"]),
])
def test_integers_that_reach_int32_and_stray_flags_stop_early(argv, words, capsys, no_compute):
    """Every integer that reaches a 32-bit count is bounded before compute."""
    assert main(["run", "--algorithm", "ifca"] + TINY + argv) == 2
    one_line_error(capsys, *words)


def test_participation_that_rounds_to_no_client_stops_before_rounds(capsys, monkeypatch):
    """0.001 of 8 clients is no client a round: refused, not clamped to one."""
    monkeypatch.setattr(experiment, "run_rounds", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("rounds started")))
    assert main(["run", "--algorithm", "fedavg", "--participation", "0.001"] + TINY) == 2
    one_line_error(capsys, "participation 0.001 of 8 clients", "0 participants",
                   "at least 0.0625")


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text(""), ["is empty", "dataset", "algorithms"]),
    (lambda p: p.write_text('dataset = "gaussian-mixture"\n'), ["names no algorithm",
                                                                 "[algorithms.fedavg]"]),
])
def test_empty_or_algorithmless_study_files(tmp_path, make, words, capsys, no_compute):
    path = tmp_path / "study.toml"
    make(path)
    for command in ("run", "compare"):
        assert main([command, "--config", str(path)]) == 2
        one_line_error(capsys, *words)


@pytest.mark.parametrize("name, make, words", [
    ("notes.txt", lambda p: p.write_text("x = 1\n"), ["not a Python file (.py)"]),
    ("folder", lambda p: p.mkdir(), ["is a folder"]),
    ("missing.py", lambda p: None, ["does not exist"]),
    ("broken.py", lambda p: p.write_text("def f(:\n"), ["failed to import", "SyntaxError"]),
])
def test_bad_plugins_are_one_line(tmp_path, name, make, words, capsys, monkeypatch):
    path = tmp_path / name
    make(path)
    assert main(["--plugin", str(path), "list"]) == 2
    one_line_error(capsys, *words)
    monkeypatch.setenv("FEDCLUST_PLUGINS", str(path))    # the same door as --plugin
    assert main(["list"]) == 2
    one_line_error(capsys, *words)


def test_plugin_anywhere_on_the_line_and_import_errors_name_the_line(tmp_path, capsys):
    """--plugin after the command loads the file too; an import error names its line."""
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("x = 1\ny = undefined_name\n")
    assert main(["list", "--plugin", str(bad)]) == 2
    one_line_error(capsys, "failed to import at line 2", "NameError")
    assert main(["list", "--plugin"]) == 2
    one_line_error(capsys, "--plugin needs the path of a .py file")
