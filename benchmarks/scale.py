"""Seconds per round and peak memory against the number of clients N.

    python benchmarks/scale.py --quick --data-dir ../shared/data --json scale.json \
        --markdown benchmarks/results/scale_cpu.md
    python benchmarks/scale.py --data-dir ../shared/data          # full mode, for accelerators

Each configuration runs in its own subprocess, so peak memory is that configuration's own.
A configuration builds its data, then runs IFCA (option II, participation 1, K clusters)
through the experiment runner (``run_rounds``) for 1 + ``--rounds`` rounds of one round per
compiled chunk: the first round (compilation included) is the warm-up, and seconds per round
is the mean of the others. Peak memory: on CPU the process's peak resident set size
(``ru_maxrss``: the Python process, JAX runtime and data building included); on an
accelerator the largest ``peak_bytes_in_use`` over the devices.

Configurations (``--quick`` on a CPU, well under 10 minutes on 2 cores when unloaded):
  softmax regression (784 -> 10) on rotated MNIST (K = 4), clients drawing n = 20 train and
    20 test images with replacement: N = 1k, 10k, 100k;
  a linear model on synthetic mixed linear regression (K = 2, n = 10 train and 10 test
    examples, d = 20): N = 100k and 1M (100k gives the growth of seconds per round to 1M).
Full mode adds the MNIST MLP 784-200-10 at N = 100k, 10k, 1k, run first (the MLP at 100k
on one accelerator is the target; a device run cut by its time limit keeps it).

MNIST clients are the recipe ``ifca_rotated_mnist(..., views=True, replace=True)`` (one
shared uint8 pool plus per-client indices). Synthetic regression data is generated here in
numpy, one block of clients at a time, with the construction of
``data.synthetic.mixed_linear_regression``, because the JAX generator draws all N x n x d
normals at once (peak about twice the data).

Output: a table on stdout; ``--markdown`` and ``--json`` are rewritten after every
configuration (a stopped run keeps what it finished); ``--json PATH`` writes a list of records {"model", "dataset",
"clients", "samples_per_client", "dtype", "chunk", "seconds_per_round",
"peak_memory_mb", "backend", ...} (plus "first_round_s", "build_s", "rounds_timed",
"note"; seconds_per_round and peak_memory_mb are null for a skipped or failed run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import (ROOT, add_child_arguments, check_marks, child_command, child_record,
                     data_dir_or_error, load_averages, output_file, peak_memory_mb, round_marks,
                     run_child, write_markdown)

MNIST_N = (1_000, 10_000, 100_000)
QUICK = ([dict(model="softmax", dataset="mnist-views", clients=n, samples_per_client=20, chunk=1000)
          for n in MNIST_N]
         + [dict(model="linear", dataset="synthetic-regression", clients=n, samples_per_client=10,
                 chunk=10_000) for n in (100_000, 1_000_000)])
FULL = [dict(model="mlp", dataset="mnist-views", clients=n, samples_per_client=20, chunk=1000)
        for n in MNIST_N[::-1]] + QUICK   # the accelerator target (MLP at 100k) first
RECORD_KEYS = ("model", "dataset", "clients", "samples_per_client", "dtype", "chunk",
               "seconds_per_round", "peak_memory_mb", "backend")


# ------------------------------------------------------------------ data (child process)

def mnist_clients(num_clients, n, seed, data_dir):
    """Rotated-MNIST clients (K = 4) drawing n train / n test images with replacement (views)."""
    import jax

    from fedclust_jax.data import recipes
    return recipes.ifca_rotated_mnist(jax.random.key(seed), num_clusters=4,
                                      num_clients=num_clients, n=n, n_test=n, views=True,
                                      replace=True, data_dir=data_dir)


def regression_clients(num_clients, n, seed, dim=20, num_clusters=2, separation=3.0,
                       noise_std=0.1, block=100_000):
    """Mixed linear regression generated in numpy blocks of clients (see module doc)."""
    import numpy as np

    from fedclust_jax.data.federated import FederatedData
    rng = np.random.default_rng(seed)
    theta = rng.integers(0, 2, (num_clusters, dim)).astype(np.float32)
    theta *= separation / np.maximum(np.linalg.norm(theta, axis=1, keepdims=True), 1e-12)
    cluster = np.repeat(np.arange(num_clusters), -(-num_clients // num_clusters))[:num_clients]
    cluster = cluster.astype(np.int32)

    def draw():
        x = np.empty((num_clients, n, dim), np.float32)
        y = np.empty((num_clients, n), np.float32)
        for s in range(0, num_clients, block):
            e = min(s + block, num_clients)
            x[s:e] = rng.standard_normal((e - s, n, dim), np.float32)
            y[s:e] = np.einsum("cnd,cd->cn", x[s:e], theta[cluster[s:e]])
            y[s:e] += noise_std * rng.standard_normal((e - s, n), np.float32)
        return x, y

    (x, y), (xt, yt) = draw(), draw()
    count = np.full(num_clients, n, np.int32)
    return FederatedData(x=x, y=y, count=count, x_test=xt, y_test=yt, count_test=count,
                         cluster=cluster, true_params=theta, task="regression", num_classes=0)


# ------------------------------------------------------------------ one configuration

def run_one(cfg: dict) -> dict:
    """Runs one configuration in this process and returns its record."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax import experiment
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.base import with_dtype
    from fedclust_jax.models.registry import build_model

    backend = jax.default_backend()
    record = dict(cfg, backend=backend, seconds_per_round=None, peak_memory_mb=None,
                  first_round_s=None, build_s=None, rounds_timed=cfg["rounds"], note="")
    t0 = time.perf_counter()
    if cfg["dataset"] == "mnist-views":
        data, k = mnist_clients(cfg["clients"], cfg["samples_per_client"], cfg["seed"],
                                cfg["data_dir"]), 4
        record["note"] = "views (recipe)"
    else:
        data, k = regression_clients(cfg["clients"], cfg["samples_per_client"], cfg["seed"]), 2
        record["note"] = "numpy blocks"
    data = data.astype(cfg["dtype"])
    data = jax.tree.map(jnp.asarray, data)
    record["build_s"] = time.perf_counter() - t0

    model = {"softmax": lambda: build_model("mlp", data, hidden=()),
             "mlp": lambda: build_model("mlp", data, hidden=(200,)),
             "linear": lambda: build_model("linear", data)}[cfg["model"]]()
    model = with_dtype(model, cfg["dtype"])   # params in cfg["dtype"], as the data
    alg = build_algorithm("ifca", model, dict(num_clusters=k, chunk=cfg["chunk"]), data)

    marks = round_marks(experiment)
    start = time.perf_counter()
    states, _ = experiment.run_rounds(alg, data, jax.random.key(cfg["seed"]), rounds=1 + cfg["rounds"],
                                      rounds_per_chunk=1, progress=False)
    jax.block_until_ready(states)
    end = time.perf_counter()
    check_marks(marks, 1 + cfg["rounds"], "benchmarks/scale.py")
    record["first_round_s"] = marks[0] - start
    record["seconds_per_round"] = (end - marks[0]) / cfg["rounds"]
    record["peak_memory_mb"] = peak_memory_mb(backend)
    return record


# ------------------------------------------------------------------ driver

def run_in_subprocess(cfg: dict, timeout_s: float) -> dict:
    cmd = child_command(__file__, cfg)
    failed = dict(cfg, backend=None, seconds_per_round=None, peak_memory_mb=None,
                  first_round_s=None, build_s=None, rounds_timed=cfg["rounds"])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(failed, note=f"failed: over the {timeout_s:.0f} s timeout")
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        why = "killed (out of memory?)" if out.returncode in (-9, 137) else tail[:200]
        return dict(failed, note=f"failed (exit {out.returncode}): {why}")
    return child_record(out.stdout)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(records) -> str:
    head = ["model", "dataset", "clients", "n", "dtype", "chunk", "s/round", "1st round s",
            "peak MB", "backend", "note"]
    rows = [[r["model"], r["dataset"], f"{r['clients']:,}", str(r["samples_per_client"]), r["dtype"],
             str(r["chunk"]), fmt(r["seconds_per_round"], ".3f"), fmt(r["first_round_s"], ".1f"),
             fmt(r["peak_memory_mb"], ".0f"), str(r["backend"]), r["note"]] for r in records]
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def growth(records, model="linear", small=100_000, large=1_000_000):
    """Ratio of seconds per round between ``large`` and ``small`` clients, or None."""
    by_n = {r["clients"]: r["seconds_per_round"] for r in records if r["model"] == model}
    if by_n.get(small) and by_n.get(large):
        return by_n[large] / by_n[small]
    return None


def targets(records) -> str:
    """The issue's targets for the linear model at 1M clients, where measured."""
    lines = []
    g = growth(records)
    if g is not None:
        lines.append(f"linear model: seconds per round at 1M clients / at 100k = {g:.2f} (target <= 12)")
    big = [r for r in records if r["model"] == "linear" and r["clients"] == 1_000_000
           and r["peak_memory_mb"] is not None]
    if big and big[0]["backend"] == "cpu":
        lines.append(f"linear model at 1M clients: peak RSS {big[0]['peak_memory_mb']:.0f} MB "
                     "(target <= 4096 MB)")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the CPU set (see the module doc)")
    p.add_argument("--json", type=output_file, help="write the records to this path")
    p.add_argument("--markdown", type=output_file,
                   help="write the command, machine load and table to this path")
    add_child_arguments(p)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after the warm-up round")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="storage of params and data (losses, sums, optimizer state float32)")
    p.add_argument("--chunk", type=int, help="clients per chunk (default per configuration)")
    p.add_argument("--only", help="run only configurations whose model or dataset equals this")
    p.add_argument("--max-clients", type=int, help="skip configurations with more clients")
    p.add_argument("--timeout", type=float, default=900, help="seconds per configuration")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if run_child(args, run_one):
        return
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    configs = [c for c in (QUICK if args.quick else FULL)
               if (args.only in (None, c["model"], c["dataset"]))
               and (args.max_clients is None or c["clients"] <= args.max_clients)]
    if not configs:
        p.error("no configuration left after --only / --max-clients")
    if any(c["dataset"] == "mnist-views" for c in configs):
        args.data_dir = data_dir_or_error(p, args.data_dir, "MNIST configurations need")
    load_before = load_averages()
    records = []
    for c in configs:
        cfg = dict(c, dtype=args.dtype, rounds=args.rounds, seed=args.seed, data_dir=args.data_dir,
                   chunk=args.chunk or c["chunk"])
        print(f"# {cfg['model']} {cfg['dataset']} N={cfg['clients']:,} ...", file=sys.stderr, flush=True)
        r = run_in_subprocess(cfg, args.timeout)
        records.append({k: r.get(k) for k in RECORD_KEYS + ("first_round_s", "build_s",
                                                           "rounds_timed", "note")})
        write_outputs(args, argv, load_before, records, done=len(records) == len(configs))
    print(report(records))


def report(records) -> str:
    summary = targets(records)
    return table(records) + ("\n\n" + summary if summary else "")


def write_outputs(args, argv, load_before, records, *, done: bool) -> None:
    """Writes --markdown and --json after every configuration, so a run stopped early (a
    device job's time limit) keeps the configurations it finished."""
    if args.markdown:
        cut = "" if done else "\n\nRun in progress or stopped: later configurations are missing."
        write_markdown(args.markdown, __file__, argv, load_before, report(records) + cut)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

if __name__ == "__main__":
    main()
