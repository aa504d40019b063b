"""Seconds per call of each robust per-cluster aggregator (after compilation).

    python benchmarks/robust_aggregators.py [--clients 1000] [--dim 50000] [--clusters 4]
        [--trials 0] [--repeats 3] [--only median trimmed] [--skip masked]
        [--out benchmarks/results/robust_aggregators.md]

Uploads N x d float32, assignments uniform over K clusters; median (three sorting backends),
trimmed mean beta = 0.1 (three backends), mean, geometric median (10 Weiszfeld steps),
Krum, multi-Krum, centered clipping (1 step). ``--trials T``: T independent problems, one
vmap over them (as the BR-IFCA Figure 1 trials).
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.core import robust as R


def variants():
    return {
        "median / packed": lambda v, a, p: R.cluster_median(v, a, p, method="packed"),
        "median / masked": lambda v, a, p: R.cluster_median(v, a, p, method="masked"),
        "median / numpy": lambda v, a, p: R.cluster_median(v, a, p, method="numpy"),
        "trimmed mean / packed": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="packed"),
        "trimmed mean / masked": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="masked"),
        "trimmed mean / numpy": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="numpy"),
        "mean": R.cluster_plain_mean,
        "geometric median": lambda v, a, p: R.cluster_geometric_median(v, a, p, iters=10),
        "krum": lambda v, a, p: R.cluster_krum(v, a, p, byz_frac=0.1),
        "multi-krum": lambda v, a, p: R.cluster_krum(v, a, p, byz_frac=0.1, multi=True),
        "centered clipping": lambda v, a, p: R.cluster_centered_clipping(v, a, p, tau=1.0),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=50_000)
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=0, help="vmap over this many problems (0: one)")
    ap.add_argument("--only", nargs="*", default=[], help="variants whose name has one of these")
    ap.add_argument("--skip", nargs="*", default=[], help="variants whose name has one of these")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    batch = (args.trials,) if args.trials else ()
    v = jnp.asarray(rng.normal(size=batch + (args.clients, args.dim)).astype(np.float32))
    a = jnp.asarray(rng.integers(0, args.clusters, size=batch + (args.clients,)).astype(np.int32))
    p = jnp.zeros(batch + (args.clusters, args.dim), jnp.float32)
    rows = []
    for name, fn in variants().items():
        if any(s in name for s in args.skip) or (args.only and not any(s in name for s in args.only)):
            continue
        f = jax.jit(jax.vmap(fn) if args.trials else fn)
        t0 = time.perf_counter()
        f(v, a, p).block_until_ready()
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            f(v, a, p).block_until_ready()
            times.append(time.perf_counter() - t0)
        rows.append((name, min(times), first))
        print(f"{name:24s} {min(times):8.3f} s  (first call incl. compile {first:.2f} s)", flush=True)
    head = (("" if not args.trials else f"{args.trials} trials (vmap) of ")
            + f"N = {args.clients}, d = {args.dim}, K = {args.clusters}, backend "
            f"{jax.default_backend()} ({platform.processor() or platform.machine()}, "
            f"{jax.device_count()} device), best of {args.repeats} after compilation")
    text = "| aggregator / backend | seconds | first call (compile) |\n|---|---|---|\n" + "\n".join(
        f"| {n} | {t:.3f} | {c:.2f} |" for n, t, c in rows)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(f"\n### {head}\n\n{text}\n")
    print(head)


if __name__ == "__main__":
    main()
