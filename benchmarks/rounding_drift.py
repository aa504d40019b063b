"""How far float rounding alone moves a training run, in SR-FCA's MNIST setting.

Two runs of the same algorithm on the same data and seeds whose arithmetic differs only in
rounding:
- ``--isa ISA`` (default): this code as compiled for the host CPU against the same code
  compiled with XLA's ``--xla_cpu_max_isa=ISA``. XLA compiles for the CPU it runs on, so
  two hosts with different instruction sets differ in the same way;
- ``--commits A B``: two commits of the package, each checked out into a temporary git
  worktree, both compiled for the host CPU.
For each method the table gives, at each checkpoint round, the relative L2 distance
between the two runs' models (all parameters of a seed's state), and each seed's final
test accuracy in both runs. The setting is ``srfca_mnist.py``'s (``baselines``), chunk 1.

    python benchmarks/rounding_drift.py --data-dir ../shared/data/mnist \\
        --out benchmarks/results/rounding_drift.md
    python benchmarks/rounding_drift.py --data-dir ../shared/data/mnist --methods Global \\
        --commits 2bcdeca~1 2bcdeca --out runs/rounding_drift_2bcdeca.md

Each run is a child process (``--snapshot FILE``: writes its models at the checkpoints and
its final accuracies); with ``--commits`` the child imports ``fedclust_jax`` from the
worktree and the setting from this folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _common import load_averages, output_file, ROOT, write_markdown

CHECKPOINTS = (1, 2, 5, 10, 20, 50)


def host() -> str:
    """The CPU's model name and which of the instruction sets that change XLA's code it has."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    have = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f") if f in flags]
    return f"{name} ({', '.join(have) or 'flags not read'})"


# ----------------------------------------------------------------------------- child
def snapshot(args) -> None:
    """Runs ``args.methods`` and writes, per method, every parameter leaf [S, ...] at each
    checkpoint and the per-seed test accuracy (%), to ``args.snapshot`` (npz)."""
    from pathlib import Path

    import jax
    import jax.numpy as jnp

    import fedclust_jax
    import srfca_mnist as S

    mnist = S.load_mnist(Path(args.data_dir) / "mnist")
    seeds = list(range(args.seeds))
    data = S.stack([S.srfca_mnist(mnist, args.dataset, s) for s in seeds])
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    model, local = S.model_and_training("torch")
    algs = S.baselines(args.dataset, model, local, 1, args.protocol, cfl_warmup=20)
    out = {"package": np.array(os.path.dirname(fedclust_jax.__file__))}
    for name in args.methods:
        alg, scanned = algs[name]
        first = max(CHECKPOINTS[-1] - scanned, 0)  # rounds that init runs (IFCA: one)

        def advance(state, key, data, start, stop, alg=alg):
            # srfca_mnist.scan_rounds' keys: round t (from 0) uses fold_in(key, t + 1)
            def body(s, t):
                return alg.round(s, jax.random.fold_in(key, t + 1), data)[0], None
            return jax.lax.scan(body, state, jnp.arange(start, stop))[0]

        step = jax.jit(jax.vmap(advance, in_axes=(0, 0, 0, None, None)), static_argnums=(3, 4))
        state = jax.jit(jax.vmap(lambda k, d: alg.init(jax.random.fold_in(k, 0), d)))(keys, data)
        done = 0
        for c in args.checkpoints:
            stop = c - first
            if stop > done:
                state = step(state, keys, data, done, stop)
                done = stop
            for i, leaf in enumerate(jax.tree.leaves(state.params)):
                out[f"{name}/r{c}/{i}"] = np.asarray(leaf, np.float32)
        ev = jax.jit(jax.vmap(alg.evaluate))(state, data)
        out[f"{name}/acc"] = 100.0 * np.nanmean(np.asarray(ev["assigned_test_acc"]), axis=1)
        print(f"{name}: acc {np.round(out[f'{name}/acc'], 2)}", flush=True)
    np.savez(args.snapshot, **out)


# ----------------------------------------------------------------------------- parent
def run_child(args, path: str, env_extra: dict, package_root: str | None) -> float:
    """Runs one child (its package from ``package_root``, default this checkout) -> seconds."""
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([package_root or ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, os.path.abspath(__file__), "--snapshot", path, "--data-dir", args.data_dir,
           "--dataset", args.dataset, "--protocol", args.protocol, "--seeds", str(args.seeds),
           "--methods", *args.methods, "--checkpoints", *map(str, args.checkpoints)]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    return time.perf_counter() - t0


def distance(a, b, name: str, c: int) -> np.ndarray:
    """Per-seed ||a - b|| / ||a|| over every leaf of ``name`` at checkpoint ``c`` -> [S]."""
    leaves = [k for k in a.files if k.startswith(f"{name}/r{c}/")]
    diff = sum(((a[k] - b[k]).reshape(len(a[k]), -1) ** 2).sum(1) for k in leaves)
    norm = sum((a[k].reshape(len(a[k]), -1) ** 2).sum(1) for k in leaves)
    return np.sqrt(diff / norm)


def table(a, b, labels, args) -> str:
    seeds = range(args.seeds)
    lines = []
    for name in args.methods:
        lines += [f"## {name}", "",
                  "Relative L2 distance ||A - B|| / ||A|| between the two runs' models:", "",
                  "| rounds | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                  "|---|" + "---|" * args.seeds]
        for c in args.checkpoints:
            lines.append(f"| {c} | " + " | ".join(f"{d:.1e}" for d in distance(a, b, name, c)) + " |")
        acc_a, acc_b = a[f"{name}/acc"], b[f"{name}/acc"]
        lines += ["", f"Test accuracy (%) after {args.checkpoints[-1]} rounds:", "",
                  "| run | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± std |",
                  "|---|" + "---|" * (args.seeds + 1)]
        for label, acc in ((labels[0], acc_a), (labels[1], acc_b)):
            lines.append(f"| {label} | " + " | ".join(f"{x:.2f}" for x in acc)
                         + f" | {acc.mean():.2f} ± {acc.std():.2f} |")
        lines += ["| B - A | " + " | ".join(f"{x:+.2f}" for x in acc_b - acc_a)
                  + f" | {acc_b.mean() - acc_a.mean():+.2f} |", ""]
    return "\n".join(lines)


def rev(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA", "../shared/data"),
                   help="folder holding mnist/ (the IDX files)")
    p.add_argument("--dataset", choices=["inverted", "rotated"], default="inverted")
    p.add_argument("--protocol", choices=["code", "paper"], default="paper")
    p.add_argument("--methods", nargs="+", choices=["IFCA", "Global"], default=["Global", "IFCA"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--checkpoints", type=int, nargs="+", default=list(CHECKPOINTS),
                   help="rounds after which the models are compared; the last is the run's length")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--isa", default="AVX", help="XLA CPU instruction set of run B (run A: the host's)")
    mode.add_argument("--commits", nargs=2, metavar=("A", "B"), help="compare two commits instead")
    p.add_argument("--out", type=output_file,
                   default=None, help="markdown result file (default: print only)")
    p.add_argument("--snapshot", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.checkpoints != sorted(set(args.checkpoints)) or args.checkpoints[0] < 1:
        p.error(f"--checkpoints must be increasing round counts >= 1; got {args.checkpoints}")
    if args.checkpoints[-1] != CHECKPOINTS[-1]:
        p.error(f"the runs are {CHECKPOINTS[-1]} rounds (srfca_mnist's); the last checkpoint "
                f"must be {CHECKPOINTS[-1]}, got {args.checkpoints[-1]}")
    if args.snapshot:
        return snapshot(args)
    args.data_dir = os.path.abspath(args.data_dir)
    if not os.path.isdir(os.path.join(args.data_dir, "mnist")):
        p.error(f"no mnist/ folder in --data-dir {args.data_dir}; pass the folder that holds it")
    before = load_averages()
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        if args.commits:
            for letter, ref in zip("AB", args.commits):
                tree = os.path.join(tmp, rev(ref))
                subprocess.run(["git", "worktree", "add", "-q", "--detach", tree, ref], cwd=ROOT, check=True)
                runs.append((f"{letter}: commit {rev(ref)}", {}, tree))
            what = f"commits {rev(args.commits[0])} (A) and {rev(args.commits[1])} (B), both for the host CPU"
        else:
            runs = [("A: host instruction set", {}, None),
                    (f"B: max ISA {args.isa}", {"XLA_FLAGS": f"--xla_cpu_max_isa={args.isa}"}, None)]
            what = f"this code for the host CPU (A) and with XLA_FLAGS=--xla_cpu_max_isa={args.isa} (B)"
        try:
            snaps, secs = [], []
            for i, (label, env, tree) in enumerate(runs):
                path = os.path.join(tmp, f"{i}.npz")
                print(label, flush=True)
                secs.append(run_child(args, path, env, tree))
                snaps.append(np.load(path))
                used = str(snaps[-1]["package"])
                if not used.startswith(tree or ROOT):
                    sys.exit(f"{label}: the child imported fedclust_jax from {used}, not "
                             f"{tree or ROOT}; uninstall the installed copy or run from a checkout")
            body = "\n".join([
                "# Rounding drift: two runs that differ only in floating-point rounding", "",
                f"{args.dataset.capitalize()} MNIST as in `srfca_mnist.py` (m = 100 clients, MLP "
                f"784-200-10, PyTorch init, Adam 2e-4, batch 50, protocol `{args.protocol}`), seeds "
                f"0-{args.seeds - 1} (vmapped), chunk 1. Runs: {what}.", "",
                f"Host: {host()}; {os.cpu_count()} cores. Run times (compilation included): "
                + ", ".join(f"{label} {s:.0f} s" for (label, _, _), s in zip(runs, secs)) + ".", "",
                table(snaps[0], snaps[1], [label for label, _, _ in runs], args)])
        finally:
            if args.commits:
                for _, _, tree in runs:
                    subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT)
    print(body)
    if args.out:
        write_markdown(args.out, "rounding_drift.py", None, before, body)


if __name__ == "__main__":
    main()
