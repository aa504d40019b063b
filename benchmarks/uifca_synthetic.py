"""UIFCA Table 4.1 ([T] chapter 4): purity on Gaussian and subspace clusters vs p.

Setting ([T] 4.3): d = 32, K = 4 clusters, n = 4 clients x 1000 points, p in
{0, .25, .5, .75, 1}; Gaussian centres Bernoulli(0.5)^d times R = 5, sigma = 1; subspace
clusters of rank 16 (plus jitter, see ``subspace_clusters``). UIFCA with the affine flow,
T = 20 cluster rounds, tau = 100 communication rounds, M = 100 local steps (all [T]);
batch N = 32, SGD lr 1e-3, init noise 0.01 (unspecified in [T]). k-FED with local
k-means (K centres per client, best of 10 k-means++ seedings). UIFCA runs ``--restarts``
independent initialisations (a vmap axis) and keeps the lowest mean NLL (no labels);
with ``--select-after t0`` only that restart, chosen after t0 rounds, runs on to T.
Seeds are the outer loop and the table is rewritten after every cell, so a stopped run
leaves the seeds it finished. Writes a markdown table (mean over seeds, and min) beside
[T]'s numbers.

    python benchmarks/uifca_synthetic.py [--seeds 2] [--restarts 8] [--select-after 5]
        [--init-assign models] [--out PATH]
    python benchmarks/uifca_synthetic.py --initial-splits 200 [--init-assign random]
    python benchmarks/uifca_synthetic.py --kfed-metrics --seeds 3 --datasets Subspace
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import numpy as np

from provenance import generated_by
from _common import output_file
from sklearn.metrics import normalized_mutual_info_score

from fedclust_jax.algorithms.kfed import kfed
from fedclust_jax.algorithms.uifca import INIT_ASSIGNS, UIFCA, UIFCAConfig, run_uifca
from fedclust_jax.data.points import true_points
from fedclust_jax.data.points import gaussian_clusters, subspace_clusters
from fedclust_jax.metrics import adjusted_rand_index, misclustering, purity
from fedclust_jax.models.flows import affine_flow

PS = (0.0, 0.25, 0.5, 0.75, 1.0)
THESIS = {
    ("Gaussian", "UIFCA"): (100, 100, 100, 100, 100),
    ("Gaussian", "k-FED"): (100, 100, 100, 100, 100),
    ("Subspace", "UIFCA"): (100, 100, 100, 100, 100),
    ("Subspace", "k-FED"): (11.5, 11.7, 12.5, 15.8, 19.3),
}
GENERATORS = {"Gaussian": gaussian_clusters, "Subspace": subspace_clusters}


def run(seeds, cfg: UIFCAConfig, datasets, restarts: int, select_after, scaling: str,
        on_cell=None, ps=PS):
    """seeds: iterable of seed numbers; ps: the heterogeneity levels to run."""
    flow = affine_flow(32)
    results, curves, screens = {}, {}, {}
    for seed in seeds:
        for name in datasets:
            for p in ps:
                key = jax.random.key(1000 * seed + int(100 * p))
                k_data, k_kfed, k_uifca = jax.random.split(key, 3)
                extra = dict(scaling=scaling) if name == "Gaussian" else {}
                data = GENERATORS[name](k_data, heterogeneity=p, **extra)
                truth = true_points(data)
                t = time.time()
                kf = purity(kfed(k_kfed, data.x, data.count, 4).assign, truth)
                _, hist = run_uifca(flow, data, k_uifca, cfg, restarts=restarts,
                                    select_after=select_after)
                results.setdefault((name, "k-FED", p), []).append(100 * kf)
                results.setdefault((name, "UIFCA", p), []).append(100 * hist["purity"][-1])
                curves[(name, p, seed)] = hist["purity"]
                screens[(name, p, seed)] = [round(100 * v, 1) for v in hist["final_purity"]]
                print(f"{name} p={p} seed={seed}: k-FED {100 * kf:.1f}  UIFCA "
                      f"{100 * hist['purity'][-1]:.1f} (curve "
                      f"{' '.join(f'{100 * v:.0f}' for v in hist['purity'])}; restarts' purity "
                      f"when compared {screens[(name, p, seed)]}, kept {hist['kept']}) "
                      f"{time.time() - t:.0f}s; load {os.getloadavg()[0]:.1f}", flush=True)
                if on_cell is not None:
                    on_cell(results, curves, screens)
    return results, curves, screens


def initial_splits(cfg: UIFCAConfig, draws: int, scaling: str) -> str:
    """How often the initial assignment gives every true cluster its own flow: over
    ``draws`` initialisations per p (Gaussian data of seed 0), the share in which each of
    the K clusters is the strict (> 50%) majority of a different flow, the mean initial
    purity and the mean share of the largest flow. No training."""
    flow, lines = affine_flow(32), []
    alg = UIFCA(flow, cfg)
    for p in PS:
        k_data, _, k_uifca = jax.random.split(jax.random.key(int(100 * p)), 3)
        data = gaussian_clusters(k_data, heterogeneity=p, scaling=scaling)
        truth = true_points(data).ravel()
        assign = np.asarray(jax.vmap(lambda k: alg.init(k, data).assign)(
            jax.random.split(k_uifca, draws))).reshape(draws, -1)
        ok, pur, big = 0, [], []
        for a in assign:                      # host-side statistics of the draws
            counts = np.zeros((cfg.num_clusters, 4))
            np.add.at(counts, (a, truth), 1)
            size = counts.sum(1)
            strict = (size > 0) & (counts.max(1) > 0.5 * size)
            ok += len(set(counts.argmax(1)[strict])) == 4
            pur.append(purity(a, truth))
            big.append(size.max() / len(truth))
        lines.append(f"p={p}: every cluster the majority of its own flow in {ok}/{draws}; "
                     f"initial purity {100 * np.mean(pur):.1f}%; largest flow "
                     f"{100 * np.mean(big):.0f}% of the points")
    return "\n".join(lines)


def kfed_metrics(seeds: int, datasets, scaling: str) -> str:
    """k-FED's assignment of every Table 4.1 cell scored five ways (mean over seeds), to
    look for the measure behind [T]'s subspace row (below the 1/K purity floor): purity,
    raw-label accuracy (found label == true label, no matching), Hungarian accuracy,
    NMI and ARI."""
    lines = ["| data | p | purity | raw-label acc. | Hungarian acc. | NMI | ARI |",
             "|---|---|---|---|---|---|---|"]
    for name in datasets:
        for p in PS:
            rows = []
            for seed in range(seeds):
                k_data, k_kfed, _ = jax.random.split(jax.random.key(1000 * seed + int(100 * p)), 3)
                extra = dict(scaling=scaling) if name == "Gaussian" else {}
                data = GENERATORS[name](k_data, heterogeneity=p, **extra)
                t = true_points(data).ravel()
                f = np.asarray(kfed(k_kfed, data.x, data.count, 4).assign).ravel()
                rows.append((purity(f, t), np.mean(f == t), 1 - misclustering(f, t),
                             normalized_mutual_info_score(t, f), adjusted_rand_index(f, t)))
            lines.append(f"| {name} | {p} | " + " | ".join(
                f"{100 * v:.1f}" for v in np.mean(rows, axis=0)) + " |")
    return "\n".join(lines)


def table(results, cfg_line, datasets) -> str:
    lines = ["| data | method | " + " | ".join(f"p={p}" for p in PS) + " |",
             "|---|---|" + "---|" * len(PS)]
    for name in datasets:
        for method in ("UIFCA", "k-FED"):
            ours = []
            for p in PS:
                v = np.array(results.get((name, method, p), []))
                ours.append("-" if v.size == 0 else f"{v.mean():.1f}" + (
                    f" (min {v.min():.1f}, {int((v >= 99.5).sum())}/{v.size} at 100)"
                    if v.size > 1 else ""))
            lines.append(f"| {name} | {method} (ours) | " + " | ".join(ours) + " |")
            lines.append(f"| {name} | {method} (thesis) | "
                         + " | ".join(f"{v}" for v in THESIS[(name, method)]) + " |")
    return "\n".join([f"Purity % (mean over seeds; {cfg_line}).", ""] + lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0, help="run seeds first .. first + seeds - 1")
    ap.add_argument("--ps", default=",".join(map(str, PS)), help="comma-separated p values")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--restarts", type=int, default=8)
    ap.add_argument("--select-after", type=int, default=5,
                    help="compare the restarts after this many rounds; only the best runs "
                         "on (0: every restart runs all rounds)")
    ap.add_argument("--init-assign", default="models", choices=INIT_ASSIGNS)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--standardize", action="store_true",
                    help="UIFCA on (x - mean) / std (not in the thesis)")
    ap.add_argument("--scaling", default="multiply", help="Gaussian centres: R b or R b/||b||")
    ap.add_argument("--comm-rounds", type=int, default=100)
    ap.add_argument("--local-steps", type=int, default=100)
    ap.add_argument("--datasets", default="Gaussian,Subspace")
    ap.add_argument("--init-noise", type=float, default=0.01)
    ap.add_argument("--initial-splits", type=int, default=0,
                    help="only report how often the initial assignment of this many "
                         "initialisations gives every cluster its own flow, then exit")
    ap.add_argument("--kfed-metrics", action="store_true",
                    help="only score k-FED's assignments five ways (over --seeds), then exit")
    ap.add_argument("--out", type=output_file,
                    default=str(Path(__file__).parent / "results" / "uifca/table41.md"))
    a = ap.parse_args()
    a.select_after = a.select_after or None
    datasets = a.datasets.split(",")
    cfg = UIFCAConfig(num_clusters=4, cluster_rounds=a.rounds, comm_rounds=a.comm_rounds,
                      local_steps=a.local_steps, lr=a.lr, init_assign=a.init_assign,
                      init_noise=a.init_noise, standardize=a.standardize)
    if a.initial_splits:
        print(initial_splits(cfg, a.initial_splits, a.scaling))
        return
    if a.kfed_metrics:
        print(kfed_metrics(a.seeds, datasets, a.scaling))
        return
    t0 = time.time()

    def write(results, curves, screens, done=False):
        sel = (f"all {a.restarts} run {a.rounds} rounds" if a.select_after is None else
               f"compared after {a.select_after} rounds, only the best runs on")
        cfg_line = (f"UIFCA T={a.rounds}, tau={a.comm_rounds}, M={a.local_steps}, N=32, SGD "
                    f"lr {a.lr:g}, init noise {a.init_noise:g}, initial assignment "
                    f"{a.init_assign!r}; "
                    f"{a.restarts} restart(s) ({sel}), kept by lowest mean NLL (no labels); "
                    f"Gaussian centres scaling {a.scaling!r}; standardized points: "
                    f"{a.standardize}; {time.time() - t0:.0f}s on {jax.devices()[0].platform}"
                    f"{'' if done else '; PARTIAL: run stopped or still going'}")
        text = generated_by() + "# UIFCA Table 4.1 (synthetic)\n\n" + table(results, cfg_line, datasets)
        text += ("\n\nUIFCA purity per cluster round of the kept run (round 0 = initial "
                 "assignment), and every restart's purity when the restarts were compared:\n\n")
        for (name, p, seed), curve in curves.items():
            text += (f"- {name} p={p} seed={seed}: " + " ".join(f"{100 * v:.0f}" for v in curve)
                     + f"; restarts {screens[(name, p, seed)]}\n")
        Path(a.out).write_text(text)
        return text

    seeds = range(a.first_seed, a.first_seed + a.seeds)
    ps = tuple(float(p) for p in a.ps.split(","))
    if not set(ps) <= set(PS):
        ap.error(f"--ps must be a subset of {PS}")
    results, curves, screens = run(seeds, cfg, datasets, a.restarts, a.select_after,
                                   a.scaling, on_cell=write, ps=ps)
    print(write(results, curves, screens, done=True))


if __name__ == "__main__":
    main()
