"""Ctrl-C (SIGINT) and SIGTERM: one line on stderr saying where the run stopped and what
its checkpoint holds, exit code 130, no traceback. The subprocess tests interrupt a real
run of a tiny study; the in-process ones cover the runner's ``RunInterrupted`` and an
interrupt before the first round."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from fedclust_jax import experiment
from fedclust_jax.checkpoint import read_meta
from fedclust_jax.cli import main
from fedclust_jax.progress import RunInterrupted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 1_000_000
STUDY = f"""dataset = "synthetic-regression"
rounds = {ROUNDS}
rounds_per_chunk = 20
data = {{num_clients = 8, dim = 5}}
[algorithms.ifca]
"""


def interrupted_run(tmp_path, sig, extra=()):
    """Starts `run` of a study of a million rounds, sends ``sig`` once the first progress
    line is out (the first chunk of 20 rounds done) and returns (exit code, stderr)."""
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    # SIGINT as in a terminal (a background job of a script would inherit it ignored)
    proc = subprocess.Popen([sys.executable, "-m", "fedclust_jax", "run", "--config", str(study),
                             *extra], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    guard = threading.Timer(120, proc.kill)   # a hung run fails the test, not the suite
    guard.start()
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if " rounds " in line:             # a progress line: rounds are running
                break
        assert lines and " rounds " in lines[-1], "".join(lines)
        time.sleep(1.0)                        # into the following chunks, as a user would
        proc.send_signal(sig)
        out, rest = proc.communicate(timeout=100)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines) + rest


LINE = re.compile(r"^ifca: interrupted(?: at round (\d+) of (\d+))?; (.*)$")


def last_line(err: str) -> re.Match:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    m = LINE.match(last)
    assert m, err
    if m.group(2) is not None:
        assert int(m.group(2)) == ROUNDS
    return m


def test_sigint_saves_the_last_finished_chunk_and_says_what_the_file_holds(tmp_path):
    """Saved every 40 rounds (chunks of 20): the interrupt writes the last finished chunk, so
    the file holds the rounds done less at most the chunk in flight, whatever the cadence."""
    code, err = interrupted_run(tmp_path, signal.SIGINT, ["--checkpoint", "ck.npz",
                                                          "--checkpoint-every", "40r"])
    assert code == 130, err
    m = last_line(err)
    held = re.fullmatch(r"ck\.npz holds round (\d+) \((no|\d+) rounds? lost\); rerun the same "
                        r"command to resume", m.group(3))
    assert held, err
    saved = read_meta(str(tmp_path / "ck.npz"))["rounds_done"]
    assert int(held.group(1)) == saved and saved % 20 == 0 and saved >= 20
    lost = 0 if held.group(2) == "no" else int(held.group(2))
    assert lost <= 20                          # at most one chunk (its copy cut short)
    if m.group(1) is not None:                 # the runner says where it stopped
        assert int(m.group(1)) == saved + lost


def test_sigterm_without_a_checkpoint_says_so(tmp_path):
    code, err = interrupted_run(tmp_path, signal.SIGTERM)
    assert code == 130, err
    assert last_line(err).group(3).startswith("no checkpoint was asked for (add --checkpoint")


TINY = ["--data", "num_clients=8", "--data", "dim=5", "--rounds", "3", "--no-progress"]


def test_an_interrupt_before_the_first_round_is_one_line(monkeypatch, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(experiment, "load_study_data", interrupted)
    assert main(["run", "--algorithm", "ifca"] + TINY) == 130
    err = capsys.readouterr().err.strip()
    assert err == ("fedclust-jax: interrupted before the first round; nothing was saved; "
                   "rerun the same command to start again")


@pytest.mark.parametrize("checkpoint, held, words", [
    ("ck.npz", 40, "ck.npz holds round 40 (17 rounds lost); rerun the same command to resume"),
    ("ck.npz", None, "ck.npz holds no round yet (57 rounds lost); rerun the same command to "
                     "start again"),
    (None, None, "no checkpoint was asked for"),
])
def test_the_runners_interrupt_is_printed_as_its_line(monkeypatch, capsys, checkpoint, held,
                                                      words, tmp_path):
    monkeypatch.chdir(tmp_path)
    def interrupted(study, **kwargs):
        raise RunInterrupted("ifca", 57, 300, checkpoint, held)
    monkeypatch.setattr(experiment, "run_study", interrupted)
    assert main(["run", "--algorithm", "ifca"] + TINY) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("ifca: interrupted at round 57 of 300; " + words), err
    assert len(err.splitlines()) == 1


def test_signal_handlers_are_restored(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    assert main(["list"]) == 0
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_interrupt_swallowed_by_a_gc_callback_stops_at_the_next_report(monkeypatch, capsys):
    """A signal landing in a garbage-collection callback is printed by Python as "Exception
    ignored" and lost; the command notes it and the next progress report raises it."""
    import gc
    from fedclust_jax import progress

    def callback(phase, info):
        raise KeyboardInterrupt
    real_update = progress.Progress.update

    def update(self, done, extra=""):
        gc.callbacks.append(callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(callback)
        return real_update(self, done, extra)
    monkeypatch.setattr(progress.Progress, "update", update)
    assert main(["run", "--algorithm", "ifca"] + TINY) == 130
    err = capsys.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err
    assert re.fullmatch(r"ifca: interrupted(?: at round \d of 3)?; no checkpoint was asked for "
                        r"\(add --checkpoint FILE to make a run resumable\)", err.strip()), err


def test_the_checkpoint_file_says_which_round_it_holds(monkeypatch, capsys, tmp_path):
    """An interrupt inside the save, after the file was renamed into place: the runner
    still says the previous round; the line gives the file's round (and at least as many
    rounds completed)."""
    from fedclust_jax import checkpoint
    import jax.numpy as jnp
    monkeypatch.chdir(tmp_path)
    checkpoint.save("ck.npz", {"w": jnp.zeros(2)}, {}, 1000, {})

    def interrupted(study, **kwargs):
        raise RunInterrupted("ifca", 980, 5000, "ck.npz", 980)
    monkeypatch.setattr(experiment, "run_study", interrupted)
    assert main(["run", "--algorithm", "ifca"] + TINY) == 130
    assert capsys.readouterr().err.strip() == (
        "ifca: interrupted at round 1000 of 5000; ck.npz holds round 1000 (no round lost); "
        "rerun the same command to resume")
