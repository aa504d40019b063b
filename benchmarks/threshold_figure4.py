"""Threshold-clustering paper, Figure 4: average distance to the true centers against the
number of TC iterations l, for blob std sigma in {0.5, 1, 2, 4} with fixed centers.

    python benchmarks/threshold_figure4.py [--repeats 10] [--inits blob-point offset data-points box]
        [--theory-inits blob-point offset] [--notes-file FILE] [--out FILE.md] [--figure FILE.png]

The committed files (``results/threshold_figure4.md`` and ``.png``) come from one invocation:
``--theory-inits blob-point offset --notes-file benchmarks/notes/threshold_figure4.md`` with
``--out`` and ``--figure``.

Data (Section 4.3): 90 points in 10-D from 10 blobs (``blobs``: make_blobs' equal shares,
centers uniform in [-10, 10]^10 from one fixed seed, the same for every sigma). TC with
K = 10, radius = the 10% quantile of the distances to each center (recomputed every
iteration; with 90 points that ball holds the 9 nearest points, so every iteration moves a
center 9/90 of the way to the mean of its 9 nearest points). f(l) = (1/K) sum_k
||v_k - c_k||, with v_k matched one-to-one to the centers (Hungarian, on the final v), mean
over repeats. The paper leaves the initialisation open; ``--inits``:

  blob-point   center k starts at a uniformly drawn point of blob k (distance ~ sigma sqrt(d)).
  offset       center k starts at c_k + r u, u a uniform random unit vector, r = --offset
               (default 10, the half-width of the center box, a Delta-scale distance that
               does not scale with sigma).
  data-points  the K centers start at K distinct data points drawn uniformly from all 90
               (sklearn KMeans' init="random").
  box          the K centers start uniform in the center box [-10, 10]^10.

Elbows: "l95": the first l with f(l) - min f <= 0.05 (f(0) - min f); "l(5%)": the first l
with f(l) <= 1.05 min f (the curve is within 5% of its floor); "paper": the first l >= 2 at
which the paper's ratio r(l) = (f(l) - f(l-1)) / (f(l-1) - min f) rises above -0.05 (a step
smaller than 5% of the remaining gap). The paper gives the ratio but not the cut on it.
``--radius-rule theory`` replaces the 10% quantile by the text's fixed tau = sqrt(sigma Delta)
(Delta = the smallest distance between two true centers); ``--theory-inits`` adds tables of
that rule, for those initialisations, after the tables of ``--radius-rule``.

``--figure PNG`` draws f(l) per sigma, one panel per initialisation, with l(5%) marked:
every l after a run, or, with ``--from-md FILE`` (no run), the l columns of a results
file's quantile-radius tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

from _common import load_averages, output_file
from provenance import generated_by
from scipy.optimize import linear_sum_assignment

from fedclust_jax.core.threshold_clustering import threshold_clustering
from fedclust_jax.data.robust_synthetic import blobs

SIGMAS = (0.5, 1.0, 2.0, 4.0)
INITS = ("blob-point", "offset", "data-points", "box")


def init_centers(kind, key, pts, centers, offset):
    k, d = centers.shape
    if kind == "blob-point":
        per = pts.shape[0] // k
        return pts[jax.random.randint(key, (k,), 0, per) + per * jnp.arange(k)]
    if kind == "offset":
        u = jax.random.normal(key, (k, d))
        return centers + offset * u / jnp.linalg.norm(u, axis=1, keepdims=True)
    if kind == "data-points":
        return pts[jax.random.choice(key, pts.shape[0], (k,), replace=False)]
    if kind == "box":
        return jax.random.uniform(key, (k, d), minval=-10.0, maxval=10.0)
    raise ValueError(kind)


def trajectories(sigma, init, repeats, max_l, quantile=0.1, offset=10.0, rule="quantile"):
    """[repeats, max_l + 1, K, d] center iterates and the true centers [K, d]."""
    def one(key):
        pts, _, centers = blobs(jax.random.fold_in(key, 0), std=sigma)
        v = init_centers(init, jax.random.fold_in(key, 1), pts, centers, offset)
        gaps = jnp.linalg.norm(centers[:, None] - centers[None], axis=-1)
        delta = jnp.min(jnp.where(jnp.eye(centers.shape[0], dtype=bool), jnp.inf, gaps))
        tau = jnp.sqrt(sigma * delta)          # the text's tau ~ sqrt(sigma Delta)

        def step(v, _):
            if rule == "theory":
                v = threshold_clustering(pts, v, iters=1, radius=tau)
            else:
                v = threshold_clustering(pts, v, iters=1, quantile=quantile)
            return v, v

        return jnp.concatenate([v[None], jax.lax.scan(step, v, None, length=max_l)[1]]), centers

    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(7), r))(jnp.arange(repeats))
    vs, centers = jax.jit(jax.vmap(one))(keys)
    return np.asarray(vs), np.asarray(centers)


def curve(sigma, init, repeats, max_l, offset=10.0, rule="quantile"):
    vs, centers = trajectories(sigma, init, repeats, max_l, offset=offset, rule=rule)
    out = []
    for v, c in zip(vs, centers):
        cost = np.linalg.norm(v[-1][:, None] - c[None], axis=-1)
        rows, cols = linear_sum_assignment(cost)
        perm = np.empty_like(cols)
        perm[rows] = cols
        out.append(np.linalg.norm(v - c[perm][None], axis=-1).mean(-1))
    return np.mean(out, 0)


def elbows(f):
    m = f.min()
    l95 = int(np.argmax(f - m <= 0.05 * (f[0] - m)))
    l5 = int(np.argmax(f <= 1.05 * m))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (f[1:] - f[:-1]) / (f[:-1] - m)          # r[l-1] = r(l)
    ok = np.where((np.arange(1, len(f)) >= 2) & ((r > -0.05) | ~np.isfinite(r)))[0]
    paper = int(ok[0] + 1) if len(ok) else -1
    return l95, l5, paper


def read_tables(path, radius="quantile"):
    """{init: {sigma: (l values, f at them, l(5%))}} from the tables of a results file
    written by this script (headings "Initialisation: <init> (radius: <radius>)")."""
    out, init = {}, None
    for line in open(path):
        head = re.match(r"#+ Initialisation: (\S+) \(radius: (\w+)\)", line)
        if head:
            init = head[1] if head[2] == radius else None
            continue
        if init and line.startswith("| sigma |"):
            cols = [c.strip() for c in line.strip().strip("|").split("|")]
            ls = [int(c[2:]) for c in cols if c.startswith("l=")]
        elif init and re.match(r"\| [\d.]+ \|", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            f = [float(c) for c in cells[1:1 + len(ls)]]
            out.setdefault(init, {})[float(cells[0])] = (ls, f, int(cells[cols.index("l(5%)")]))
    return out


def draw_figure(curves, path, source):
    """One panel per initialisation: f(l) per sigma (log y), a dotted line at l(5%)."""
    from fedclust_jax.plot import pyplot
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter
    cols = min(2, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, (init, per_sigma) in zip(axes.flat, curves.items()):
        for i, (sigma, (ls, f, l5)) in enumerate(sorted(per_sigma.items())):
            ax.plot(ls, f, marker="o" if len(ls) <= 20 else None, markersize=3, color=f"C{i}",
                    label=f"sigma = {sigma:g} (l(5%) = {l5})")
            ax.axvline(l5, color=f"C{i}", linestyle=":", linewidth=1)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        lo, hi = ax.get_ylim()
        every = hi / lo < 10   # under a decade: label every minor tick, else 2, 3, 5 x 10^n
        ax.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _, every=every: f"{v:g}" if every or round(v / 10 ** np.floor(np.log10(v)))
            in (2, 3, 5) else ""))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_title(f"start: {init}")
        ax.set_xlabel("TC iterations l")
        ax.set_ylabel("f(l), log scale")
        ax.legend(fontsize=7)
    fig.suptitle("Threshold clustering Figure 4 reproduction: f(l) = mean distance to the true "
                 "centers\n(10% quantile radius, K = 10, 90 points in 10-D); " + source, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--max-l", type=int, default=80)
    ap.add_argument("--inits", nargs="*", default=list(INITS), choices=INITS)
    ap.add_argument("--offset", type=float, default=10.0)
    ap.add_argument("--radius-rule", default="quantile", choices=["quantile", "theory"],
                    help="quantile: the paper's 10%% quantile; theory: fixed tau = sqrt(sigma Delta)")
    ap.add_argument("--theory-inits", nargs="*", default=[], choices=INITS,
                    help="also tabulate the fixed radius tau = sqrt(sigma Delta) for these")
    ap.add_argument("--notes-file", default=None, help="markdown appended after the tables")
    ap.add_argument("--out", type=output_file, default=None)
    ap.add_argument("--figure", type=output_file,
                    default=None, metavar="PNG", help="draw f(l) to this file")
    ap.add_argument("--from-md", default=None, metavar="FILE",
                    help="with --figure: draw the tables of this results file instead of running")
    args = ap.parse_args()
    if args.notes_file and not os.path.isfile(args.notes_file):
        ap.error(f"--notes-file {args.notes_file}: no such file")
    if args.theory_inits and args.radius_rule == "theory":
        ap.error("--theory-inits adds fixed-radius tables to the quantile ones; with "
                 "--radius-rule theory list the initialisations in --inits")
    if args.from_md:
        if not args.figure:
            ap.error("--from-md needs --figure PNG")
        draw_figure(read_tables(args.from_md), args.figure,
                    f"f at the tabulated l only ({args.from_md.rsplit('/', 1)[-1]}, no rerun); "
                    "dotted: l(5%)")
        print(f"figure written to {args.figure}")
        return
    shown = [l for l in (0, 1, 2, 5, 10, 20, 30, 40, 60, 80) if l <= args.max_l]
    load_before, t0 = load_averages(), time.monotonic()
    drawn = {}
    blocks = [table(init, args.radius_rule, "###", shown, args, drawn) for init in args.inits]
    if args.theory_inits:
        blocks.append("\n## Fixed radius tau = sqrt(sigma Delta) (`--radius-rule theory`)")
        blocks += [table(init, "theory", "####", shown, args, drawn) for init in args.theory_inits]
    notes = open(args.notes_file).read() if args.notes_file else ""
    text = (generated_by() + HEADER.format(repeats=args.repeats, offset=args.offset,
                                          machine=platform.processor() or platform.machine())
            + "\n".join(blocks) + f"\n\nWall time {time.monotonic() - t0:.0f} s; {load_before} "
              f"before, {load_averages()} after.\n" + (f"\n{notes.rstrip()}\n" if notes else ""))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    if args.figure and drawn:
        draw_figure(drawn, args.figure, f"{args.repeats} repeats, every l; dotted: l(5%)")


def table(init, rule, level, shown, args, drawn) -> str:
    """The markdown table of f(l) and the elbows per sigma for one initialisation and radius
    rule; quantile-radius curves are also kept in ``drawn`` for the figure."""
    lines = [f"\n{level} Initialisation: {init} (radius: {rule})\n",
             "| sigma | " + " | ".join(f"l={l}" for l in shown) + " | min f | l95 | l(5%) | paper |",
             "|---|" + "---|" * (len(shown) + 4)]
    for s in SIGMAS:
        f = curve(s, init, args.repeats, args.max_l, args.offset, rule)
        e = elbows(f)
        if rule == "quantile":
            drawn.setdefault(init, {})[s] = (list(range(len(f))), list(f), e[1])
        lines.append(f"| {s} | " + " | ".join(f"{f[l]:.3f}" for l in shown)
                     + f" | {f.min():.3f} | {e[0]} | {e[1]} | {e[2]} |")
        print(init, rule, lines[-1], flush=True)
    return "\n".join(lines)


HEADER = """# Threshold-clustering Figure 4 reproduction

Average distance to the true centers (one-to-one matched) against the number of TC
iterations l; {repeats} repeats; TC radius = 10% quantile of the distances, K = 10, 90
points in 10-D from 10 blobs with centers fixed in [-10, 10]^10 (the same for every
sigma). `offset` initialisation radius {offset}. Elbow columns: see the script's docstring
(l95: 95% of the decrease done; l(5%): within 5% of the floor; paper: the paper's ratio
above -0.05). Run on a shared {machine} CPU.
"""


if __name__ == "__main__":
    main()
