"""How often IFCA separates the rotations of rotated MNIST, by model initialisation.

IFCA option II at the authors' rotated-MNIST configuration (m clients of n images, K = 4
rotations, MLP 784-200-10, tau = 10 full-batch steps at lr 0.1, full participation, equal
mean), run for every seed at once: the seeds are one vmapped axis of a single compiled
round, and so are the initialisation variants (the same seeds under each init; the data
set is the same for all, built from data seed 0). After every round the file is rewritten
with what is known so far, so a run cut short still leaves its rounds.

A seed *separates* at round t when the assignment used in round t (argmin of every client's
training loss over the K models after t - 1 rounds; t = 1 is the initial models) has
misclustering 0: every rotation in its own cluster, sizes [m/4] * 4. ``--rounds R`` trains R
rounds and reports the assignments of rounds 1 .. R + 1.

What the authors' code (github.com/jichan3751/ifca, mnist/train_cluster_mnist.py) does, and
what this library does, for the candidates:
  pixels: x / 255 in [0, 1], no mean/std normalisation (torchvision Normalize commented
    out) - the same as ``ifca_rotated_mnist``;
  ties: ``np.argmin`` over the K losses, first index - the same as ``jnp.argmin``;
  order: assignment from the current models, then tau local steps from the assigned model,
    then the equal mean per non-empty cluster - the same round;
  init: K ``nn.Linear`` models with PyTorch's default U(+-1/sqrt(fan_in)) weights and
    biases - ``--model-arg init=torch``; this library's default is Flax's (LeCun-normal
    weights, zero biases). The variants "torch-zero-bias" and "flax-small" (Flax weights
    times 1/sqrt(3), PyTorch's weight standard deviation, zero biases) split the two
    differences (bias and weight scale).

    python benchmarks/ifca_separation.py --clients 400 --n 100 --seeds 20 --rounds 2 \
        --inits flax torch --chunk 1 --seed-batch 8 --out runs/ifca_separation_m400.md
    python benchmarks/ifca_separation.py --combine FILE [FILE ...] --notes-file NOTES \
        --out benchmarks/results/ifca/separation.md      # the summary of several runs
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import metrics
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.recipes import ifca_rotated_mnist
from fedclust_jax.models.mlp import mlp
from _common import output_file  # noqa: E402
from provenance import generated_by  # noqa: E402

VARIANTS = ("flax", "torch", "torch-zero-bias", "flax-small")


def variant_init(name: str):
    """key -> MLP 784-200-10 params under initialisation variant ``name``."""
    flax, torch = mlp((784, 200, 10)).init, mlp((784, 200, 10), init="torch").init
    zero_bias = lambda p: {"layers": {i: {"kernel": l["kernel"], "bias": jnp.zeros_like(l["bias"])}
                                      for i, l in p["layers"].items()}}
    if name == "flax":
        return flax
    if name == "torch":
        return torch
    if name == "torch-zero-bias":
        return lambda key: zero_bias(torch(key))
    if name == "flax-small":
        return lambda key: jax.tree.map(lambda a: a / np.sqrt(3.0), flax(key))
    raise ValueError(f"init variant must be one of {VARIANTS}, got {name!r}")


def load():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def summarize(assign: np.ndarray, truth: np.ndarray, k: int):
    """Per seed: (sorted cluster sizes, misclustering) of an assignment [S, N]."""
    return [(sorted(np.bincount(a, minlength=k).tolist(), reverse=True),
             metrics.misclustering(a, truth)) for a in assign]


def write(path, command, args, info, records, variants, seeds, done, timings):
    lines = [command, "", "# IFCA cluster separation on rotated MNIST, by initialisation", "",
             f"m = {args.clients} clients, n = {args.n} train images each, K = 4 rotations, MLP "
             f"784-200-10, option II (model averaging), tau = {args.steps} full-batch steps at "
             f"lr {args.lr}, full participation, chunk {args.chunk}. Seeds 0..{seeds - 1} "
             f"(init and round keys; one data set, data seed 0), all seeds and variants one "
             f"vmapped axis of one compiled round (in batches of {args.seed_batch or 'all'}). {info}", "",
             "A seed separates at round t when the assignment used in round t (from the models "
             "after t - 1 rounds; t = 1: the initial models) puts every rotation in its own "
             "cluster (misclustering 0).", "",
             f"Rounds trained: {done} of {args.rounds}.", "",
             "## Separation rate (seeds with misclustering 0)", "",
             "| init | " + " | ".join(f"round {t}" for t in range(1, len(records) + 1)) +
             " | mean misclustering at the last |",
             "|---|" + "---|" * (len(records) + 1)]
    for v, name in enumerate(variants):
        row, last = [], None
        for rec in records:
            per = rec[v * seeds:(v + 1) * seeds]
            sep = sum(m == 0 for _, m in per)
            row.append(f"{sep} / {seeds} ({sep / seeds:.2f})")
            last = np.mean([m for _, m in per])
        lines.append(f"| {name} | " + " | ".join(row) + f" | {last:.3f} |")
    lines += ["", "## Per seed: cluster sizes at the last round (sorted); misclustering at "
              "rounds 1, 2, ...", ""]
    lines += ["| seed | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for s in range(seeds):
        cells = []
        for v in range(len(variants)):
            sizes = records[-1][v * seeds + s][0]
            miss = " / ".join(f"{rec[v * seeds + s][1]:.3f}" for rec in records)
            cells.append(f"{sizes}; {miss}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "## Wall time", ""] + [f"- {t}" for t in timings] + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def combine(paths, notes, out, command):
    """One table of the separation rates of several result files of this script."""
    lines = [command, "", "# IFCA cluster separation on rotated MNIST: summary", "",
             "Separation rate (seeds whose assignment puts every rotation in its own cluster) "
             "by the round whose assignment it is (round t: from the models after t - 1 rounds), "
             "from the files listed; each file gives its settings, per-seed cluster sizes, load "
             "and wall times.", "",
             "| file | m | n | seeds | init | rounds 1, 2, ... | mean misclustering at the last |",
             "|---|---|---|---|---|---|---|"]
    for path in paths:
        text = open(path).read()
        m, n = re.search(r"^m = (\d+) clients, n = (\d+)", text, re.M).groups()
        seeds = int(re.search(r"Seeds 0\.\.(\d+)", text)[1]) + 1
        table = text.split("## Separation rate", 1)[1].split("\n## ", 1)[0]
        for row in re.findall(r"^\| ([\w-]+) \| (.+) \| ([\d.]+) \|$", table, re.M):
            if row[0] == "init":
                continue
            rates = " ; ".join(c.split(" (")[0] for c in row[1].split(" | "))
            lines.append(f"| `{os.path.relpath(path, os.path.dirname(out) or '.')}` | {m} | {n} | {seeds} | {row[0]} | "
                         f"{rates} | {row[2]} |")
    text = "\n".join(lines) + "\n"
    if notes:
        text += "\n" + open(notes).read()
    with open(out, "w") as f:
        f.write(text)
    print(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=2400, help="m, a multiple of 4")
    p.add_argument("--n", type=int, default=100, help="train images per client")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3, help="rounds trained (0: initial assignment only)")
    p.add_argument("--steps", type=int, default=10, help="tau, full-batch local steps")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--inits", nargs="+", default=["flax", "torch"], choices=VARIANTS)
    p.add_argument("--chunk", type=int, default=None,
                   help="clients per vectorized chunk (1 is fastest on a CPU; unset: one vmap)")
    p.add_argument("--seed-batch", type=int, default=None,
                   help="seed-variants vmapped at once (default all; lower it to bound memory: "
                        "about 3 x clients x 159k x 4 bytes each)")
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA", "../shared/data"),
                   help="folder holding mnist/ (IDX files)")
    p.add_argument("--out", type=output_file, default="benchmarks/results/ifca/separation.md")
    p.add_argument("--combine", nargs="+", metavar="FILE",
                   help="only write a summary table of these result files to --out")
    p.add_argument("--notes-file", default=None, help="markdown appended to the --combine output")
    args = p.parse_args(argv)
    command = generated_by(None if argv is None else [__file__, *argv]).strip()
    if args.combine:
        return combine(args.combine, args.notes_file, args.out, command)
    if args.clients % 4 or args.seeds < 1 or args.rounds < 0:
        p.error("--clients must be a multiple of 4, --seeds >= 1 and --rounds >= 0 (0: only the "
                "initial assignment)")

    data = ifca_rotated_mnist(jax.random.key(0), num_clients=args.clients, n=args.n,
                              data_dir=args.data_dir)
    truth = np.asarray(data.cluster)
    model = mlp((784, 200, 10))
    alg = IFCA(model, IFCAConfig(num_clusters=4, option="model", chunk=args.chunk,
                                 local=LocalTraining(steps=args.steps, lr=args.lr)))
    seeds, k = args.seeds, 4
    keys = jax.vmap(jax.random.key)(jnp.arange(seeds))
    params = [jax.vmap(lambda key, f=variant_init(v): jax.vmap(f)(jax.random.split(key, k)))(keys)
              for v in args.inits]
    params = jax.tree.map(lambda *a: jnp.concatenate(a), *params)
    all_keys = jnp.concatenate([keys] * len(args.inits))
    states = jax.vmap(lambda key, prm: alg.init(key, data, params=prm),
                      in_axes=(0, 0))(all_keys, params)
    batch = args.seed_batch or len(all_keys)
    # seed-variants one vmapped axis, in batches of ``batch`` (lax.map(batch_size=...) is a
    # vmap over each batch): option II holds every client's trained model, so memory grows
    # with seed-variants x clients x parameters
    step = jax.jit(lambda s, keys, d: jax.lax.map(lambda sk: alg.round(sk[0], sk[1], d)[0],
                                                   (s, keys), batch_size=batch))
    assign = jax.jit(lambda s, d: jax.lax.map(
        lambda st: alg.assign(st.params, d.x, d.y, d.count)[0], s, batch_size=batch))
    info = (f"{platform.machine()} CPU x {os.cpu_count()}, jax {jax.__version__}, "
            f"backend {jax.default_backend()}; load at start: {load()}.")
    records, timings = [], []
    start = time.perf_counter()
    for t in range(args.rounds + 1):
        t0 = time.perf_counter()
        if t > 0:
            states = step(states, jax.vmap(jax.random.fold_in, in_axes=(0, None))(all_keys, t - 1),
                          data)
        records.append(summarize(np.asarray(assign(states, data)), truth, k))
        what = "initial assignment" if t == 0 else f"round {t} and the assignment after it"
        timings.append(f"{what}: {time.perf_counter() - t0:.1f} s ({len(all_keys)} seed-variants"
                       f"{', compilation included' if t < 2 else ''}); {load()}")
        write(args.out, command, args, info, records, args.inits, seeds, t, timings)
        print(timings[-1], flush=True)
    timings.append(f"total {time.perf_counter() - start:.1f} s")
    write(args.out, command, args, info, records, args.inits, seeds, args.rounds, timings)
    print(open(args.out).read())


if __name__ == "__main__":
    main()
