"""IFCA with weight sharing on the FEMNIST CNN: one body pass per client batch against K.

The K cluster models share the body, so the loss of all K on a client's batch needs the
body's features once and the K heads on them ("shared body pass", the current code). The
"K full passes" rows run the same model with its body/head split removed
(``body_apply = head_apply = None``): the losses then run the whole model K times, the
program of commit c45fe34: the round and ``objective_and_evaluate`` of this FEMNIST CNN
setting (K = 2 and 3) lower to the same StableHLO text as c45fe34's code (checked on 3
clients of FEMNIST shape).

Setting (benchmarks/ifca_table2.py's Table 2 recipe): real FEMNIST (LEAF JSON under
--data-dir), --writers writers, IFCA option II with weight sharing, every writer
participating, SGD lr 0.004, batch 10, ceil(mean writer size / 10) local steps; the default
client layout (one client at a time on a CPU). Timed: one round (the cluster choice on every
participant's training data, local training, the streamed sums) and the end-of-run
``objective_and_evaluate`` (training- and test-loss matrices [N, K] in one pass). Every
program is compiled first (not timed); then the timed calls alternate between the two paths,
--reps times, so both see the same machine load. The states of both paths after the round
are compared (assignments, largest parameter difference).

    python benchmarks/ifca_shared_body.py --data-dir /work/shared/data
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import output_file  # noqa: E402


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding femnist-leaf/ (default $FEDCLUST_DATA)")
    p.add_argument("--writers", type=int, default=20)
    p.add_argument("--k", type=int, nargs="+", default=[2, 3])
    p.add_argument("--reps", type=int, default=2, help="timed calls per program")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    args = p.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.data.recipes import femnist
    from fedclust_jax.models.cnn import femnist_cnn_for
    from provenance import generated_by

    lines = [generated_by().rstrip("\n"), "", f"uptime at start: {uptime()}", ""]
    say = lambda s="": (lines.append(s), print(s, flush=True))
    data = femnist(jax.random.key(0), num_clients=args.writers, data_dir=args.data_dir)
    mean_n = float(np.mean(np.asarray(data.count)))
    local = LocalTraining(steps=max(1, math.ceil(mean_n / 10)), lr=0.004, batch_size=10)
    split = femnist_cnn_for(data)
    whole = dataclasses.replace(split, body_apply=None, head_apply=None)
    say(f"# jax {jax.__version__}, {jax.default_backend()}, {os.cpu_count()} cores; FEMNIST "
        f"{data.num_clients} writers, n_max {data.x.shape[1]} train / {data.x_test.shape[1]} "
        f"test, mean {mean_n:.0f} train samples; {local.steps} steps of batch 10 a round; "
        f"model {split.name}")
    say()

    programs = {}
    for k in args.k:
        for label, model in (("K full passes (c45fe34)", whole), ("shared body pass", split)):
            alg = IFCA(model, IFCAConfig(num_clusters=k, option="model", local=local,
                                         weight_sharing=True))
            state = alg.init(jax.random.key(1), data)
            t0 = time.perf_counter()
            rnd = jax.jit(alg.round).lower(state, jax.random.key(2), data).compile()
            ev = jax.jit(alg.objective_and_evaluate).lower(state, data).compile()
            programs[k, label] = dict(state=state, round=rnd, eval=ev, times={"round": [],
                                      "eval": []}, compile=time.perf_counter() - t0)
            print(f"compiled K={k} {label}: {programs[k, label]['compile']:.1f} s", flush=True)

    loads = []
    for rep in range(args.reps):
        for k in args.k:
            for label, prog in ((l, programs[kk, l]) for kk, l in programs if kk == k):
                t0 = time.perf_counter()
                new, _ = prog["round"](prog["state"], jax.random.key(2), data)
                jax.block_until_ready(new)
                prog["times"]["round"].append(time.perf_counter() - t0)
                prog["new"] = new
                t0 = time.perf_counter()
                jax.block_until_ready(prog["eval"](prog["state"], data))
                prog["times"]["eval"].append(time.perf_counter() - t0)
                loads.append(os.getloadavg()[0])
                print(f"rep {rep} K={k} {label}: round {prog['times']['round'][-1]:.2f} s, "
                      f"evaluate {prog['times']['eval'][-1]:.2f} s, load {loads[-1]:.2f}",
                      flush=True)

    say("| K | losses of the K models | compile s (round + evaluate) | s / round (each call) | "
        "s / objective_and_evaluate (each call) |")
    say("|---:|---|---:|---|---|")
    fmt = lambda ts: f"{statistics.median(ts):.2f} ({', '.join(f'{t:.2f}' for t in ts)})"
    for (k, label), prog in programs.items():
        say(f"| {k} | {label} | {prog['compile']:.1f} | {fmt(prog['times']['round'])} | "
            f"{fmt(prog['times']['eval'])} |")
    say()
    for k in args.k:
        a, b = (programs[k, l]["new"] for l in ("K full passes (c45fe34)", "shared body pass"))
        same = bool(jnp.array_equal(a.assign, b.assign))
        diff = max(float(jnp.max(jnp.abs(x - y))) for x, y in
                   zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)))
        say(f"K={k}: assignments after the round equal: {same}; largest |param difference|: "
            f"{diff:.2e}")
    say()
    say(f"Load (1-min average) after each timed pair: {', '.join(f'{l:.2f}' for l in loads)}. "
        f"uptime at end: {uptime()}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
