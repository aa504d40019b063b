"""ClusterGAN + FedAvg rows of UIFCA Table 4.3 ([T] 4.3): purity on MNIST point clusters vs p.

Data: ``pools_for`` of benchmarks/uifca_table43.py (rotated: one digit rotated 0/90/180/270,
K = 4, digits 2, 3, 4, 5 averaged; digits: K = 10), n = K clients, each holding
``--fill`` x (smallest pool) points (or ``--points``) dealt by the heterogeneity recipe,
with the same data keys as uifca_table43.py. Method: ``fedclust_jax.algorithms.clustergan``
(one ClusterGAN trained by FedAvg over the K clients; a point's cluster is the argmax of
the encoder's cluster logits); purity after the last round, no label-based selection.

Defaults are the full setting: the paper's MNIST networks (w = 64, FC 1024, z_n of dim 30,
sigma 0.1, beta_n = beta_c = 10, WGAN-GP lambda 10, 5 critic updates per generator
update, batch 64), [T]'s SGD lr 5e-3, 800 communication rounds of M = 100 local generator
updates (UIFCA's T tau = 20 x 40 rounds of M = 100). That needs an accelerator; the
reduced CPU run is the second command:

    python benchmarks/clustergan_table43.py                                   # full (GPU)
    python benchmarks/clustergan_table43.py --data rotated --points 500 --rounds 50 \\
        --local-steps 10 --critic-steps 2 --batch 32 --width 8 --fc-width 128 --eval-every 10
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from fedclust_jax.algorithms.clustergan import ClusterGANConfig, run_clustergan
from fedclust_jax.data.points import points_from_pools
from fedclust_jax.models.clustergan import clustergan_nets

sys.path.insert(0, str(Path(__file__).parent))
from uifca_table43 import PS, THESIS, load_mnist_uint8, pools_for  # noqa: E402
from _common import output_file  # noqa: E402

FULL = dict(points=None, fill=0.95, rounds=800, local_steps=100, critic_steps=5, batch=64,
            lr=5e-3, optimizer="sgd", width=64, fc_width=1024, noise_dim=30)


def make_data(pools, key, p, fill, points):
    s = points if points is not None else int(fill * min(len(q) for q in pools))
    return points_from_pools(key, [q.astype(np.float32) / 256.0 for q in pools],
                             num_clients=len(pools), points_per_client=s, heterogeneity=p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir",
                    default=str(Path(__file__).resolve().parents[2] / "shared/data/mnist"))
    ap.add_argument("--data", default="rotated,digits")
    ap.add_argument("--digits", default="2,3,4,5", help="rotated: the digits averaged")
    ap.add_argument("--fill", type=float, default=FULL["fill"])
    ap.add_argument("--points", type=int, default=None,
                    help="points per client (default: fill x smallest pool)")
    ap.add_argument("--rounds", type=int, default=FULL["rounds"])
    ap.add_argument("--local-steps", type=int, default=FULL["local_steps"])
    ap.add_argument("--critic-steps", type=int, default=FULL["critic_steps"])
    ap.add_argument("--batch", type=int, default=FULL["batch"])
    ap.add_argument("--lr", type=float, default=FULL["lr"])
    ap.add_argument("--optimizer", default=FULL["optimizer"])
    ap.add_argument("--width", type=int, default=FULL["width"])
    ap.add_argument("--fc-width", type=int, default=FULL["fc_width"])
    ap.add_argument("--noise-dim", type=int, default=FULL["noise_dim"])
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--out", type=output_file, default=str(Path(__file__).parent / "results"
                                         / "uifca" / "table43_clustergan.md"))
    a = ap.parse_args()
    xtr, ytr, _, _ = load_mnist_uint8(a.data_dir)
    digits = [int(d) for d in a.digits.split(",")]
    rows, details, times, t0 = [], [], {}, time.time()
    for name in a.data.split(","):
        groups = pools_for(name, xtr, ytr)
        # rotated: one run per digit (its four rotations are the pools), as uifca_table43
        runs = ([(j, groups[j]) for j, d in enumerate((2, 3, 4, 5)) if d in digits]
                if name == "rotated" else [(0, sum(groups, []))])
        k = 10 if name == "digits" else 4
        cfg = ClusterGANConfig(num_clusters=k, noise_dim=a.noise_dim, comm_rounds=a.rounds,
                               local_steps=a.local_steps, critic_steps=a.critic_steps,
                               batch_size=a.batch, lr=a.lr, optimizer=a.optimizer,
                               chunk=a.chunk)
        nets = clustergan_nets(k, noise_dim=a.noise_dim, width=a.width, fc_width=a.fc_width)
        vals = []
        for p in PS:
            t, finals = time.time(), []
            for j, pools in runs:
                key = jax.random.key(int(100 * p) + j)
                data = make_data(pools, key, p, a.fill, a.points)
                _, _, hist = run_clustergan(nets, data, jax.random.fold_in(key, 2), cfg,
                                            eval_every=a.eval_every)
                finals.append(hist["purity"][-1])
                label = f"digit {(2, 3, 4, 5)[j]}" if name == "rotated" else "all"
                details.append((name, p, label, int(data.x.shape[1]), hist))
                print(f"{name} p={p} {label}: purity "
                      + " ".join(f"{v:.3f}" for v in hist["purity"])
                      + f" ({hist['seconds']:.0f}s)", flush=True)
            vals.append(100 * float(np.mean(finals)))
            times[(name, p)] = time.time() - t
            print(f"{name} p={p}: mean purity {vals[-1]:.1f} ({times[(name, p)]:.0f}s)",
                  flush=True)
        rows.append((name, vals))
    write_report(a, rows, details, times, time.time() - t0)


def write_report(a, rows, details, times, total):
    lines = ["| data | method | " + " | ".join(f"p={p}" for p in PS) + " |",
             "|---|---|" + "---|" * len(PS)]
    for name, vals in rows:
        lines.append(f"| {name} | ClusterGAN (ours) | "
                     + " | ".join(f"{v:.1f}" for v in vals) + " |")
        lines.append(f"| {name} | ClusterGAN (thesis) | "
                     + " | ".join(str(v) for v in THESIS[(name, "ClusterGAN")]) + " |")
    setting = dict(points=a.points, fill=a.fill, rounds=a.rounds, local_steps=a.local_steps,
                   critic_steps=a.critic_steps, batch=a.batch, lr=a.lr,
                   optimizer=a.optimizer, width=a.width, fc_width=a.fc_width,
                   noise_dim=a.noise_dim)
    changed = [f"`{k}` {FULL[k]} -> {v}" for k, v in setting.items() if v != FULL[k]]
    if a.data != "rotated,digits":
        changed.append(f"`data` rotated,digits -> {a.data}")
    if a.digits != "2,3,4,5":
        changed.append(f"`digits` 2,3,4,5 -> {a.digits}")
    dev = jax.devices()[0]
    machine = (f"{os.cpu_count()}-core {platform.machine()} CPU" if dev.platform == "cpu"
               else f"{dev.device_kind}")
    evals = details[0][4]["round"] if details else []
    det = ["| data | p | run | points/client | purity at rounds "
           + ", ".join(map(str, evals)) + " | seconds |", "|---|---|---|---|---|---|"]
    for name, p, label, s, hist in details:
        det.append(f"| {name} | {p} | {label} | {s} | "
                   + " ".join(f"{100 * v:.1f}" for v in hist["purity"])
                   + f" | {hist['seconds']:.0f} |")
    per_p = ", ".join(f"{n} p={p}: {t:.0f}s" for (n, p), t in times.items())
    from provenance import generated_by
    text = (
        generated_by()
        + "# UIFCA Table 4.3: ClusterGAN + FedAvg, purity % vs heterogeneity p\n\n"
        f"Machine: {machine}, jax {jax.__version__} ({dev.platform}); total wall time "
        f"{total:.0f}s ({per_p}; each includes compilation where shapes change).\n\n"
        "n = K clients; rotated = mean over the digits' runs; purity after the last "
        "round (argmax of the encoder's cluster logits, no label-based selection).\n\n"
        + "\n".join(lines) + "\n\n"
        "Reductions from the full setting (`python benchmarks/clustergan_table43.py`): "
        + ("; ".join(changed) if changed else "none") + ".\n\n"
        "Per run (purity % at the evaluated rounds):\n\n" + "\n".join(det) + "\n")
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
