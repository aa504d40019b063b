"""Two processes on localhost (``jax.distributed.initialize``, CPU collectives through gloo)
run one IFCA experiment with the clients split over both processes' devices, and match the
single-process run, also when resumed from their checkpoint files (one per process, each
holding that process's shards). Each process is bounded by a timeout, so a hang fails the
test."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from fedclust_jax.experiment import ExperimentConfig, run_experiment

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from multiprocess_run import CONFIG  # noqa: E402

TIMEOUT_S = 180  # generous: the 2-core test machine is often shared


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(out_path, num_processes=2, rounds=None):
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()  # one CPU device
                                if "device_count" not in f)                    # per process
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "multiprocess_run.py"), str(port),
                               str(num_processes), str(i), out_path]
                              + ([] if rounds is None else [str(rounds)]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(num_processes)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"multi-process run did not finish in {TIMEOUT_S} s")
    return [p.returncode for p in procs], logs


@pytest.fixture(scope="module")
def one():
    """The uninterrupted single-process run."""
    return run_experiment(ExperimentConfig(**CONFIG), progress=False)


def newest(files):
    """(path, arrays) of the file with the most rounds among a process's two slots."""
    best = None
    for f in files:
        if os.path.exists(f):
            with np.load(f) as ck:
                arrays = {k: ck[k] for k in ck.files}
            done = json.loads(bytes(arrays["meta"]).decode())["rounds_done"]
            if best is None or done > best[0]:
                best = (done, f, arrays)
    return best[1], best[2]


def test_two_processes_equal_one_and_resume_from_their_checkpoint(tmp_path, one):
    """Two processes run rounds 1-2 and match one process; each saved its own shards of the
    states (no gather) in its own file. Two new processes resume from those files (each
    reads only its own) and end where one uninterrupted process ends. Each file's history
    is scaled by 10 before resuming, so the resumed run's first two rounds show that the
    files were read rather than the rounds rerun. (One test for both: each pair of
    processes costs a JAX start and a compile.)"""
    out_path = str(tmp_path / "two.json")
    codes, logs = run_processes(out_path, rounds=2)
    assert codes == [0, 0], "\n".join(log[-2000:] for log in logs)
    first = json.load(open(out_path))
    assert first["process_count"] == 2 and first["device_count"] == 2
    want = np.asarray(one["history"]["train_loss"])
    np.testing.assert_allclose(first["history"]["train_loss"], want[:2], rtol=1e-5)
    stem = out_path + ".ckpt"
    assert not os.path.exists(stem + ".npz")
    n, r = CONFIG["data"]["num_clients"], CONFIG["restarts"]
    halves = []
    for p in range(2):
        path, arrays = newest([f"{stem}.p{p}-of-2.{slot}.npz" for slot in "ab"])
        meta = json.loads(bytes(arrays["meta"]).decode())
        assert meta["rounds_done"] == 2 and meta["process"] == p and meta["process_count"] == 2
        np.testing.assert_allclose(arrays["history_train_loss"][first["restarts"]["chosen"]],
                                   first["history"]["train_loss"], rtol=1e-6)
        # its own half of every per-client leaf (assign [R, N]), with the index it covers
        halves += [tuple(map(tuple, index)) for i, j, index in meta["shards"]
                   if arrays[f"state_{i}_{j}"].shape == (r, n // 2)]
        arrays["history_train_loss"] = 10 * arrays["history_train_loss"]
        np.savez(path, **arrays)
    assert ((0, r), (0, n // 2)) in halves and ((0, r), (n // 2, n)) in halves
    codes, logs = run_processes(out_path, rounds=CONFIG["rounds"])
    assert codes == [0, 0], "\n".join(log[-2000:] for log in logs)
    resumed = json.load(open(out_path))
    assert resumed["process_count"] == 2 and resumed["device_count"] == 2
    loss = np.asarray(resumed["history"]["train_loss"])
    np.testing.assert_allclose(loss[:2], 10 * want[:2], rtol=1e-5)
    np.testing.assert_allclose(loss[2:], want[2:], rtol=1e-5)
    np.testing.assert_allclose(resumed["restarts"]["objective"], one["restarts"]["objective"],
                               rtol=1e-5)
    for key in ("test_loss", "misclustering", "param_error"):
        np.testing.assert_allclose(resumed["metrics"][key], one["metrics"][key], rtol=1e-5)
    assert one["metrics"]["misclustering"] == 0.0  # the run does cluster: the match is not trivial
