"""Threshold-clustering paper, Figure 4: average distance to the true centers against the
number of TC iterations l, for blob std sigma in {0.5, 1, 2, 4} with fixed centers.

    python benchmarks/threshold_figure4.py [--repeats 10] [--out benchmarks/results/threshold_figure4.md]

Data (Section 4.3): 90 points in 10-D from 10 blobs (``threshold_blobs``), centers uniform
in [-10, 10]^10 from one fixed seed. TC with K = 10, radius = the 10% quantile of the
distances to each center (recomputed every iteration). The paper leaves the initialisation
open: center k starts at a uniformly drawn point of blob k. f(l) = (1/K) sum_k ||v_k - c_k||,
averaged over repeats; "l to 95%": the first l with f(l) - min f <= 0.05 (f(0) - min f).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.core.robust import threshold_clustering
from fedclust_jax.data.robust_synthetic import blobs

SIGMAS = (0.5, 1.0, 2.0, 4.0)


def curve(sigma, repeats, max_l, quantile=0.1):
    def one(key):
        pts, labels, centers = blobs(jax.random.fold_in(key, 0), std=sigma)
        pick = jax.random.randint(jax.random.fold_in(key, 1), (10,), 0, 9) + 9 * jnp.arange(10)
        v = pts[pick]

        def step(v, _):
            v = threshold_clustering(pts, v, iters=1, quantile=quantile)
            return v, jnp.linalg.norm(v - centers, axis=1).mean()

        f0 = jnp.linalg.norm(v - centers, axis=1).mean()
        return jnp.concatenate([f0[None], jax.lax.scan(step, v, None, length=max_l)[1]])

    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(7), r))(jnp.arange(repeats))
    return np.asarray(jax.jit(jax.vmap(one))(keys)).mean(0)


def elbow(f):
    m = f.min()
    return int(np.argmax(f - m <= 0.05 * (f[0] - m)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--max-l", type=int, default=40)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    shown = [l for l in (0, 1, 2, 3, 5, 10, 20, 30, 40) if l <= args.max_l]
    lines = ["| sigma | " + " | ".join(f"l={l}" for l in shown) + " | l to 95% |",
             "|---|" + "---|" * (len(shown) + 1)]
    for s in SIGMAS:
        f = curve(s, args.repeats, args.max_l)
        lines.append(f"| {s} | " + " | ".join(f"{f[l]:.3f}" for l in shown) + f" | {elbow(f)} |")
        print(lines[-1], flush=True)
    text = ("# Threshold-clustering Figure 4 reproduction\n\n"
            f"Average distance to the true centers, {args.repeats} repeats, TC radius = 10% "
            "quantile, K = 10, 90 points in 10-D. `python benchmarks/threshold_figure4.py`.\n\n"
            + "\n".join(lines) + "\n")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
