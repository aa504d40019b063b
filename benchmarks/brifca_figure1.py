"""BR-IFCA paper, Figure 1: dist = (1/k) sum_j ||theta_hat_j - theta*_j|| against d and k.

    python benchmarks/brifca_figure1.py [--trials 50] [--rounds 300] [--panels a b c]
        [--out runs/brifca_figure1.jsonl]
    python benchmarks/brifca_figure1.py --combine runs/brifca_figure1.jsonl \
        [--notes-file benchmarks/notes/brifca_figure1.md] --out benchmarks/results/brifca_figure1.md

Setting (paper): n = 100 per machine, sigma^2 = 0.2, byz_frac = trim_frac = 0.05 (the
outlier attack: own norm-3 theta_b, cluster by loss at 3 theta_j, gradient at 3 theta_j),
38 honest machines per cluster, 300 iterations, lr 0.01 (the authors' code), random
unit-norm Bernoulli initial models (the code). Panels: (a) k = 5, m = 200, d in
{20, 50, 100, 200, 500}; (b) k = 10, m = 400, same d; (c) d = 500, k in {2, 5, 10, 15}.
Methods: IFCA-FedAvg (gradient averaging with the IFCA code's |S_j| / m step scaling),
BR-IFCA with the coordinate-wise median and with the beta-trimmed mean (paper step), and
Three-Stage (100 ERM GD steps from 0 with step 0.5 / (1 + sqrt(d / n))^2, below 2 / the
largest Hessian eigenvalue of the least squares, 100 trimmed k-means iterations, then the
same number of trimmed-mean GD rounds as the others; seeding unstated: k-means++ once, and
as a fifth method the best of 10 uniform seedings by trimmed cost, see ``ThreeStage``).
Trials are a vmap axis of one compiled program per setting and method (``--trial-batch`` b:
``lax.map`` over chunks of b vmapped trials, to bound memory). dist is reported with one-to-one (Hungarian) matching
and, as the code, nearest-truth matching; mean and standard error over trials.
``--compare OLD NEW`` compares two JSONL files' shared cells trial by trial.
``--init near-truth`` starts BR-IFCA's models a quarter of the smallest centre distance from
the truth (the theory's assumption) instead; ``--per-trial FILE`` keeps every trial's
per-cluster errors, and ``--summarize FILE`` counts the trials that lost a cluster.
``--out FILE.jsonl`` appends one record per (setting, method) as soon as it finishes: the
command, trials, seconds (wall and CPU, ``uptime`` before), mean and standard error of dist
(Hungarian), the mean nearest-truth dist and every trial's details (the ``--per-trial``
fields, so ``--summarize`` reads it too). ``--combine JSONL... --out FILE.md`` writes one
table per run setting (trials, rounds, lr, init, sort), the run times and the commands,
then ``--notes-file``; a later record of the same setting and method replaces an earlier
one. ``--figure PNG`` draws the figure from the records of ``--cells`` (JSONL, default
results/brifca_figure1.jsonl; random init only) and, dashed in panel (a), the near-truth
records of ``--near-truth`` where given; no rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig
from fedclust_jax.algorithms.three_stage import ThreeStage, ThreeStageConfig
from fedclust_jax.attacks.byzantine import byzantine_mask
from fedclust_jax.core.robust import METHODS as METHODS_SORT
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.robust_synthetic import brifca_regression
from fedclust_jax.metrics import matched_distances, parameter_error
from fedclust_jax.models.linear import linear_regression

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_jsonl, output_file  # noqa: E402
from provenance import command, generated_by  # noqa: E402

PANELS = {
    "a": [(5, 200, d) for d in (20, 50, 100, 200, 500)],
    "b": [(10, 400, d) for d in (20, 50, 100, 200, 500)],
    "c": [(k, 40 * k, 500) for k in (2, 5, 10, 15)],
}
BYZ_FRAC = TRIM_FRAC = 0.05            # the paper's fixed Byzantine and trimming fractions
THREE_STAGE_R = "Three-Stage, best of 10 uniform seedings"
METHODS = ("IFCA-FedAvg", "BR-IFCA median", "BR-IFCA trimmed mean", "Three-Stage", THREE_STAGE_R)


def build(method, k, d, lr, sort_method="auto"):
    common = dict(num_clusters=k, byz_frac=BYZ_FRAC, attack="outlier",
                  local=LocalTraining(steps=1, lr=lr))
    if method.startswith("Three-Stage"):
        seeding = dict(kmeans_seeding="random", kmeans_restarts=10) if method == THREE_STAGE_R else {}
        return ThreeStage(linear_regression(d, init="zeros"), ThreeStageConfig(
            erm_steps=100, erm_lr=0.5 / (1 + np.sqrt(d / 100)) ** 2, kmeans_iters=100,
            trim_frac=TRIM_FRAC, **seeding, **common))
    agg = {"IFCA-FedAvg": "mean", "BR-IFCA median": "median",
           "BR-IFCA trimmed mean": "trimmed_mean"}[method]
    return BRIFCA(linear_regression(d), BRIFCAConfig(
        aggregator=agg, trim_frac=TRIM_FRAC, init="unit_bernoulli", method=sort_method,
        step="ifca" if method == "IFCA-FedAvg" else "paper", **common))


def near_truth(key, truth):
    """theta*_j plus a random direction of length a quarter of the smallest distance between
    true centres [k, d]: the theory's good initialisation (||theta_j - theta*_j|| <=
    (1/4) sqrt(lambda / L) Delta, lambda = L for this least squares)."""
    gaps = jnp.linalg.norm(truth[:, None] - truth[None], axis=-1)
    delta = jnp.min(jnp.where(jnp.eye(len(truth), dtype=bool), jnp.inf, gaps))
    u = jax.random.normal(key, truth.shape)
    return truth + 0.25 * delta * u / jnp.linalg.norm(u, axis=1, keepdims=True)


def run_setting(method, k, m, d, trials, rounds, lr, trial_batch=0, init="random",
                sort_method="auto"):
    """Per trial: dist with Hungarian and nearest matching, the smallest distance between
    true centres, and a dict of lists: the Hungarian-matched distance of each cluster [k]
    and each model's final honest and Byzantine client counts [K]."""
    alg = build(method, k, d, lr, sort_method)

    def trial(t):
        key = jax.random.fold_in(jax.random.key(0), t)
        data = brifca_regression(jax.random.fold_in(key, 0), num_clients=m, num_clusters=k,
                                 byz_frac=BYZ_FRAC, dim=d, samples_per_client=100,
                                 test_samples_per_client=1, noise_var=0.2)
        params = ({"theta": near_truth(jax.random.fold_in(key, 2), data.true_params)}
                  if init == "near-truth" else None)
        state = alg.init(jax.random.fold_in(key, 1), data, params)
        state = jax.lax.scan(lambda s, r: (alg.round(s, jax.random.fold_in(key, 10 + r), data)[0], None),
                             state, jnp.arange(rounds))[0]
        return state.params["theta"], data.true_params, state.assign

    ts = jnp.arange(trials)
    if trial_batch and trial_batch < trials:   # vmap inside chunks of trial_batch trials
        out = jax.jit(lambda ts: jax.lax.map(trial, ts, batch_size=trial_batch))(ts)
    else:                                      # one vmap over all trials
        out = jax.jit(jax.vmap(trial))(ts)
    est, truth, assign = map(np.asarray, out)
    byz = np.asarray(byzantine_mask(m, BYZ_FRAC))
    members = assign[:, :, None] == np.arange(k)                   # [trials, m, K]
    sizes = dict(honest_sizes=members[:, ~byz].sum(1).tolist(),
                 byzantine_sizes=members[:, byz].sum(1).tolist())
    hung = [parameter_error(e, t, "hungarian") for e, t in zip(est, truth)]
    near = [parameter_error(e, t, "nearest") for e, t in zip(est, truth)]
    per_cluster = [matched_distances(e, t).tolist() for e, t in zip(est, truth)]
    return hung, near, [min_separation(t) for t in truth], dict(cluster_errors=per_cluster, **sizes)


def min_separation(centers):
    """Smallest distance between two of the true cluster parameters [k, d]."""
    d = np.linalg.norm(centers[:, None] - centers[None], axis=-1)
    return float(d[np.triu_indices(len(centers), 1)].min())


def lost_clusters(r, lost=0.5):
    """Per trial of a record with per-trial fields: bool [trials] whether some true centre's
    matched estimate is farther than ``lost`` from it, and bool [trials] whether some model
    ends chosen by Byzantine clients alone."""
    bad = np.array(r["cluster_errors"]).max(axis=1) > lost
    held = ((np.array(r["honest_sizes"]) == 0) & (np.array(r["byzantine_sizes"]) > 0)).any(1)
    return bad, held


def read_records(path, field):
    """The records of a JSONL file that have ``field`` ("hungarian": a cell's per-trial
    fields; "mean": its summary), without blank lines and the provenance line."""
    with open(path) as fh:
        return [r for r in map(json.loads, filter(str.strip, fh)) if field in r]


def summarize_per_trial(path, lost=0.5):
    """Prints, per record of a ``--per-trial`` file: mean and median dist; the trials that
    lost a cluster (some true centre's matched estimate farther than ``lost``, half the
    typical distance between centres), how many of them end with a model that only
    Byzantine clients choose, and the mean dist of the others; and how dist
    relates to the smallest distance between true centres."""
    for r in read_records(path, "hungarian"):
        h, sep = np.array(r["hungarian"]), np.array(r["min_separation"])
        bad, held = lost_clusters(r, lost)
        low = sep < np.median(sep)
        rest = f"{h[~bad].mean():.3f}" if (~bad).any() else "-"
        print(f"k={r['k']} m={r['m']} d={r['d']} {r['method']} (init {r.get('init', 'random')}): "
              f"dist mean {h.mean():.3f}, median {np.median(h):.3f}; {bad.sum()} of {h.size} "
              f"trials lost a cluster ({(bad & held).sum()} of them with a model held by Byzantines "
              f"alone; mean of the rest {rest}); smallest centre distance "
              f"{sep.min():.2f}-{sep.max():.2f}, correlation with dist "
              f"{np.corrcoef(sep, h)[0, 1]:+.2f}; dist where it is below / above its median "
              f"{h[low].mean():.3f} / {h[~low].mean():.3f}")


RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MARKERS = {"IFCA-FedAvg": "s", "BR-IFCA median": "o", "BR-IFCA trimmed mean": "^",
           "Three-Stage": "D", THREE_STAGE_R: "v"}


def read_near_truth(path):
    """{(k, m, d, method): (mean, standard error)} of the near-truth records of a
    ``--per-trial`` file."""
    out = {}
    for r in read_records(path, "hungarian"):
        if r.get("init") == "near-truth":
            h = np.array(r["hungarian"])
            out[(r["k"], r["m"], r["d"], r["method"])] = (h.mean(), h.std() / np.sqrt(h.size))
    return out


def compare_trials(old_path, new_path):
    """Lines comparing, trial by trial, the cells (k, m, d, method, init) found in both
    files (``--per-trial`` or ``--out`` JSONL; the later record of a cell in a file): the
    first min(trials) trials, which share their data and initialisation keys, are "equal"
    when every per-trial field (dist both ways, per-cluster errors, client counts) is
    bit-for-bit the same, else the fields that differ and the largest difference of dist
    are given."""
    def cells(path):
        return {(r["k"], r["m"], r["d"], r["method"], r.get("init", "random")): r
                for r in read_records(path, "hungarian")}
    old, new = cells(old_path), cells(new_path)
    lines = []
    for key in [key for key in new if key in old]:
        a, b = old[key], new[key]
        n = min(len(a["hungarian"]), len(b["hungarian"]))
        fields = [f for f in a if f in b and isinstance(a[f], list) and len(a[f]) >= n]
        differ = [f for f in fields if a[f][:n] != b[f][:n]]
        diff = np.abs(np.array(a["hungarian"][:n]) - np.array(b["hungarian"][:n])).max()
        verdict = (f"differ in {', '.join(differ)}: largest dist difference {diff:.2e}"
                   if differ else f"equal ({', '.join(fields)})")
        lines.append("k={} m={} d={} {} (init {}): {} trials {}; mean dist {:.4f} -> {:.4f}".format(
            *key, n, verdict, np.mean(a["hungarian"][:n]), np.mean(b["hungarian"][:n])))
    return lines or [f"no cell of {new_path} is in {old_path}"]


def read_cells(paths, init="random"):
    """Records of ``--out`` JSONL files with the given init, a later record of the same
    setting and method replacing an earlier one, in file order."""
    keyed = {record_key(r): r for path in paths for r in read_records(path, "mean")}
    return [r for r in keyed.values() if init is None or r["init"] == init]


def record_key(r):
    """(k, m, d, method, trials, rounds, lr, init, sort): one cell of one run setting."""
    return (r["k"], r["m"], r["d"], r["method"], r["trials"], r["rounds"], r["lr"], r["init"],
            r["sort_method"])


def cells_table(records):
    """{(k, m, d): {method: (mean, standard error)}} of records (``draw_figure``'s input);
    where a cell ran with several trial counts, the one with most trials."""
    table, trials = {}, {}
    for r in records:
        key = (r["k"], r["m"], r["d"])
        if r["trials"] >= trials.get(key + (r["method"],), 0):
            trials[key + (r["method"],)] = r["trials"]
            table.setdefault(key, {})[r["method"]] = (r["mean"], r["se"])
    return table


def cell(r):
    return f"{r['mean']:.3f} ± {r['se']:.3f} ({r['nearest_mean']:.3f})"


def combine(paths, argv, notes_file=None):
    """The result file: one table per run setting of the records in ``paths`` (rows (k, m,
    d), columns the methods found, cells "mean ± se (nearest)"), the run time of every cell
    with its load, the commands, then ``notes_file``."""
    records = read_cells(paths, init=None)
    if not records:
        sys.exit(f"no (setting, method) records in {', '.join(paths)}; run with --out FILE.jsonl")
    lines = [generated_by([__file__, *argv]).rstrip("\n"), "",
             "# BR-IFCA Figure 1 reproduction", "",
             "dist = (1/k) sum_j ||theta_hat_j - theta*_j||, mean ± standard error over trials, "
             "with one-to-one (Hungarian) matching; in parentheses the mean with the "
             "nearest-truth matching of the authors' code. Outlier attack, byz_frac = "
             "trim_frac = 0.05, n = 100, sigma^2 = 0.2. Trial t's data and initialisation keys "
             "are folded from t, so the first trials of a setting are the same in every run. "
             "Each cell is one record of the JSONL files " + ", ".join(f"`{p}`" for p in paths)
             + ", appended by the commands listed below.", ""]
    groups = {}
    for r in records:
        groups.setdefault((r["trials"], r["rounds"], r["lr"], r["init"], r["sort_method"]),
                          []).append(r)
    for (trials, rounds, lr, init, sort), rs in sorted(groups.items(), key=lambda g: (
            -g[0][0], str(g[0]))):
        methods = [m for m in METHODS if any(r["method"] == m for r in rs)]
        sort = "" if sort == "auto" else f", sort {sort}"
        lines += [f"## {trials} trials, {rounds} rounds, lr {lr}, init {init}{sort}", "",
                  "| k | m | d | " + " | ".join(methods) + " |",
                  "|---|---|---|" + "---|" * len(methods)]
        byset = {}
        for r in rs:
            byset.setdefault((r["k"], r["m"], r["d"]), {})[r["method"]] = r
        for (k, m, d), row in sorted(byset.items(), key=lambda kv: (kv[0][0] != 5, kv[0])):
            lines.append(f"| {k} | {m} | {d} | " + " | ".join(
                cell(row[meth]) if meth in row else "not run" for meth in methods) + " |")
        lines.append("")
    detailed = [r for r in records if "cluster_errors" in r]
    if detailed:
        lines += ["## Trials that lost a cluster", "",
                  "A trial lost a cluster when some true centre's matched (Hungarian) estimate "
                  "is farther than 0.5 from it (as `--summarize`); \"held by Byzantines\": of "
                  "those, the trials where some model ends chosen by Byzantine clients alone; "
                  "the last column is the mean dist of the trials that kept every cluster.", "",
                  "| k | m | d | method | trials | init | lost a cluster | held by Byzantines | "
                  "dist of the others |", "|---|---|---|---|---|---|---|---|---|"]
        for r in detailed:
            bad, held = lost_clusters(r)
            h = np.array(r["hungarian"])
            rest = f"{h[~bad].mean():.3f}" if (~bad).any() else "-"
            lines.append(f"| {r['k']} | {r['m']} | {r['d']} | {r['method']} | {r['trials']} | "
                         f"{r['init']} | {bad.sum()} | {(bad & held).sum()} | {rest} |")
        lines.append("")
    lines += ["## Run time", "",
              "Wall and CPU seconds of each cell (one compiled program, all its trials, "
              "including compilation) and the load average (`uptime`) just before it started.",
              "", "| k | m | d | method | trials | init | seconds | CPU seconds | load before |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        load = r["uptime_before"].split("load average:")[-1].strip()
        lines.append(f"| {r['k']} | {r['m']} | {r['d']} | {r['method']} | {r['trials']} | "
                     f"{r['init']} | {r['seconds']:.0f} | {r['cpu_seconds']:.0f} | {load} |")
    lines += ["", "Commands that produced the records:", ""]
    lines += [f"    {c}" for c in dict.fromkeys(r["command"] for r in records)]
    lines.append("")
    text = "\n".join(lines)
    if notes_file:
        text += "\n" + open(notes_file).read()
    return text


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def draw_figure(table, near, path, title=None):
    """Panels (a) k = 5 and (b) k = 10: dist against d; (c) d = 500: dist against k; error
    bars one standard error; dashed: BR-IFCA started near the truth (panel (a))."""
    from fedclust_jax.plot import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 5))
    panels = [("a", "d", [key for key in table if key[0] == 5 and key[1] == 200]),
              ("b", "d", [key for key in table if key[0] == 10 and key[1] == 400]),
              ("c", "k", [key for key in table if key[2] == 500])]
    for ax, (name, x, keys) in zip(axes, panels):
        keys = sorted(keys, key=lambda key: key[2] if x == "d" else key[0])
        if not keys:
            ax.set_title(f"({name}) not in the records")
            ax.axis("off")
            continue
        xs = [key[2] if x == "d" else key[0] for key in keys]
        for i, method in enumerate(METHODS):
            cells = [table[key].get(method) for key in keys]
            pts = [(xv, c) for xv, c in zip(xs, cells) if c is not None]
            if pts:
                ax.errorbar([p[0] for p in pts], [p[1][0] for p in pts], [p[1][1] for p in pts],
                            marker=MARKERS[method], color=f"C{i}", capsize=3, markersize=4,
                            label={"Three-Stage": "Three-Stage (k-means++)",
                                   THREE_STAGE_R: "Three-Stage, 10 uniform seedings"}.get(method, method))
            tn = [(key[2], near[key + (method,)]) for key in keys if key + (method,) in near]
            if name == "a" and tn:
                ax.errorbar([p[0] for p in tn], [p[1][0] for p in tn], [p[1][1] for p in tn],
                            marker=MARKERS[method], color=f"C{i}", capsize=3, markersize=4,
                            linestyle="--", mfc="none", label=f"{method}, near-truth init")
        k = keys[0][0] if x == "d" else None
        ax.set_title(f"({name}) k = {k}, m = {40 * k}" if k else "(c) d = 500, m = 40 k")
        ax.set_xlabel(x)
        ax.set_ylabel("dist (Hungarian matching)")
        ax.set_xticks(xs)
        ax.set_ylim(bottom=0)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.suptitle(title or "BR-IFCA Figure 1 reproduction: outlier attack, 5% Byzantine, "
                 "n = 100, sigma^2 = 0.2; mean ± standard error over trials", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--panels", nargs="*", default=["a", "b", "c"])
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--trial-batch", type=int, default=0,
                    help="trials per vmapped chunk (0: vmap all trials at once)")
    ap.add_argument("--max-clients", type=int, default=10_000)
    ap.add_argument("--dims", nargs="*", type=int, default=None, help="subset of d (panels a, b)")
    ap.add_argument("--ks", nargs="*", type=int, default=None, help="subset of k (panel c)")
    ap.add_argument("--out", type=output_file, default=None,
                    help="run: JSONL file, one record appended per (setting, method); "
                         "--combine: the markdown file to write")
    ap.add_argument("--combine", nargs="+", metavar="JSONL",
                    help="only write the tables (--out) from JSONL files of --out")
    ap.add_argument("--notes-file", default=None,
                    help="markdown appended to the --combine output (committed notes)")
    ap.add_argument("--per-trial", type=output_file, default=None,
                    help="JSON-lines file: every trial's errors (overall and per cluster), each "
                         "model's final honest and Byzantine client counts, and the smallest "
                         "true-centre distance")
    ap.add_argument("--init", choices=("random", "near-truth"), default="random",
                    help="BR-IFCA's initial models: random unit Bernoulli vectors (the code) "
                         "or near-truth (the theory's assumption, see near_truth)")
    ap.add_argument("--sort-method", choices=METHODS_SORT, default="auto",
                    help="BR-IFCA's coordinate-wise sorting backend (core.robust module docstring)")
    ap.add_argument("--summarize", default=None, metavar="FILE",
                    help="only print the per-trial summary of a --per-trial or --out JSONL file")
    ap.add_argument("--compare", nargs=2, default=None, metavar=("OLD", "NEW"),
                    help="only compare, trial by trial, the cells two JSONL files share")
    ap.add_argument("--figure", type=output_file, default=None, metavar="PNG",
                    help="only draw the figure from --cells and --near-truth (no run)")
    ap.add_argument("--cells", nargs="+", default=[os.path.join(RESULTS, "brifca_figure1.jsonl")],
                    help="JSONL files of --out whose random-init records --figure draws")
    ap.add_argument("--near-truth", default=None,
                    help="--per-trial or --out JSONL file whose near-truth records --figure "
                         "draws dashed in panel (a) (default: none)")
    args = ap.parse_args(argv)
    for path in [args.notes_file, args.summarize, args.near_truth, *(args.combine or []),
                 *(args.compare or []),
                 *(args.cells if args.figure else [])]:
        if path and not os.path.isfile(path):
            ap.error(f"{path}: no such file")
    if args.combine:
        if not args.out or not args.out.endswith(".md"):
            ap.error("--combine writes markdown: give --out FILE.md")
        text = combine(args.combine, argv, args.notes_file)
        with open(args.out, "w") as fh:
            fh.write(text)
        print(text)
        return
    if args.figure:
        near = read_near_truth(args.near_truth) if args.near_truth else {}
        draw_figure(cells_table(read_cells(args.cells)), near, args.figure,
                    "BR-IFCA Figure 1 reproduction: outlier attack, 5% Byzantine, n = 100, "
                    "sigma^2 = 0.2; mean ± standard error over trials, from "
                    + ", ".join(os.path.basename(c) for c in args.cells))
        print(f"figure written to {args.figure}")
        return
    if args.summarize:
        summarize_per_trial(args.summarize)
        return
    if args.compare:
        print("\n".join(compare_trials(*args.compare)))
        return
    if args.out and not args.out.endswith(".jsonl"):
        ap.error(f"--out {args.out}: a run appends JSONL records (--out FILE.jsonl); the "
                 "markdown tables come from --combine FILE.jsonl --out FILE.md")
    if args.init == "near-truth" and any(m.startswith("Three-Stage") for m in args.methods):
        ap.error("--init near-truth applies to the iterative methods; Three-Stage starts its "
                 "local ERMs from zero: leave it out with --methods")
    cmd = command([__file__, *argv])
    lines = []
    for panel in args.panels:
        sort = "" if args.sort_method == "auto" else f", sort {args.sort_method}"
        lines += [f"\n### Panel ({panel}): {args.trials} trials, {args.rounds} rounds, lr {args.lr}, init {args.init}{sort}\n",
                  "| k | m | d | " + " | ".join(args.methods) + " |",
                  "|---|---|---|" + "---|" * len(args.methods)]
        for k, m, d in PANELS[panel]:
            if m > args.max_clients or (panel != "c" and args.dims and d not in args.dims) or (
                    panel == "c" and args.ks and k not in args.ks):
                continue
            cells = []
            for method in args.methods:
                t0, cpu0, load = time.perf_counter(), time.process_time(), uptime()
                hung, near, sep, detail = run_setting(
                    method, k, m, d, args.trials, args.rounds, args.lr, args.trial_batch, args.init,
                    args.sort_method)
                seconds = time.perf_counter() - t0
                trial_fields = dict(hungarian=hung, nearest=near, min_separation=sep, **detail)
                if args.per_trial:
                    with open(args.per_trial, "a") as fh:
                        fh.write(json.dumps(dict(k=k, m=m, d=d, method=method, init=args.init,
                                                 **trial_fields)) + "\n")
                se = float(np.std(hung) / np.sqrt(len(hung)))
                if args.out:
                    append_jsonl(args.out, dict(
                        panel=panel, k=k, m=m, d=d, method=method, trials=args.trials,
                        rounds=args.rounds, lr=args.lr, init=args.init,
                        sort_method=args.sort_method, trial_batch=args.trial_batch,
                        mean=float(np.mean(hung)), se=se, nearest_mean=float(np.mean(near)),
                        seconds=round(seconds, 1),
                        cpu_seconds=round(time.process_time() - cpu0, 1),
                        uptime_before=load, command=cmd, **trial_fields))
                cells.append(f"{np.mean(hung):.3f} ± {se:.3f} ({np.mean(near):.3f})")
                print(f"panel {panel} k={k} m={m} d={d} {method}: {cells[-1]} "
                      f"[{seconds:.1f} s]; {load}", flush=True)
            lines.append(f"| {k} | {m} | {d} | " + " | ".join(cells) + " |")
    print("\n".join(lines))




if __name__ == "__main__":
    main()
