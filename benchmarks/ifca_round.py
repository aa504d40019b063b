"""Time one IFCA round (option II): MLP 784-200-10, n examples per client, full batch,
tau=10 local steps, K=4 cluster models; m clients under each client layout.

Layouts (--chunks): "default" (whatever ``IFCAConfig()`` chooses), "auto" (``chunk="auto"``,
the per-backend choice, where this version has it; otherwise the row says so and is
skipped; both rows show the chunk they resolve to on this backend, ``resolve_chunk``), "none" (one vmap over all clients) or a chunk size c (``lax.map`` over chunks of
c clients). For each size the fastest manual layout (none or a number) is marked, and with
--evaluate the end-of-run cost is timed separately from the round, under the default
layout, after the timed rounds: ``alg.evaluate`` alone (re-assigning every client on its
training data and scoring the test split) and the runner's whole end of run for one
restart (``experiment.end_of_run``: the training objective that picks the restart, then
the evaluation; one ``alg.objective_and_evaluate`` call where the algorithm has it, else
the vmapped ``alg.objective`` and ``alg.evaluate``), each the median of --repeats calls
after a compile call.

--dtype bfloat16 stores the params and data in bf16 (float32 losses, sums and optimizer
state; ``models.base.with_dtype``, ``FederatedData.astype``).

Prints seconds per round (median of --repeats timed rounds after one compile round) and the
achieved GFLOP/s, counting 2 * (784*200 + 200*10) FLOPs per example per forward pass, K
forwards for the loss matrix, and per local step a forward pass, the weight gradients of both
layers (one forward's worth) and the input gradient of the second layer only (the first
layer's input gradient is never formed): XLA's own count of the compiled round
(``benchmarks/roofline.py``) agrees with this to within elementwise work.

    python benchmarks/ifca_round.py --sizes 2400:100 4800:50 --chunks default auto none 1 50 200 --evaluate \
        [--out FILE.md]

--peer DIR: side by side with the IFCA authors' PyTorch code instead (DIR holds their
``mnist/train_cluster_mnist.py``, ``util.py``, ``config.json``, MNIST under
``data/MNIST/raw`` and a ``torchvision`` stand-in, as ``shared/peers/ifca_mnist_round``'s
README sets up; their code is never part of this project). On rotated MNIST
(``ifca-rotated-mnist``, K = 4, m x n of the first --sizes entry): our default round is
compiled, then ours and theirs are timed in turn, --repeats times each (ours: one
compiled round; theirs: one run of ``--peer-python train_cluster_mnist.py`` with one epoch,
whose train + re-cluster seconds of epoch 0 are the round, as their log prints them), with
the load before each; medians and their ratio at the end.

    python benchmarks/ifca_round.py --peer /tmp/peers/ifca_mnist --peer-python \
        /tmp/peer-venv/bin/python --sizes 2400:100 --repeats 4 --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.clients import resolve_chunk
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.base import with_dtype
from fedclust_jax.models.mlp import mlp

from _common import output_file, printed_to

SIZES = (784, 200, 10)


def round_flops(n_clients: int, n: int, k: int, tau: int) -> float:
    forward = 2 * sum(a * b for a, b in zip(SIZES[:-1], SIZES[1:])) * n
    input_grads = 2 * sum(a * b for a, b in zip(SIZES[1:-1], SIZES[2:])) * n
    return n_clients * (k * forward + tau * (2 * forward + input_grads))


def make_data(n_clients: int, n: int) -> FederatedData:
    kx, ky = jax.random.split(jax.random.key(0))
    x = jax.random.uniform(kx, (n_clients, n, SIZES[0]))
    y = jax.random.randint(ky, (n_clients, n), 0, SIZES[-1])
    count = jnp.full((n_clients,), n, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x[:, :1], y_test=y[:, :1],
                         count_test=jnp.ones_like(count), cluster=jnp.zeros_like(count),
                         num_classes=SIZES[-1])


def make_alg(chunk, *, k: int, tau: int, dtype: str = "float32") -> IFCA:
    """chunk: "default" (IFCAConfig's own default), "auto", None or an int."""
    kw = dict(num_clusters=k, option="model", local=LocalTraining(steps=tau, lr=0.1))
    if chunk != "default":
        kw["chunk"] = chunk
    return IFCA(with_dtype(mlp(SIZES), dtype), IFCAConfig(**kw))


def time_round(alg, data, *, repeats: int) -> float:
    state = alg.init(jax.random.key(1), data)
    step = jax.jit(alg.round)
    state, _ = step(state, jax.random.key(2), data)
    jax.block_until_ready(state)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        state, _ = step(state, jax.random.key(3 + r), data)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), state


def _median_seconds(fn, repeats: int) -> float:
    jax.block_until_ready(fn())   # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_evaluate(alg, state, data, *, repeats: int) -> float:
    ev = jax.jit(alg.evaluate)
    return _median_seconds(lambda: ev(state, data), repeats)


def time_end_of_run(alg, state, data, *, repeats: int) -> float:
    """Seconds of what ``experiment.end_of_run`` computes for one restart (compiled): the
    objective and the evaluation, in one call where the algorithm has
    ``objective_and_evaluate`` and otherwise as the runner did before it existed."""
    if hasattr(alg, "objective_and_evaluate"):
        both = jax.jit(alg.objective_and_evaluate)
        return _median_seconds(lambda: both(state, data), repeats)
    objective = jax.jit(jax.vmap(alg.objective, in_axes=(0, None)))
    ev = jax.jit(alg.evaluate)
    states = jax.tree.map(lambda a: a[None], state)   # a restart axis of 1
    return _median_seconds(lambda: (objective(states, data), ev(state, data)), repeats)


def parse_chunk(c):
    return {"none": None, "default": "default", "auto": "auto"}.get(c, c if not c.isdigit() else int(c))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[100, 1000],
                   help="client counts m, each with --n examples (ignored with --sizes)")
    p.add_argument("--sizes", nargs="+", default=None, metavar="M:N",
                   help="m clients with n examples each, e.g. 2400:100 4800:50")
    p.add_argument("--chunks", nargs="+", default=["default", "auto", "none", "50", "200"],
                   help="'default', 'auto', 'none' (one vmap) or a chunk size")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--tau", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="storage of params and data")
    p.add_argument("--evaluate", action="store_true",
                   help="also time alg.evaluate and the end of run (objective + evaluate) "
                        "under the default layout")
    p.add_argument("--out", type=output_file,
                   default=None, help="also write the table to this file")
    p.add_argument("--peer", default=None, metavar="DIR",
                   help="folder of the IFCA authors' MNIST code: time it against ours, interleaved")
    p.add_argument("--peer-python", default="python", help="the Python (with torch) for --peer")
    args = p.parse_args()
    if args.peer and not os.path.isfile(os.path.join(args.peer, "train_cluster_mnist.py")):
        p.error(f"--peer {args.peer} holds no train_cluster_mnist.py; set the folder up as "
                "shared/peers/ifca_mnist_round/README.md says")
    with printed_to(args.out, __file__):
        (side_by_side if args.peer else measure)(args)


def measure(args):
    sizes = ([tuple(int(v) for v in s.split(":")) for s in args.sizes] if args.sizes
             else [(m, args.n) for m in args.clients])
    dev = jax.devices()[0]
    print(f"# jax {jax.__version__}, {dev.platform} {getattr(dev, 'device_kind', '')}, "
          f"{platform.processor() or platform.machine()}, {jax.device_count()} device(s), "
          f"{args.dtype}; load at start {os.getloadavg()}")
    print("| clients m | n | chunk | s / round | GFLOP / round | GFLOP/s |")
    print("|---:|---:|---|---:|---:|---:|", flush=True)
    for m, n in sizes:
        data = make_data(m, n).astype(args.dtype)
        manual = {}
        for c in args.chunks:
            chunk = parse_chunk(c)
            if isinstance(chunk, int) and chunk >= m:
                continue
            try:
                alg = make_alg(chunk, k=args.k, tau=args.tau, dtype=args.dtype)
            except (TypeError, ValueError) as e:
                print(f"| {m} | {n} | {c} | not available in this version ({e}) | | |", flush=True)
                continue
            if c in ("default", "auto"):   # the layout this backend actually runs
                used = resolve_chunk(alg.cfg.chunk, m, backend=jax.default_backend())
                label = f"{c} (= {'none' if used is None else used})"
            else:
                label = c
            sec, state = time_round(alg, data, repeats=args.repeats)
            if c not in ("default", "auto"):
                manual[c] = sec
            gflop = round_flops(m, n, args.k, args.tau) / 1e9
            print(f"| {m} | {n} | {label} | {sec:.2f} | {gflop:.1f} | {gflop / sec:.1f} |",
                  flush=True)
            if args.evaluate and c == "default":
                ev = time_evaluate(alg, state, data, repeats=args.repeats)
                print(f"| {m} | {n} | {label}: alg.evaluate | {ev:.2f} | | |", flush=True)
                end = time_end_of_run(alg, state, data, repeats=args.repeats)
                print(f"| {m} | {n} | {label}: end of run (objective + evaluate) | {end:.2f} | | |",
                      flush=True)
        if manual:
            best = min(manual, key=manual.get)
            print(f"| {m} | {n} | fastest manual: {best} | {manual[best]:.2f} | | |", flush=True)
    print(f"# load at end {os.getloadavg()}")


def peer_round(args, m: int, n: int) -> float:
    """Train + re-cluster seconds of epoch 0 of one run of the authors' code (1 epoch)."""
    override = json.dumps({"num_epochs": 1, "m": m, "n": n, "m_test": 4 * 10000 // n})
    out = subprocess.run([args.peer_python, "-u", "train_cluster_mnist.py", "--project-dir",
                          "/tmp/ifca_round_peer_out", "--config-override", override],
                         cwd=args.peer, capture_output=True, text=True)
    hit = re.search(r"Epoch 0 tr:.*?([\d.]+)sec\(train\) ([\d.]+)sec\(infer\)", out.stdout)
    if not hit:
        raise SystemExit(f"the authors' code printed no epoch-0 timing: {out.stderr[-800:]}")
    return float(hit.group(1)) + float(hit.group(2))


def side_by_side(args):
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.data.registry import build_dataset
    from fedclust_jax.models.registry import build_model
    m, n = (tuple(int(v) for v in args.sizes[0].split(":")) if args.sizes
            else (args.clients[0], args.n))
    data = build_dataset("ifca-rotated-mnist", jax.random.key(0), num_clusters=4,
                         num_clients=m, n=n)
    alg = build_algorithm("ifca", build_model("mlp", data, hidden=200),
                          dict(num_clusters=4, option="model", lr=0.1, steps=args.tau), data)
    state = alg.init(jax.random.key(1), data)
    step = jax.jit(alg.round)
    print(f"# jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; IFCA MNIST round, m = {m}, n = {n}, K = 4, tau = "
          f"{args.tau}, rotated MNIST; ours: default layout "
          f"(chunk {resolve_chunk(alg.cfg.chunk, m)}), theirs: {args.peer}")
    state, _ = step(state, jax.random.key(2), data)   # compile
    jax.block_until_ready(state)
    print("| pass | who | s / round | load before (1, 5, 15 min) |\n|---:|---|---:|---|")
    ours, theirs = [], []
    for r in range(args.repeats):
        load = os.getloadavg()
        t0 = time.perf_counter()
        state, _ = step(state, jax.random.key(3 + r), data)
        jax.block_until_ready(state)
        ours.append(time.perf_counter() - t0)
        print(f"| {r + 1} | fedclust_jax | {ours[-1]:.2f} | {load} |", flush=True)
        load = os.getloadavg()
        theirs.append(peer_round(args, m, n))
        print(f"| {r + 1} | authors (train + re-cluster) | {theirs[-1]:.2f} | {load} |",
              flush=True)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"\nMedians of {args.repeats}: fedclust_jax {a:.2f} s, authors {b:.2f} s; "
          f"authors / fedclust_jax = {b / a:.2f}")


if __name__ == "__main__":
    main()
