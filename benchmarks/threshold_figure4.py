"""Threshold clustering, Figure 4: f(l) = (1/K) sum_k ||v_k - c_k|| (v matched one-to-one to
the true centers, Hungarian, on the final v) against the TC iterations l, for blob std
sigma in {0.5, 1, 2, 4}; 90 points in 10-D from K = 10 blobs with fixed centers
(``data.robust_synthetic.blobs``), TC radius the 10% quantile, mean over 10 repeats.

    python benchmarks/threshold_figure4.py [--out benchmarks/results/threshold/figure4.md]

The paper leaves the start open; one table per start: blob-point (center k at a point of
blob k), offset (c_k + 10 u, u a random unit vector), data-points (K distinct data points),
box (uniform in the center box [-10, 10]^10). Elbows: l95, the first l with f(l) - min f
<= 0.05 (f(0) - min f); l(5%), the first l with f(l) <= 1.05 min f.
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

from _common import output_file
from fedclust_jax.core.threshold_clustering import threshold_clustering
from provenance import generated_by
from fedclust_jax.data.robust_synthetic import blobs

SIGMAS, INITS, L_MAX = (0.5, 1.0, 2.0, 4.0), ("blob-point", "offset", "data-points", "box"), 80
SHOWN = (0, 1, 2, 5, 10, 20, 30, 40, 60, 80)


def start(init, key, pts, centers):
    k, d = centers.shape
    if init == "blob-point":
        return pts[jax.random.randint(key, (k,), 0, pts.shape[0] // k) + pts.shape[0] // k * jnp.arange(k)]
    if init == "offset":
        u = jax.random.normal(key, (k, d))
        return centers + 10.0 * u / jnp.linalg.norm(u, axis=1, keepdims=True)
    if init == "data-points":
        return pts[jax.random.choice(key, pts.shape[0], (k,), replace=False)]
    return jax.random.uniform(key, (k, d), minval=-10.0, maxval=10.0)


def curve(sigma, init, repeats=10):
    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(7), r))(jnp.arange(repeats))
    pts, _, centers = jax.vmap(lambda k: blobs(jax.random.fold_in(k, 0), std=sigma))(keys)
    v = jax.vmap(lambda k, p, c: start(init, jax.random.fold_in(k, 1), p, c))(keys, pts, centers)
    tc = jax.jit(jax.vmap(lambda p, v: threshold_clustering(p, v, iters=1, quantile=0.1)))
    vs = [v]
    for _ in range(L_MAX):
        vs.append(tc(pts, vs[-1]))
    vs, centers = np.stack(vs, 1), np.asarray(centers)             # [R, L + 1, K, d]
    f = []
    for v, c in zip(vs, centers):
        rows, cols = linear_sum_assignment(np.linalg.norm(v[-1][:, None] - c[None], axis=-1))
        f.append(np.linalg.norm(v[:, rows] - c[cols][None], axis=-1).mean(-1))
    return np.mean(f, 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=output_file, default="benchmarks/results/threshold/figure4.md")
    args = ap.parse_args(argv)
    lines = [generated_by(None if argv is None else [__file__, *argv]).rstrip("\n"),
             "", "# Threshold clustering, Figure 4: distance to the true centers against TC iterations",
             "", __doc__.split("\n\n")[0].replace("\n", " "), ""]
    for init in INITS:
        lines += [f"## Start: {init}", "", "| sigma | " + " | ".join(f"l={l}" for l in SHOWN)
                  + " | min f | l95 | l(5%) |", "|---" * (len(SHOWN) + 4) + "|"]
        for sigma in SIGMAS:
            f = curve(sigma, init)
            m = f.min()
            l95, l5 = int(np.argmax(f - m <= 0.05 * (f[0] - m))), int(np.argmax(f <= 1.05 * m))
            lines.append(f"| {sigma} | " + " | ".join(f"{f[l]:.3f}" for l in SHOWN)
                         + f" | {m:.3f} | {l95} | {l5} |")
        lines.append("")
    text = "\n".join(lines) + f"\nDevice: {jax.devices()[0].device_kind}.\n"
    open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
