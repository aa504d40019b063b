"""Resuming runs: the checkpoint cadence (seconds or rounds) bounds the work an interrupt
loses, a run resumed from it ends as the uninterrupted one, `compare` keeps an ended
algorithm's result and resumes the next, and an output the command did not write is
refused in one line. (Sweeps: tests/test_sweep_resume.py; processes killed with SIGKILL:
tests/test_kill_resume.py.)"""

import json
import random

import jax
import numpy as np
import pytest

from fedclust_jax import checkpoint, progress
from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.cli import main
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import run_rounds
from fedclust_jax.models.registry import build_model
from fedclust_jax.progress import Cadence, ChunkSchedule, RunInterrupted

TINY = {"num_clients": 8, "samples_per_client": 10, "test_samples_per_client": 5, "dim": 4}


@pytest.mark.parametrize("text, seconds, rounds", [("60s", 60.0, None), ("0.5s", 0.5, None),
                                                   ("50r", None, 50), (" 2R ", None, 2)])
def test_cadence_reads_seconds_or_rounds(text, seconds, rounds):
    c = Cadence.parse(text)
    assert (c.seconds, c.rounds) == (seconds, rounds)


@pytest.mark.parametrize("text", ["60", "r", "0r", "-1s", "1.5r", "abc", "nans", "infs"])
def test_a_bad_cadence_is_one_line(text):
    with pytest.raises(ValueError) as e:
        Cadence.parse(text)
    assert "--checkpoint-every" in str(e.value) and "\n" not in str(e.value)


def interrupt_at(monkeypatch, when):
    """Progress.update raises KeyboardInterrupt once ``when(label, done)`` holds (after a
    chunk of the run or call with that progress label)."""
    real = progress.Progress.update

    def update(self, done, extra=""):
        if when(self.label, done):
            raise KeyboardInterrupt
        return real(self, done, extra)
    monkeypatch.setattr(progress.Progress, "update", update)


def test_an_interrupt_between_chunks_saves_the_last_chunk_and_resumes_exactly(tmp_path, monkeypatch):
    """Interrupted after random rounds, between chunks, the run writes its last finished
    chunk whatever the cadence ("3r"): nothing is lost and the line says so; resumed, it
    ends where the uninterrupted run ends, bit for bit."""
    data = build_dataset("synthetic-regression", jax.random.key(0), **TINY)
    alg = build_algorithm("ifca", build_model("linear", data), {"num_clusters": 2}, data)
    whole_states, whole = run_rounds(alg, data, jax.random.key(1), rounds=20, progress=False)
    rng = random.Random(3)
    for k in sorted(rng.sample(range(1, 20), 3)):
        path = str(tmp_path / f"ck{k}.npz")
        with monkeypatch.context() as m:
            interrupt_at(m, lambda label, done: done >= k)
            with pytest.raises(RunInterrupted) as e:
                run_rounds(alg, data, jax.random.key(1), rounds=20, progress=False,
                           checkpoint=path, checkpoint_every="3r")
        e = e.value
        assert e.round >= k and e.checkpoint_round == checkpoint.read_meta(path)["rounds_done"]
        assert e.checkpoint_round == e.round and "(no round lost)" in e.line()
        states, history = run_rounds(alg, data, jax.random.key(1), rounds=20, progress=False,
                                     checkpoint=path, checkpoint_every="3r")
        for a, b in zip(jax.tree.leaves(states), jax.tree.leaves(whole_states)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(history["train_loss"], whole["train_loss"])


def test_a_seconds_cadence_leaves_at_most_its_seconds_unsaved():
    """Under a fake clock (3 s of compilation, 0.7 s a round), chunks are cut to the cadence
    of 10 s and a save comes before 10 s of rounds are unsaved, whatever the chunk length
    asked for."""
    for fixed in (None, 1, 40):
        now = [0.0]
        schedule = ChunkSchedule(200, fixed, cadence=Cadence.parse("10s"), clock=lambda: now[0])
        start, saved_at, gaps, lengths = 0, 0.0, [], []
        while start < 200:
            stop = schedule.next_stop(start)
            now[0] += (stop - start) * 0.7 + (3.0 if start == 0 else 0.0)
            lengths.append(stop - start)
            gaps.append(now[0] - saved_at)
            if schedule.save_due(stop):
                schedule.saved()
                saved_at = now[0]
            start = stop
        assert max(gaps) <= 10.0 + 1e-9, (fixed, gaps)
        assert max(lengths[2:]) <= int(10 / 0.7), (fixed, lengths)
        assert schedule.save_due(200)


def test_compare_resumes_the_interrupted_algorithm_and_keeps_the_ended_one(tmp_path, monkeypatch,
                                                                           capsys):
    """Interrupted inside its second algorithm, `compare` has written the first one's result
    to --output; the rerun takes that result from its checkpoint and resumes the second.
    An output it did not write is refused. (The results equal the uninterrupted command's:
    tests/test_kill_resume.py.)"""
    args = ["compare", "--algorithms", "fedavg,ifca", "--data", "num_clients=8", "--data",
            "dim=4", "--rounds", "6"]
    out, ck = str(tmp_path / "r.json"), str(tmp_path / "ck.npz")
    resumable = args + ["--output", out, "--checkpoint", ck, "--checkpoint-every", "2r"]
    with monkeypatch.context() as m:
        interrupt_at(m, lambda label, done: label == "ifca" and done >= 3)
        assert main(resumable) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ifca: interrupted at round ") and "ck-ifca.npz holds round" in err
    assert [r["algorithm"] for r in json.loads((tmp_path / "r.json").read_text())] == ["fedavg"]
    kept = json.loads((tmp_path / "r.json").read_text())[0]
    assert main(resumable) == 0
    err = capsys.readouterr().err
    assert "fedavg: ended in " + str(tmp_path / "ck-fedavg.npz") in err
    assert "ifca: resuming from round " in err
    again = json.loads((tmp_path / "r.json").read_text())
    assert [r["algorithm"] for r in again] == ["fedavg", "ifca"] and again[0] == kept
    (tmp_path / "mine.json").write_text("[]")      # not results: kept, the output beside it
    assert main(args + ["--output", str(tmp_path / "mine.json"), "--checkpoint", ck]) == 1
    err = capsys.readouterr().err
    assert "mine.json is not run / compare results written by fedclust-jax: it is kept" in err
    assert (tmp_path / "mine.json").read_text() == "[]"
    beside = json.loads((tmp_path / "mine-1.json").read_text())
    assert [r["metrics"] for r in beside] == [r["metrics"] for r in again]
    assert main(["run", "--algorithm", "ifca", "--checkpoint-every", "5r"]) == 2
    assert "needs --checkpoint" in capsys.readouterr().err


def test_a_save_that_fails_stops_the_run_in_one_line_and_keeps_the_last_good_file(
        tmp_path, monkeypatch, capsys):
    """The disk fills after the first save: the run stops with exit 1 and one line naming
    the file and the round it still holds; the file is whole."""
    import errno
    real, saves = np.savez, []

    def savez(f, **arrays):
        saves.append(1)
        if len(saves) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(f, **arrays)
    monkeypatch.setattr(np, "savez", savez)
    ck = tmp_path / "ck.npz"
    assert main(["run", "--algorithm", "ifca", "--data", "num_clients=8", "--data", "dim=4",
                 "--rounds", "6", "--checkpoint", str(ck), "--checkpoint-every", "2r",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"fedclust-jax: error: checkpoint {ck}")
    assert "No space left on device" in err and "still holds round 2" in err
    monkeypatch.undo()
    assert checkpoint.read_meta(str(ck))["rounds_done"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz"]
