"""A sweep against the same points run one by one, as a user sees it.

IFCA (option I) on synthetic regression, step sizes x seeds (default 8 x 4 = 32 points):
one `fedclust-jax sweep --config study.toml` subprocess against one `fedclust-jax run`
subprocess per point (process start, import, data, compilation and run each time). Wall
times are of the subprocesses; the final test losses of both are compared point by point.
Writes a Markdown report whose first line is the command that regenerates it, with the
machine's `uptime` load at the start and the end. ``--separate K`` times only the first K
separate runs (the accelerator target compares a 64-point sweep with one run:
``--lrs`` with 16 values, ``--separate 1``, sweep / one run <= 3).

    python benchmarks/sweep_speed.py --output benchmarks/results/sweep_speed.md
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import generated_by  # noqa: E402
from _common import output_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LRS = (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2)


def study_toml(args, sweep: bool) -> str:
    text = f"""dataset = "synthetic-regression"
rounds = {args.rounds}
[data]
num_clients = {args.clients}
samples_per_client = {args.n}
test_samples_per_client = {args.n}
dim = {args.dim}
[algorithms.ifca]
num_clusters = 2
option = "gradient"
lr = {LRS[0]}
"""
    if sweep:
        text += (f"[sweep]\nseed = {list(range(args.seeds))}\n"
                 f"\"ifca.lr\" = {list(args.lrs)}\n")
    return text


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def timed(cmd: list[str], env) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lrs", type=float, nargs="+", default=list(LRS))
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--n", type=int, default=50, help="train (and test) examples per client")
    p.add_argument("--dim", type=int, default=50)
    p.add_argument("--separate", type=int, default=None,
                   help="time only this many separate runs (default: every point)")
    p.add_argument("--output", type=output_file, help="Markdown report to write")
    args = p.parse_args(argv)
    if args.separate is not None and not 1 <= args.separate <= args.seeds * len(args.lrs):
        p.error(f"--separate must be between 1 and the {args.seeds * len(args.lrs)} points")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    cli = [sys.executable, "-m", "fedclust_jax"]
    backend = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                             env=env, capture_output=True, text=True).stdout.strip() or "unknown"
    load_start = uptime()
    print(load_start, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "sweep.toml").write_text(study_toml(args, True))
        (tmp / "single.toml").write_text(study_toml(args, False))
        sweep_s = timed(cli + ["sweep", "--config", str(tmp / "sweep.toml"), "--no-progress",
                               "--output", str(tmp / "sweep.csv")], env)
        print(f"sweep: {sweep_s:.1f} s", flush=True)
        with open(tmp / "sweep.csv") as f:
            swept = {(int(r["seed"]), float(r["ifca.lr"])): float(r["test_loss"]) for r in csv.DictReader(f)}
        separate, diffs = [], []
        grid = [(seed, lr) for seed in range(args.seeds) for lr in args.lrs]
        for seed, lr in grid[:args.separate]:
            out = tmp / f"run-{seed}-{lr}.json"
            separate.append(timed(cli + ["run", "--config", str(tmp / "single.toml"),
                                         "--lr", str(lr), "--seed", str(seed), "--no-progress",
                                         "--output", str(out)], env))
            loss = json.loads(out.read_text())["metrics"]["test_loss"]
            diffs.append(abs(loss - swept[(seed, lr)]))
            print(f"run seed {seed} lr {lr}: {separate[-1]:.1f} s, test loss {loss:.6g}", flush=True)
    load_end = uptime()
    points, timed_runs = len(grid), len(separate)
    total = sum(separate)
    table = ["| how | processes | wall s | s per point |", "|---|---:|---:|---:|",
             f"| one `sweep` | 1 | {sweep_s:.1f} | {sweep_s / points:.2f} |",
             f"| separate `run`s | {timed_runs} | {total:.1f} | {total / timed_runs:.2f} |"]
    if timed_runs == points:
        verdict = f"sweep / separate = {sweep_s / total:.3f} (target on the 2-core CPU <= 0.25)."
    else:
        verdict = (f"sweep of {points} points / one run (mean of {timed_runs}) = "
                   f"{sweep_s / (total / timed_runs):.2f} (target on a GPU for 64 points <= 3).")
    lines = [
        f"IFCA option I on synthetic regression: {len(args.lrs)} step sizes x {args.seeds} seeds "
        f"= {points} points; {args.clients} clients, {args.n} examples each, d = {args.dim}, "
        f"K = 2, {args.rounds} rounds, 1 restart. Backend: {backend}, {os.cpu_count()} CPUs.",
        "", *table, "",
        f"{verdict} Largest |test loss difference| between a sweep point and its separate "
        f"run ({timed_runs} compared): {max(diffs):.2e}.",
        "", f"Load at start: `{load_start}`", "", f"Load at end: `{load_end}`",
    ]
    print("\n".join(lines))
    if args.output:
        argv_used = [sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))
        Path(args.output).write_text(generated_by(argv_used) + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
