"""A stop is a save: Ctrl-C or SIGTERM writes the state of the last finished chunk of rounds
before the command exits, whatever the cadence; a second signal waits for that write; a
SIGKILL during it leaves the previous file whole. Subprocess runs of a tiny study of a
million rounds (chunks of 20), interrupted once rounds are running."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from fedclust_jax import checkpoint
from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import run_rounds
from fedclust_jax.models.registry import build_model
from fedclust_jax.progress import RunInterrupted

STUDY = """dataset = "synthetic-regression"
rounds = 1000000
rounds_per_chunk = 20
data = {num_clients = 8, dim = 5}
[algorithms.ifca]
"""

# Slows every checkpoint write down and says when one starts, so that a test can act
# during it (the default cadence, 60 s, leaves the interrupt's write the first one).
SLOW_SAVE = """import os, sys, time
from fedclust_jax import checkpoint

_write = checkpoint._write_atomic

def _slowly(path, write, what):
    def slow(f):
        print("test: a save starts", file=sys.stderr, flush=True)
        write(f)
        time.sleep(float(os.environ.get("SLOW_SAVE_S", "0")))
    _write(path, slow, what)

checkpoint._write_atomic = _slowly
"""


class Run:
    """`fedclust-jax run --config study.toml --checkpoint ck.npz` in ``tmp_path``."""

    def __init__(self, tmp_path, slow_save_s: float = 0.0, extra=()):
        (tmp_path / "study.toml").write_text(STUDY)
        (tmp_path / "slow_save.py").write_text(SLOW_SAVE)
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
               "SLOW_SAVE_S": str(slow_save_s)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fedclust_jax", "run", "--config", "study.toml",
             "--checkpoint", "ck.npz", "--plugin", "slow_save.py", *extra],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.guard = threading.Timer(120, self.proc.kill)   # a hung run fails the test only
        self.guard.start()
        self.lines = []

    def wait_for(self, words: str):
        for line in self.proc.stderr:
            self.lines.append(line)
            if words in line:
                return
        raise AssertionError(f"no line with {words!r}:\n" + "".join(self.lines))

    def end(self) -> tuple[int, str]:
        try:
            _, rest = self.proc.communicate(timeout=100)
        finally:
            self.guard.cancel()
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.returncode, "".join(self.lines) + rest


NO_TIMED_SAVE = ("--checkpoint-every", "1000000r")
# An interrupt landing while the finished chunk is copied to the host keeps the chunk before:
# at most one chunk (20 rounds) is lost.
HOLDS = re.compile(r"^ifca: interrupted at round (\d+) of 1000000; ck\.npz holds round (\d+) "
                   r"\((?:no round|20 rounds) lost\); rerun the same command to resume$")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_before_the_first_timed_save_keeps_the_rounds_done(tmp_path, sig):
    """At the default cadence (60 s) nothing is saved in the first seconds; the interrupt
    writes the last finished chunk, says which round, and the rerun resumes from it."""
    run = Run(tmp_path)
    run.wait_for(" rounds ")          # a progress line: the first chunks have run
    time.sleep(1.0)
    run.proc.send_signal(sig)
    code, err = run.end()
    assert code == 130 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    m = HOLDS.match(last)
    assert m and int(m.group(1)) - int(m.group(2)) in (0, 20), err
    held = int(m.group(2))
    assert held >= 1
    assert checkpoint.read_meta(str(tmp_path / "ck.npz"))["rounds_done"] == held
    again = Run(tmp_path)
    again.wait_for("resuming from round")
    assert f"resuming from round {held} of 1000000" in again.lines[-1]
    again.proc.send_signal(signal.SIGINT)
    code, err = again.end()
    assert code == 130, err


def test_a_second_interrupt_waits_for_the_save(tmp_path):
    """Ctrl-C twice: the second lands during the write (slowed to 2 s), which ends; the
    file holds the round the line gives. (No timed save: a cadence of a million rounds.)"""
    run = Run(tmp_path, slow_save_s=2.0, extra=NO_TIMED_SAVE)
    run.wait_for(" rounds ")
    run.proc.send_signal(signal.SIGINT)
    run.wait_for("a save starts")
    run.proc.send_signal(signal.SIGINT)
    code, err = run.end()
    assert code == 130 and "Traceback" not in err, err
    m = HOLDS.match(err.strip().splitlines()[-1])
    assert m, err
    assert checkpoint.read_meta(str(tmp_path / "ck.npz"))["rounds_done"] == int(m.group(2)) >= 20


def test_a_kill_during_the_interrupt_save_leaves_the_previous_file(tmp_path):
    """SIGKILL while the interrupt's write is in flight: the file the run had (here none:
    nothing saved yet) is untouched, no partial file is read as a checkpoint, and the rerun
    starts again."""
    run = Run(tmp_path, slow_save_s=30.0, extra=NO_TIMED_SAVE)
    run.wait_for(" rounds ")
    run.proc.send_signal(signal.SIGINT)
    run.wait_for("a save starts")
    run.proc.kill()
    code, _ = run.end()
    assert code == -signal.SIGKILL
    assert not (tmp_path / "ck.npz").exists()
    again = Run(tmp_path, extra=NO_TIMED_SAVE)
    again.wait_for(" rounds ")
    assert not any("resuming" in line for line in again.lines), again.lines
    again.proc.send_signal(signal.SIGINT)
    code, err = again.end()
    assert code == 130 and HOLDS.match(err.strip().splitlines()[-1]), err


def test_the_interrupt_save_after_a_timed_one_resumes_bit_for_bit(tmp_path, monkeypatch):
    """In process: a cadence save at round 4, an interrupt after round 10; the file holds
    round 10 and the resumed run equals the uninterrupted one exactly."""
    from fedclust_jax import progress
    data = build_dataset("synthetic-regression", jax.random.key(0), num_clients=8, dim=5)
    alg = build_algorithm("ifca", build_model("linear", data), {"num_clusters": 2}, data)
    whole_states, whole = run_rounds(alg, data, jax.random.key(1), rounds=16, progress=False,
                                     rounds_per_chunk=2)
    path = str(tmp_path / "ck.npz")
    real = progress.Progress.update

    def update(self, done, extra=""):
        real(self, done, extra)
        if done >= 10:
            raise KeyboardInterrupt
    monkeypatch.setattr(progress.Progress, "update", update)
    with pytest.raises(RunInterrupted) as e:
        run_rounds(alg, data, jax.random.key(1), rounds=16, progress=False, rounds_per_chunk=2,
                   checkpoint=path, checkpoint_every="4r")
    assert (e.value.round, e.value.checkpoint_round) == (10, 10)
    monkeypatch.setattr(progress.Progress, "update", real)
    states, history = run_rounds(alg, data, jax.random.key(1), rounds=16, progress=False,
                                 rounds_per_chunk=2, checkpoint=path, checkpoint_every="4r")
    for a, b in zip(jax.tree.leaves(states), jax.tree.leaves(whole_states)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(history["train_loss"], whole["train_loss"])


def test_a_signal_during_a_write_waits_for_it(tmp_path):
    """``interrupts_wait``: SIGINT sent inside a write is raised after the file is whole."""
    path = tmp_path / "f.bin"

    def write(f):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        f.write(b"whole")
    with pytest.raises(KeyboardInterrupt):
        checkpoint.write_atomic(str(path), write, "file")
    assert path.read_bytes() == b"whole"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_python_m_reproduce_stops_as_the_command_line_does(tmp_path):
    """`python -m fedclust_jax.reproduce` is `fedclust-jax reproduce`: SIGTERM during a
    table (IFCA Figure 3 (b) at CI size, four seeds, a point each) gives exit 130 and one
    line saying what the checkpoint folder keeps, and the rerun ends from it."""
    cmd = [sys.executable, "-m", "fedclust_jax.reproduce", "ifca-figure3b", "--quick", "--seeds",
           "0", "1", "2", "3", "--out", "out", "--checkpoint", "ck", "--checkpoint-every", "1r"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(120, proc.kill)
    guard.start()
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if " rounds " in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=100)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == 130 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.endswith("rerun the same command to resume") and "ck" in last, err
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and (tmp_path / "out" / "figure3b.md").exists(), again.stderr


def test_an_interrupted_table_names_its_checkpoint_folder():
    """Between a table's runs the line says what --checkpoint keeps, or how to keep it."""
    from fedclust_jax.cli import RunState, interrupt_line
    state = RunState()
    state.command = "reproduce"
    assert interrupt_line(KeyboardInterrupt(), state) == (
        "fedclust-jax: reproduce interrupted outside a run's rounds; no checkpoint was asked "
        "for (add --checkpoint DIR to make a table resumable)")
    state.sweep_checkpoint = "ck"
    assert interrupt_line(KeyboardInterrupt(), state) == (
        "fedclust-jax: reproduce interrupted outside a run's rounds; ck keeps every point that "
        "ended; rerun the same command to resume")
