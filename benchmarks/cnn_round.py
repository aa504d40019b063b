"""Seconds per IFCA round and peak RSS for the convolutional and recurrent models on CPU:
the scan path with XLA's native convolution (the old default) against the im2col path
(``conv="auto"``, patches on CPU), each at the default client layout and at one client at a
time (``chunk=1``). Every configuration runs in its own subprocess, so its peak RSS
(ru_maxrss) is its own.

Configurations (IFCA option II, K clusters, every client participates):
- femnist-cnn: real FEMNIST (LEAF JSON under --data-dir), --femnist-clients writers; local
  steps and batch size of the SR-FCA authors' FEMNIST runs (5 steps of batch 100, SGD 0.04;
  the FEMNIST recipe itself sets none).
- cifar-cnn: IFCA's CIFAR CNN on RANDOM data of CIFAR shape (32x32x3, 10 classes; CIFAR-10 is
  not on this machine), --cifar-n images per client, batch 50 (IFCA's CIFAR runs).
- shakespeare-lstm: real LEAF Shakespeare (10 speakers), each speaker cut to its first
  --lstm-n windows (the full speakers hold up to 13,790, too many for a CPU round), batch 10
  (SR-FCA's Shakespeare runs), SGD 0.8.

The round is compiled first (``jit(...).lower(...).compile()``, timed as "compile") and then
run --rounds times; "s / round" is the median. Round time includes the loss matrix on every
participant's training data (IFCA's re-assignment).

    python benchmarks/cnn_round.py --data-dir /work/shared/data [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _common import output_file, printed_to  # noqa: E402

CONFIGS = ("femnist-cnn", "cifar-cnn", "shakespeare-lstm")


def _data(name, args):
    import jax
    import jax.numpy as jnp

    from fedclust_jax.data.federated import FederatedData
    from fedclust_jax.data.recipes import femnist, shakespeare
    key = jax.random.key(0)
    if name == "femnist-cnn":
        return femnist(key, num_clients=args.femnist_clients, data_dir=args.data_dir)
    if name == "shakespeare-lstm":
        d = shakespeare(key, data_dir=args.data_dir)
        n = args.lstm_n
        return d.replace(x=d.x[:, :n], y=d.y[:, :n], count=jnp.minimum(d.count, n))
    m, n = args.cifar_clients, args.cifar_n
    kx, ky = jax.random.split(key)
    x = jax.random.uniform(kx, (m, n, 32, 32, 3))
    y = jax.random.randint(ky, (m, n), 0, 10)
    count = jnp.full((m,), n, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x[:, :1], y_test=y[:, :1],
                         count_test=jnp.ones_like(count), cluster=jnp.zeros_like(count),
                         num_classes=10)


def one(name, conv, chunk, args) -> dict:
    """Times one configuration in this process; returns the table row as a dict."""
    import jax

    from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.models.cnn import cifar_cnn_for, femnist_cnn_for
    from fedclust_jax.models.lstm import shakespeare_lstm_for

    data = _data(name, args)
    if name == "femnist-cnn":
        model, local = femnist_cnn_for(data, conv=conv), LocalTraining(5, 0.04, batch_size=100)
    elif name == "cifar-cnn":
        model, local = cifar_cnn_for(data, conv=conv), LocalTraining(args.cifar_steps, 0.1,
                                                                     batch_size=50)
    else:
        model, local = shakespeare_lstm_for(data), LocalTraining(args.lstm_steps, 0.8,
                                                                 batch_size=10)
    cfg = dict(num_clusters=args.k, option="model", local=local)
    if chunk != "default":
        cfg["chunk"] = int(chunk)
    try:
        alg = IFCA(model, IFCAConfig(**cfg))
    except (TypeError, ValueError):
        raise
    layout = getattr(alg.cfg, "chunk", None)
    state = alg.init(jax.random.key(1), data)
    t0 = time.perf_counter()
    step = jax.jit(alg.round).lower(state, jax.random.key(2), data).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        state, _ = step(state, jax.random.key(3 + r), data)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return dict(config=name, conv=conv if name != "shakespeare-lstm" else "-",
                chunk=f"{chunk} ({layout})" if chunk == "default" else chunk,
                clients=int(data.num_clients), n_max=int(data.x.shape[1]),
                steps=local.steps, batch=local.batch_size, compile_s=compile_s,
                round_s=statistics.median(times),
                rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding femnist-leaf/ and shakespeare-leaf/ (default $FEDCLUST_DATA)")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--convs", nargs="+", default=["native", "auto"],
                   help="conv implementations to compare (CNNs only)")
    p.add_argument("--chunks", nargs="+", default=["default", "1"],
                   help="'default' = IFCAConfig's default layout, or a chunk size")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1, help="timed rounds after compiling")
    p.add_argument("--femnist-clients", type=int, default=20)
    p.add_argument("--cifar-clients", type=int, default=20)
    p.add_argument("--cifar-n", type=int, default=250)
    p.add_argument("--cifar-steps", type=int, default=5)
    p.add_argument("--lstm-n", type=int, default=500)
    p.add_argument("--lstm-steps", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900, help="seconds per configuration")
    p.add_argument("--out", type=output_file,
                   default=None, help="also write the table to this file")
    p.add_argument("--one", nargs=3, metavar=("CONFIG", "CONV", "CHUNK"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(*args.one, args)), flush=True)
        return

    with printed_to(args.out, __file__):
        compare(args)


def compare(args):
    """Runs every configuration in its own subprocess and prints the table."""
    import jax
    print(f"# jax {jax.__version__}, {jax.default_backend()}, {platform.machine()}, "
          f"{os.cpu_count()} cores; load at start: {os.getloadavg()}")
    print("| config | conv | chunk | clients | n_max | steps x batch | compile s | s / round "
          "| peak RSS GB |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|", flush=True)
    passthrough = sys.argv[1:]
    for name in args.configs:
        convs = ["-"] if name == "shakespeare-lstm" else args.convs
        for conv in convs:
            for chunk in args.chunks:
                cmd = [sys.executable, os.path.abspath(__file__), *passthrough,
                       "--one", name, conv if conv != "-" else "auto", chunk]
                t0 = time.perf_counter()
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True,
                                         timeout=args.timeout, cwd=ROOT)
                    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
                    if not line:
                        err = (out.stderr.strip().splitlines() or ["no output"])[-1]
                        print(f"| {name} | {conv} | {chunk} | failed: {err} |||||", flush=True)
                        continue
                    r = json.loads(line[0][7:])
                    print(f"| {name} | {r['conv']} | {r['chunk']} | {r['clients']} | "
                          f"{r['n_max']} | {r['steps']} x {r['batch']} | {r['compile_s']:.1f} | "
                          f"{r['round_s']:.1f} | {r['rss_gb']:.2f} |", flush=True)
                except subprocess.TimeoutExpired:
                    print(f"| {name} | {conv} | {chunk} | over {args.timeout:.0f} s "
                          f"(not finished) |||||", flush=True)
                print(f"<!-- {time.perf_counter() - t0:.0f} s wall, load "
                      f"{os.getloadavg()[0]:.2f} -->", flush=True)
    print(f"# load at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
