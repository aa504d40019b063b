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
forwards for the loss matrix and 3 forward-equivalents per local step (forward + backward).

    python benchmarks/ifca_round.py --sizes 2400:100 4800:50 --chunks default auto none 1 50 200 --evaluate \
        [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
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
    return n_clients * (k * forward + tau * 3 * forward)


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
    args = p.parse_args()
    with printed_to(args.out, __file__):
        measure(args)


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


if __name__ == "__main__":
    main()
