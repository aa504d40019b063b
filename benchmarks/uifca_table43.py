"""UIFCA Table 4.3 ([T] 4.3): purity on MNIST-based point clusters vs p.

Datasets (n = K clients, the recipe of ``fedclust_jax.data.points``):
  rotated: one digit (2, 3, 4 or 5; all its training images) rotated by 0/90/180/270
           degrees (rot90), K = 4; the table averages the four digits;
  digits:  all training images, cluster = digit, K = 10.
Each client holds ``--fill`` x (smallest cluster pool) points so every cluster's pool
suffices (points are used at most once).
Methods: k-FED (local k-means per client, cheap: runs on a CPU) and UIFCA with a cyclic-mask
RealNVP ([T]: T = 20, tau = 40, M = 100, SGD lr 1e-4; batch 64 chosen here), which needs an
accelerator: on the 2-core CPU one cluster round of the rotated set (16 flow copies of
2.56M parameters, 4000 SGD steps each) takes hours. k-FED + UIFCA: ``--methods kfed+uifca``.

    python benchmarks/uifca_table43.py --methods kfed                 # CPU
    python benchmarks/uifca_table43.py --methods kfed,uifca --data rotated --rounds 20  # GPU
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

from provenance import generated_by
from _common import output_file

from fedclust_jax.algorithms.kfed import kfed
from fedclust_jax.algorithms.uifca import UIFCAConfig, run_uifca
from fedclust_jax.data.points import true_points
from fedclust_jax.data.points import points_from_pools
from fedclust_jax.metrics import purity
from fedclust_jax.models.flows import real_nvp

sys.path.insert(0, str(Path(__file__).parent))
from uifca_table42 import load_mnist_uint8  # noqa: E402  (the same MNIST reader)

PS = (0.0, 0.25, 0.5, 0.75, 1.0)
THESIS = {
    ("rotated", "UIFCA"): (63.5, 60.8, 63.4, 79.5, 79.6),
    ("rotated", "ClusterGAN"): (95.7, 78.9, 49.1, 36.4, 28.8),
    ("rotated", "k-FED"): (92.2, 87.1, 80.5, 78.3, 100),
    ("digits", "UIFCA"): (34.2, 31.3, 33.7, 38.9, 43.1),
    ("digits", "ClusterGAN"): (71.3, 57.4, 39.4, 27.5, 16.8),
    ("digits", "k-FED"): (57.0, 59.1, 53.3, 51.6, 62.3),
}
METHOD_NAMES = {"kfed": "k-FED", "uifca": "UIFCA", "kfed+uifca": "k-FED+UIFCA"}


def pools_for(name, xtr, ytr):
    """List of per-cluster uint8 image pools."""
    if name == "digits":
        return [[xtr[ytr == d]] for d in range(10)]
    return [[np.rot90(xtr[ytr == d], r, axes=(1, 2)) for r in range(4)] for d in (2, 3, 4, 5)]


def run_one(method, pools, key, p, fill, cfg, restarts):
    k = len(pools)
    s = int(fill * min(len(q) for q in pools))
    data = points_from_pools(key, [q.astype(np.float32) / 256.0 for q in pools],
                             num_clients=k, points_per_client=s, heterogeneity=p)
    truth = true_points(data)
    k_kfed, k_uifca = jax.random.split(jax.random.fold_in(key, 1))
    start = None
    if method in ("kfed", "kfed+uifca"):
        start = kfed(k_kfed, data.x, data.count, k).assign
        if method == "kfed":
            return purity(start, truth)
    flow = real_nvp((28, 28), mask="cyclic")
    _, hist = run_uifca(flow, data, k_uifca, cfg, assign=start, restarts=restarts)
    return hist["purity"][-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/mnist"))
    ap.add_argument("--data", default="rotated,digits")
    ap.add_argument("--methods", default="kfed")
    ap.add_argument("--fill", type=float, default=0.95)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--comm-rounds", type=int, default=40)
    ap.add_argument("--local-steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--restarts", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--out", type=output_file,
                    default=str(Path(__file__).parent / "results" / "uifca/table43.md"))
    a = ap.parse_args()
    xtr, ytr, _, _ = load_mnist_uint8(a.data_dir)
    rows, t0 = [], time.time()
    for name in a.data.split(","):
        groups = pools_for(name, xtr, ytr)
        k = 10 if name == "digits" else 4
        cfg = UIFCAConfig(num_clusters=k, cluster_rounds=a.rounds, comm_rounds=a.comm_rounds,
                          local_steps=a.local_steps, batch_size=64, lr=a.lr, chunk=a.chunk)
        for method in a.methods.split(","):
            vals = []
            for p in PS:
                # rotated: one run per digit (each digit's four rotations are the pools)
                runs = groups if name == "rotated" else [sum(groups, [])]
                t = time.time()
                v = np.mean([run_one(method, pools, jax.random.key(int(100 * p) + j), p, a.fill,
                                     cfg, a.restarts) for j, pools in enumerate(runs)])
                vals.append(100 * v)
                print(f"{name} {method} p={p}: purity {100 * v:.1f} ({time.time() - t:.0f}s)",
                      flush=True)
            rows.append((name, METHOD_NAMES[method], vals))
    lines = ["| data | method | " + " | ".join(f"p={p}" for p in PS) + " |",
             "|---|---|" + "---|" * len(PS)]
    for name, method, vals in rows:
        lines.append(f"| {name} | {method} (ours) | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
        if (name, method) in THESIS:
            lines.append(f"| {name} | {method} (thesis) | "
                         + " | ".join(str(v) for v in THESIS[(name, method)]) + " |")
    text = (generated_by() + "# UIFCA Table 4.3 (MNIST): purity % vs heterogeneity p\n\n"
            f"n = K clients, {a.fill} x smallest pool points each; rotated = mean over digits "
            f"2, 3, 4, 5; {time.time() - t0:.0f}s on {jax.devices()[0].platform}.\n\n"
            + "\n".join(lines) + "\n")
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
