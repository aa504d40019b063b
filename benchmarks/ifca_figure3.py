"""IFCA Figure 3: probability of success on synthetic mixed linear regression.

IFCA option I (gradient averaging, gamma / m with the total m), full participation, equal
clusters, theta*_j ~ Bernoulli(0.5)^d rescaled to l2 norm R (the paper; ``--scaling
multiply`` is the authors' code's r), initial models Bernoulli(0.5)^d unscaled, a constant
step size gamma. One *trial* is one fresh theta* and fresh data; its result is the minimum
of dist = (1/k) sum_j ||theta_hat_pi(j) - theta*_j|| (Hungarian matching) over the 10
random initialisations x the step-size sweep ({0.01, 0.1, 1} for k = 2, {0.5, 1, 2} for
k = 4). The trial succeeds when that minimum is <= 0.6 sigma + tol (tol = 0.001, the
authors' code's margin in the R / sigma sweeps; without it sigma = 0 could never succeed).
The success probability of a point is the fraction of successful trials.

Everything in a point is vectorised: trials (a chunk of ``--trial-batch`` at a time) and
initialisations are vmap axes around ``IFCA.init`` / ``IFCA.round`` (rounds in one
``lax.scan``); the initialisations share their trial's data, so each client's losses under
all of them are one product [n, d] x [d, inits*k]. The step sizes are a Python loop over
one compiled program (gamma traced). Each point is
appended to a JSONL file as soon as it finishes (per-trial minima kept, so the threshold can
be changed afterwards), and ``--combine`` writes the table and the figure from JSONL files.

Panels (grids from the authors' code): (a) k = 2, (m, n, d) = (100, 100, 1000), R x sigma;
(b) k = 4, (400, 100, 1000), R x sigma; (c) k = 2, d = 1000, R = 0.1, sigma = 0.1, m x n;
(d) k = 4, d = 1000, R = 0.5, sigma = 0.1, m x n.

    python benchmarks/ifca_figure3.py --panel a --trials 50 --out runs/fig3.jsonl
    python benchmarks/ifca_figure3.py --combine runs/fig3.jsonl \
        --out benchmarks/results/ifca/figure3.md
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig  # noqa: E402
from fedclust_jax.core.train import LocalTraining  # noqa: E402
from fedclust_jax.data.synthetic import mixed_linear_regression  # noqa: E402
from fedclust_jax.models.linear import linear_regression  # noqa: E402
from _common import output_file, read_jsonl  # noqa: E402
from provenance import command, generated_by  # noqa: E402

GAMMAS = {2: (0.01, 0.1, 1.0), 4: (0.5, 1.0, 2.0)}
SIGMAS = (0.0, 0.1, 0.2, 0.4)
RS = (0.1, 0.25, 0.5, 0.75, 1.0)
PANELS = {
    "a": dict(k=2, d=1000, points=[dict(m=100, n=100, R=r, sigma=s) for s in SIGMAS for r in RS]),
    "b": dict(k=4, d=1000, points=[dict(m=400, n=100, R=r, sigma=s) for s in SIGMAS for r in RS]),
    "c": dict(k=2, d=1000, points=[dict(m=m, n=n, R=0.1, sigma=0.1) for n in (50, 100, 200)
                                   for m in (50, 70, 100, 150, 200, 300, 400)]),
    "d": dict(k=4, d=1000, points=[dict(m=m, n=n, R=0.5, sigma=0.1) for n in (50, 100, 200)
                                   for m in (100, 200, 300, 400, 800)]),
}
TOL = 0.001


def hungarian_dist(estimates, truth):
    """(1/k) sum_j ||est_pi(j) - truth_j|| minimised over permutations pi; est, truth [k, d]."""
    k = truth.shape[0]
    d = jnp.linalg.norm(estimates[:, None, :] - truth[None, :, :], axis=-1)   # [K, k]
    perms = jnp.asarray(list(itertools.permutations(range(k))))                # [k!, k]
    return d[perms, jnp.arange(k)].mean(axis=1).min()


def parse_chunk(text: str):
    """``--chunk`` value: "none" (one vmap over all clients), "auto" or an int."""
    if text == "none":
        return None
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--chunk must be none, auto or an integer, got {text!r}")


@functools.lru_cache(maxsize=None)
def trial_program(*, k, m, n, d, R, sigma, rounds, record, scaling, chunk):
    """The jitted ``(data_keys [T], init_keys [T, inits], gamma) -> dist [T, inits, B]`` of
    one point; gamma is traced, so a point's step sizes and trial batches share one compile
    per batch shape."""
    model = linear_regression(d)

    def one_trial(dkey, ikeys, gamma):
        alg = IFCA(model, IFCAConfig(num_clusters=k, option="gradient", chunk=chunk,
                                     local=LocalTraining(steps=1, lr=gamma)))
        data = mixed_linear_regression(dkey, num_clients=m, num_clusters=k, samples_per_client=n,
                                       test_samples_per_client=1, dim=d, noise_std=sigma,
                                       separation=R, scaling=scaling)
        # as experiment.run_rounds: init from fold_in(k_r, 0), round t from fold_in(fold_in(k_r, 1), t)
        states = jax.vmap(alg.init, in_axes=(0, None))(
            jax.vmap(lambda kr: jax.random.fold_in(kr, 0))(ikeys), data)
        round_keys = jax.vmap(lambda kr: jax.random.fold_in(kr, 1))(ikeys)
        step = jax.vmap(lambda s, rk, t: alg.round(s, jax.random.fold_in(rk, t), data)[0],
                        in_axes=(0, 0, None))

        def block(s, t0):
            s = jax.lax.fori_loop(0, record, lambda i, s: step(s, round_keys, t0 + i), s)
            dist = jax.vmap(lambda p: hungarian_dist(p["theta"], data.true_params))(s.params)
            return s, dist

        _, dists = jax.lax.scan(block, states, jnp.arange(0, rounds, record))
        return dists.T                                                         # [inits, blocks]

    return jax.jit(jax.vmap(one_trial, in_axes=(0, 0, None)))


def trial_dists(data_keys, init_keys, *, k, m, n, d, R, sigma, gamma, rounds, record,
                scaling="norm", chunk="auto"):
    """dist [T, inits, rounds // record] every ``record`` rounds for T trials at once:
    data_keys [T] (theta* and data), init_keys [T, inits]. Trials and initialisations are
    vmap axes; the initialisations share their trial's one copy of the data, so a client's
    losses for all of them are one [n, d] x [d, inits*k] product. ``chunk``: IFCA's client
    layout (``core.clients``; "auto" is one client at a time on a CPU)."""
    program = trial_program(k=k, m=m, n=n, d=d, R=float(R), sigma=float(sigma), rounds=rounds,
                            record=record, scaling=scaling, chunk=chunk)
    return program(data_keys, init_keys, jnp.float32(gamma))


def run_point(point, *, k, d, trials, inits, rounds, record, trial_batch, seed, scaling,
              gammas=None, chunk="auto"):
    m, n, R, sigma = point["m"], point["n"], point["R"], point["sigma"]
    root = jax.random.PRNGKey(seed)
    data_keys = jax.random.split(jax.random.fold_in(root, 0), trials)
    init_keys = jax.random.split(jax.random.fold_in(root, 1), trials * inits).reshape(trials, inits, -1)
    gammas = tuple(gammas) if gammas else GAMMAS[k]
    per_gamma = []
    for gamma in gammas:
        parts = []
        for lo in range(0, trials, trial_batch):
            hi = min(trials, lo + trial_batch)
            parts.append(np.asarray(trial_dists(
                data_keys[lo:hi], init_keys[lo:hi], k=k, m=m, n=n, d=d, R=R, sigma=sigma,
                gamma=gamma, rounds=rounds, record=record, scaling=scaling, chunk=chunk)))
        per_gamma.append(np.concatenate(parts))                                # [T, inits, B]
    curves = np.stack(per_gamma, axis=1)                                       # [T, G, inits, B]
    curves = np.where(np.isfinite(curves), curves, np.inf)
    final = curves[..., -1]                                                    # [T, G, inits]
    best = final.min(axis=(1, 2))                                              # [T]
    threshold = 0.6 * sigma + TOL
    # convergence check: the trial minimum at each recorded round, and when it first succeeds
    best_curve = curves.min(axis=(1, 2))                                       # [T, B]
    first = [(int(np.argmax(c <= threshold)) + 1) * record if (c <= threshold).any() else None
             for c in best_curve]
    return dict(point, k=k, d=d, trials=trials, inits=inits, rounds=rounds, scaling=scaling,
                seed=seed, chunk=chunk, trial_batch=trial_batch, gammas=list(gammas), threshold=threshold,
                success=float((best <= threshold).mean()),
                best_dist=[float(v) for v in best],
                best_dist_per_gamma=[[float(v) for v in final[t].min(axis=1)] for t in range(trials)],
                best_curve_median=[float(v) for v in np.median(best_curve, axis=0)],
                record=record, first_success_round=first)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def run(args):
    panel = PANELS[args.panel]
    points = panel["points"]
    if args.points:
        points = [points[i] for i in args.points]
    if args.rounds % args.record:
        raise ValueError(f"--rounds ({args.rounds}) must be a multiple of --record ({args.record})")
    for point in points:
        t0, cpu0, load = time.time(), time.process_time(), uptime()
        res = run_point(point, k=panel["k"], d=panel["d"], trials=args.trials, inits=args.inits,
                        rounds=args.rounds, record=args.record, trial_batch=args.trial_batch,
                        seed=args.seed, scaling=args.scaling, gammas=args.gammas,
                        chunk=args.chunk)
        res.update(panel=args.panel, backend=jax.default_backend(),
                   matmul_precision=str(jax.config.jax_default_matmul_precision),
                   seconds=round(time.time() - t0, 1),
                   cpu_seconds=round(time.process_time() - cpu0, 1), uptime_before=load,
                   command=command())
        with open(args.out, "a") as f:
            f.write(json.dumps(res) + "\n")
        print(f"panel {args.panel} {point}: success {res['success']:.2f} "
              f"({res['trials']} trials, {res['rounds']} rounds) in {res['seconds']} s "
              f"({res['cpu_seconds']} s CPU); {load}",
              flush=True)


def combine(args):
    rows = [r for path in args.combine for r in read_jsonl(path)]
    # a later line for the same point and settings replaces an earlier one
    keyed, superseded = {}, []
    for r in rows:
        key = (r["panel"], r["m"], r["n"], r["R"], r["sigma"])
        if key in keyed:
            superseded.append(keyed[key])
        keyed[key] = r
    rows = sorted(keyed.values(), key=lambda r: (r["panel"], r["sigma"], r["n"], r["R"], r["m"]))
    lines = [generated_by().rstrip("\n"), "",
             "# IFCA Figure 3: probability of success, synthetic mixed linear regression", "",
             "Success: for a fixed theta*, the minimum of dist over the random initialisations x "
             "the step-size sweep is <= 0.6 sigma + 0.001 (dist with Hungarian matching). "
             "Each point's runs were made by the command in its `command` column "
             "(`benchmarks/ifca_figure3.py`, JSONL appended per point).", ""]
    if args.notes_file:
        with open(args.notes_file) as f:
            lines += [f.read().strip(), ""]
    lines += ["| panel | k | m | n | R | sigma | trials | inits | gammas | rounds | success | "
              "median min dist | median round of first success (trials that succeed) | s | CPU s | "
              "uptime before |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        # of the trials that succeed at the last round: a step size that diverges can pass
        # the threshold early and leave it (panel (c), gamma = 1)
        firsts = [f for f, b in zip(r["first_success_round"], r["best_dist"])
                  if f is not None and b <= r["threshold"]]
        med_first = f"{int(np.median(firsts))}" if firsts else "-"
        load = r["uptime_before"].split("load average:")[-1].strip()
        lines.append(f"| {r['panel']} | {r['k']} | {r['m']} | {r['n']} | {r['R']} | {r['sigma']} | "
                     f"{r['trials']} | {r['inits']} | {'/'.join(map(str, r['gammas']))} | "
                     f"{r['rounds']} | {r['success']:.2f} | {np.median(r['best_dist']):.4g} | "
                     f"{med_first} | {r['seconds']} | {r.get('cpu_seconds', '-')} | {load} |")
    lines += ["", "Commands that produced the points:", ""]
    for c in sorted({r["command"] for r in rows}):
        lines.append(f"    {c}")
    if superseded:
        lines += ["", "Earlier runs of a point, replaced in the table by a later line of the "
                  "JSONL (kept there):", ""]
        for r in superseded:
            lines.append(f"- panel {r['panel']}, m = {r['m']}, n = {r['n']}, R = {r['R']}, "
                         f"sigma = {r['sigma']}: success {r['success']:.2f} ({r['trials']} "
                         f"trials), by `{r['command']}`")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, os.path.splitext(args.out)[0] + ".png")
    print("\n".join(lines))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = sorted({r["panel"] for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, p in zip(axes[0], panels):
        pr = [r for r in rows if r["panel"] == p]
        if p in ("a", "b"):
            for s in sorted({r["sigma"] for r in pr}):
                c = sorted((r for r in pr if r["sigma"] == s), key=lambda r: r["R"])
                ax.plot([r["R"] for r in c], [r["success"] for r in c], "o-", label=f"sigma={s}")
            ax.set_xlabel("R")
        else:
            for n in sorted({r["n"] for r in pr}):
                c = sorted((r for r in pr if r["n"] == n), key=lambda r: r["m"])
                ax.plot([r["m"] for r in c], [r["success"] for r in c], "o-", label=f"n={n}")
            ax.set_xlabel("m")
        trials = sorted({r["trials"] for r in pr})
        ax.set_title(f"({p}) k={pr[0]['k']}, trials {'/'.join(map(str, trials))}")
        ax.set_ylabel("success probability")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--panel", choices=sorted(PANELS), default="a")
    ap.add_argument("--points", type=int, nargs="*", help="indices into the panel's grid")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--inits", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--record", type=int, default=25, help="dist recorded every this many rounds")
    ap.add_argument("--trial-batch", type=int, default=10, help="trials vmapped at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gammas", type=float, nargs="+",
                    help="step sizes swept (default: the paper's sweep for the panel's k)")
    ap.add_argument("--scaling", choices=("norm", "multiply"), default="norm")
    ap.add_argument("--chunk", type=parse_chunk, default="auto",
                    help="IFCA's client layout: auto (default; one client at a time on a CPU, "
                         "the fastest measured), none (one vmap over all clients) or an integer")
    ap.add_argument("--out", type=output_file, required=True)
    ap.add_argument("--combine", nargs="+", help="JSONL files to turn into the table and figure")
    ap.add_argument("--notes-file")
    args = ap.parse_args(argv)
    for name in ("trials", "inits", "rounds", "record", "trial_batch"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    (combine if args.combine else run)(args)


if __name__ == "__main__":
    main()
