"""The harness the throughput scripts share: synthetic client data of a real shape, the
runner's own compiled chunk of rounds (``loop.run_chunk``) to time a round with, median
seconds, one child process per configuration (``--one CFG``), per-round timing marks, peak
memory, result-file paths checked at the command line and the head of a result file (the
command, the load before and after).

A script using it runs from the command line as ``python benchmarks/<script>.py``, so this
folder is on ``sys.path``; ``run_child`` also puts the repository root there.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthetic_data(m: int, n: int, feature, classes: int, *, tokens: bool = False, seed=0):
    """``FederatedData`` of m clients with n examples each: uniform features of shape
    ``feature`` (or integer tokens < classes), labels uniform over ``classes``; one test
    example per client. A stand-in of a real data set's shapes for timing."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax.data.federated import FederatedData
    kx, ky = jax.random.split(jax.random.key(seed))
    x = (jax.random.randint(kx, (m, n, *feature), 0, classes) if tokens
         else jax.random.uniform(kx, (m, n, *feature)))
    y = jax.random.randint(ky, (m, n), 0, classes)
    count = jnp.full((m,), n, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x[:, :1], y_test=y[:, :1],
                         count_test=jnp.ones_like(count), cluster=jnp.zeros_like(count),
                         num_classes=classes)


def runner_round(alg, data, restarts: int = 1, seed: int = 1):
    """(program, args): one round of ``alg`` on ``data`` as the runner runs it
    (``loop.run_chunk`` of ``restarts`` restarts over the rounds ``ts`` = [0], the body of
    ``experiment.run_rounds``' compiled chunk), with its states freshly initialised.
    ``jax.jit(program)(*args)`` returns (states, history)."""
    import jax.numpy as jnp

    from fedclust_jax import loop
    init_keys, round_keys = loop.restart_keys(loop.run_key(seed), restarts)
    states = loop.init_states(alg, init_keys, data)
    program = lambda s, k, d, ts: loop.run_chunk(alg, s, k, d, ts)   # noqa: E731
    return program, (states, round_keys, data, jnp.arange(1))


def median_seconds(fn, args, repeats: int) -> float:
    """Median seconds of ``fn(*args)`` (results ready) over ``repeats`` calls after one
    untimed call (compilation)."""
    import jax
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def load_averages() -> str:
    """The load averages (1, 5, 15 minutes) as ``uptime`` prints them."""
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def output_file(path: str) -> str:
    """argparse ``type`` of a result-file option: creates the file's folder and checks that
    the file can be written, so a wrong path stops the command before the run, not after it."""
    from fedclust_jax.results import check_output_path
    try:
        check_output_path(path, "path", example=None)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return path


def peak_memory_mb(backend: str) -> float:
    """This process's peak memory in MB: on an accelerator the largest device
    ``peak_bytes_in_use``; on a CPU (or where no device reports it) the peak resident set
    size (``ru_maxrss``: Python, the JAX runtime and data building included)."""
    import jax
    if backend != "cpu":
        stats = [d.memory_stats() or {} for d in jax.local_devices()]
        peaks = [s["peak_bytes_in_use"] for s in stats if s.get("peak_bytes_in_use") is not None]
        if peaks:
            return max(peaks) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def round_marks(experiment, on_round=None) -> list[float]:
    """A list that gets ``time.perf_counter()`` after every compiled chunk of rounds: replaces
    ``experiment.Progress`` by a subclass whose ``update`` (called by ``run_rounds`` after each
    chunk) appends the time and then calls ``on_round(done)`` when given."""
    marks: list[float] = []

    class Timer(experiment.Progress):
        def update(self, done, extra=""):
            marks.append(time.perf_counter())
            if on_round is not None:
                on_round(done)

    experiment.Progress = Timer
    return marks


def check_marks(marks: list, expected: int, script: str) -> None:
    """Stops with advice when ``run_rounds`` did not report ``expected`` chunks."""
    if len(marks) != expected:
        raise SystemExit("run_rounds no longer reports after every chunk through "
                         f"experiment.Progress.update; update {script}'s timer")


def add_child_arguments(p: argparse.ArgumentParser) -> None:
    """--data-dir (default $FEDCLUST_DATA) and the hidden --one (a child's configuration)."""
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding mnist/ (default $FEDCLUST_DATA)")
    p.add_argument("--one", help=argparse.SUPPRESS)


def run_child(args, run_one) -> bool:
    """Puts the repository root on ``sys.path``; in a child (``--one CFG``) prints
    ``run_one(cfg)``'s record as one JSON line and returns True, else returns False."""
    sys.path.insert(0, ROOT)
    if not args.one:
        return False
    print(json.dumps(run_one(json.loads(args.one)), default=float))
    return True


def child_command(script: str, cfg: dict) -> list[str]:
    """The command that runs ``script`` as a child on configuration ``cfg``."""
    return [sys.executable, os.path.abspath(script), "--one", json.dumps(cfg)]


def child_record(stdout: str) -> dict:
    """A child's record: the last line of its stdout."""
    return json.loads(stdout.strip().splitlines()[-1])


def data_dir_or_error(p: argparse.ArgumentParser, data_dir, who: str = "needs") -> str:
    """The absolute path of ``data_dir`` (children run in the repository root), or a usage
    error when it is not a folder."""
    if not data_dir or not os.path.isdir(data_dir):
        p.error(f"{who} --data-dir (a folder holding mnist/) or $FEDCLUST_DATA; got {data_dir!r}")
    return os.path.abspath(data_dir)


def write_markdown(path: str, script: str, argv, load_before: str, body: str) -> None:
    """A result file: the command that regenerates it (``provenance.generated_by`` of
    ``script`` and ``argv``, None = ``sys.argv[1:]``), the load before and now, then ``body``."""
    from provenance import generated_by
    argv = sys.argv[1:] if argv is None else list(argv)
    with open(path, "w") as f:
        f.write(generated_by([script] + argv)
                + f"Load (`uptime`) before: {load_before}; after: {load_averages()} "
                  f"(on {os.cpu_count()} cores).\n\n{body}\n")


@contextlib.contextmanager
def printed_to(path, script: str, fence: bool = False):
    """Runs the block, printing as usual; with a ``path``, what it printed also becomes a
    result file there (``write_markdown``: the command, the load before and after, then the
    text, inside a code fence when ``fence``)."""
    if path is None:
        yield
        return
    before, seen, out = load_averages(), io.StringIO(), sys.stdout

    class Tee:
        def write(self, s):
            seen.write(s)
            return out.write(s)

        def flush(self):
            out.flush()

    sys.stdout = Tee()
    try:
        yield
    finally:
        sys.stdout = out
    text = seen.getvalue().rstrip("\n")
    write_markdown(path, script, None, before, f"```\n{text}\n```" if fence else text)
