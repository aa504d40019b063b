"""What a checkpoint costs: seconds per save (and per restore), the file's size, and the
fraction of a run spent saving at the default cadence and when saving every round.

    python benchmarks/checkpoint_cost.py --out benchmarks/results/checkpoint_cost.md

Configurations, each in its own child process (run through the experiment runner,
``run_rounds``, one round per compiled chunk; the first round compiles and is not timed):
  ifca_mnist   IFCA option II on MNIST's shapes (synthetic stand-in data of the real
               shapes, as roofline.py's ifca_mlp): m = 2400 clients x n = 100 images of
               784 pixels, MLP 784-200-10, K = 4, 10 local steps, 1 restart
  linear_1m    IFCA on synthetic mixed linear regression at 1M clients (scale.py's run):
               n = 10, d = 20, K = 2, a linear model, clients in chunks of 10,000
A save is ``fedclust_jax.checkpoint.save`` of the run's states and history after its rounds,
to a temporary file in the system's temporary folder (``tempfile``; the file's disk is
named), flushed to disk (``fsync``) and renamed: the median over ``--saves`` saves. Restore
is ``checkpoint.restore`` of that file. Fractions: a save every ``max(cadence, one round)``
seconds of rounds costs save / (interval + save) of the wall time; "every round" is
save / (round + save).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _common import (ROOT, add_child_arguments, child_command, child_record, load_averages,
                     output_file, round_marks, run_child, write_markdown)

CONFIGS = ("ifca_mnist", "linear_1m")
QUICK = {"ifca_mnist": dict(m=240, n=20), "linear_1m": dict(m=10_000)}
FULL = {"ifca_mnist": dict(m=2400, n=100), "linear_1m": dict(m=1_000_000)}


def build(name: str, size: dict):
    """(algorithm, data, description) of configuration ``name`` at ``size``."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.registry import build_model
    if name == "ifca_mnist":
        from _common import synthetic_data
        data = synthetic_data(size["m"], size["n"], (784,), 10)
        model = build_model("mlp", data, hidden=(200,))
        alg = build_algorithm("ifca", model, dict(num_clusters=4, option="model", steps=10,
                                                  lr=0.1), data)
        return alg, data, (f"IFCA option II, MLP 784-200-10, m = {size['m']:,} x n = "
                           f"{size['n']} (MNIST's shapes, synthetic), K = 4, tau = 10")
    from scale import regression_clients
    data = jax.tree.map(jnp.asarray, regression_clients(size["m"], 10, 0))
    alg = build_algorithm("ifca", build_model("linear", data),
                          dict(num_clusters=2, chunk=10_000), data)
    return alg, data, f"IFCA, linear model, {size['m']:,} clients x n = 10, d = 20, K = 2"


def run_one(cfg: dict) -> dict:
    """One configuration in this process: its round, save and restore times."""
    import jax
    import numpy as np

    from fedclust_jax import checkpoint, experiment, loop
    alg, data, what = build(cfg["name"], cfg["size"])
    marks = round_marks(experiment)
    start = time.perf_counter()
    states, history = experiment.run_rounds(alg, data, loop.run_key(0), rounds=1 + cfg["rounds"],
                                            rounds_per_chunk=1, progress=False)
    jax.block_until_ready(states)
    round_s = (time.perf_counter() - marks[0]) / cfg["rounds"]
    folder = tempfile.mkdtemp(prefix="fedclust-checkpoint-cost-")
    path = os.path.join(folder, "ck.npz")
    config = {"benchmark": cfg["name"]}
    try:
        saves = []
        for _ in range(cfg["saves"]):
            t0 = time.perf_counter()
            checkpoint.save(path, states, history, 1 + cfg["rounds"], config)
            saves.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        back = checkpoint.restore(path, states, config)
        jax.block_until_ready(back[0])
        restore_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        disk = subprocess.run(["df", "-P", folder], capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    state_bytes = sum(np.asarray(a).nbytes for a in jax.tree.leaves(
        jax.tree.map(lambda a: jax.random.key_data(a) if jax.dtypes.issubdtype(
            a.dtype, jax.dtypes.prng_key) else a, states)))
    return dict(name=cfg["name"], what=what, backend=jax.default_backend(), round_s=round_s,
                first_round_s=marks[0] - start, save_s=statistics.median(saves),
                saves_s=saves, restore_s=restore_s, file_mb=size / 2**20,
                state_mb=state_bytes / 2**20,
                disk=(disk.strip().splitlines() or ["?"])[-1].split()[0])


def fraction(save_s: float, interval_s: float) -> float:
    """Share of the wall time spent saving when a save follows ``interval_s`` of rounds."""
    return save_s / (interval_s + save_s)


def table(records: list[dict], cadence_s: float) -> str:
    head = ["configuration", "s / round", "state MB", "file MB", "s / save", "s / restore",
            f"fraction saving, every {cadence_s:g} s", "fraction saving, every round"]
    rows = []
    for r in records:
        if r.get("save_s") is None:
            rows.append([r["name"], "-", "-", "-", "-", "-", "-", r.get("note", "failed")])
            continue
        interval = max(cadence_s, r["round_s"])
        rows.append([r["name"], f"{r['round_s']:.3f}", f"{r['state_mb']:.1f}",
                     f"{r['file_mb']:.1f}", f"{r['save_s']:.3f}", f"{r['restore_s']:.3f}",
                     f"{fraction(r['save_s'], interval):.4f}",
                     f"{fraction(r['save_s'], r['round_s']):.4f}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "The state is the algorithm's (cluster models, per-client assignment, optimizer "
              "state) for every restart; the data are not saved (a resumed run rebuilds them "
              "from its seed)."]
    lines += [""] + [f"- {r['name']}: {r['what']}; {r.get('backend')}; first round (compiles) "
                     f"{r['first_round_s']:.1f} s; saves {', '.join(f'{s:.3f}' for s in r['saves_s'])} s "
                     f"to {r['disk']}" for r in records if r.get("save_s") is not None]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=output_file, help="write the command, load and table here")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    p.add_argument("--rounds", type=int, default=1, help="timed rounds after the compiling one")
    p.add_argument("--saves", type=int, default=5, help="saves timed (the median is reported)")
    p.add_argument("--cadence", type=float, default=60.0,
                   help="seconds between saves for the fraction (the default --checkpoint-every)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per configuration")
    add_child_arguments(p)
    args = p.parse_args(argv)
    if run_child(args, run_one):
        return
    if args.rounds < 1 or args.saves < 1:
        p.error("--rounds and --saves must be >= 1")
    before = load_averages()
    records = []
    for name in args.configs:
        cfg = dict(name=name, size=(QUICK if args.quick else FULL)[name], rounds=args.rounds,
                   saves=args.saves)
        print(f"# {name} ...", file=sys.stderr, flush=True)
        try:
            out = subprocess.run(child_command(__file__, cfg), capture_output=True, text=True,
                                 timeout=args.timeout, cwd=ROOT)
            if out.returncode != 0:
                tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
                records.append(dict(name=name, note=f"failed (exit {out.returncode}): {tail[:160]}"))
            else:
                records.append(child_record(out.stdout))
        except subprocess.TimeoutExpired:
            records.append(dict(name=name, note=f"over the {args.timeout:.0f} s timeout"))
    text = table(records, args.cadence)
    print(text)
    if args.out:
        write_markdown(args.out, __file__, argv, before, text + "\n\n" + json.dumps(
            records, default=float, indent=1).join(["```json\n", "\n```"]))


if __name__ == "__main__":
    main()
