"""Threshold-clustering paper ("Provably personalized and robust FL"), Table 1 on MNIST.

K = 4 clusters x 75 clients (N = 300) of disjoint shuffled MNIST shards (recipe
``personalized_mnist``: 200 train / 33 test images a client, cluster k's images rotated by
k * 90 degrees, or labels mapped y -> (y + k) mod 10). Methods: Federated-Clustering (FC,
Alg. 2; TC with K = 1 from the client's own gradient, radius = 20th percentile of the
distances, the clients cut into 16 random subgroups every round, as the paper), IFCA,
Local, Global (FedAvg), Ditto (lambda = 1), KNN (kNN-Per on the FedAvg model, lambda_knn =
0.5 / 0.9 as the paper, k = 10, pixel features) and the ground-truth oracle (per-cluster
averaging with the true clusters). Writes a markdown table of mean +- std test accuracy
and loss over seeds beside the paper's numbers. Seeds are a vmap axis of one compiled program per method.

    python benchmarks/threshold_table1.py --data-dir ../shared/data/mnist \
        [--seeds 3] [--rounds 300] [--out benchmarks/results/threshold/table1_script.md]
    python benchmarks/threshold_table1.py --combine RESULT.md [RESULT.md ...] [--out FILE]
    python benchmarks/threshold_table1.py --seeds 1 --rounds 200 --hidden 0 --jsonl R.jsonl
    python benchmarks/threshold_table1.py --combine R.jsonl [--notes-file NOTES.md] --out FILE.md

The paper does not give the model, optimiser, learning rate, batch size, rounds, TC
iterations or seeds. Defaults here (the full setting, meant for an accelerator): the IFCA
paper's MLP 784-200-10, one SGD step per round for every method (FC, Alg. 2, takes one
gradient step per round; the baselines get the same), lr 0.1, minibatch 50 (fresh per
gradient), 300 rounds, l = 10 TC iterations (the paper's synthetic value), 3 seeds. IFCA: option II with
one local step, which is one averaged gradient step per cluster (IFCA option I with the
cluster mean), K = 4 independently initialised models, assignment by the full training
loss. Global: FedAvg with one local step (= global minibatch SGD). Local: one SGD step per
round on the client's own data. Oracle: IFCA with the assignment frozen to the truth. Every
method takes the same number of steps with the same lr and batch size (the paper: "we tune
the learning rate separately for each algorithm ... but preserve all other algorithmic
setups"; no tuning here). ``--time-round`` only measures one compiled round per method;
``--combine`` gives mean +- std over the seeds of several result files of one setting; a
seed found in several files must have the same accuracy in each (else every difference is
listed, so ``--combine`` of an old and a new run is their comparison; ``--first-wins``
uses the first file's value and lists the differences in the combined file).
``--jsonl FILE`` appends one record per (task, method) as it finishes (command, wall and CPU
seconds, ``uptime`` before, per-seed accuracy, loss and IFCA misclustering); ``--combine``
of JSONL files writes the whole result file from them (table, misclustering, run times, then
``--notes-file``), so notes can be written after a run without rerunning it.

FC costs O(N x N / 16) minibatch gradients a round. Its TC runs in Gram space by default
(``--tc-method gram``: one [S, P] x [P, S] product per client, then the l iterations on
S x S numbers); ``--tc-method points`` re-reads each client's [S, P] gradients in every
iteration. MLP, one round on the 2-core CPU: 6.7 s with "points" at chunk 1 (quiet; IFCA
0.85 s), 4.5 s with "gram" (300 rounds of one seed in 1352 s); timed side by side in one
process on the quiet CPU (``threshold_tc_methods.py``), gram 4.0-4.5 s against points
4.9-5.6 s. With "points" one client at a time
(``--fc-chunk 1``, the default) is fastest (shared cores: 20 s at chunk 1, 37 s at chunk 5,
58 s at chunk 20); with "gram" chunks 1, 4 and 20 timed alike. The full setting is about
2.3 hours of FC on that CPU. benchmarks/results/threshold/table1_script.md is the reduced setting
``--hidden 0 --rounds 200 --seeds 1`` (softmax regression), run with ``--jsonl`` and written
by ``--combine`` with benchmarks/notes/threshold_table1.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import metrics
from fedclust_jax.algorithms.ditto import Ditto, DittoConfig
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.knn_per import KNNPer, KNNPerConfig
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.algorithms.fc import FCConfig, FederatedClustering
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.recipes import personalized_mnist
from fedclust_jax.models.mlp import mlp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import command, generated_by  # noqa: E402
from _common import output_file  # noqa: E402

PAPER = {  # Table 1: (acc %, loss)
    "rotation": {"Local": (71.3, 0.517), "Global": (46.6, 0.631), "Ditto": (62.0, 0.576),
                 "IFCA": (54.6, 0.588), "KNN": (52.1, 2.395), "FC": (75.4, 0.475),
                 "GT (oracle)": (84.7, 0.432)},
    "label": {"Local": (75.2, 0.489), "Global": (22.2, 0.803), "Ditto": (61.7, 0.578),
              "IFCA": (65.4, 0.531), "KNN": (63.2, 1.411), "FC": (77.0, 0.468),
              "GT (oracle)": (85.1, 0.430)},
}
METHODS = ("Local", "Global", "Ditto", "IFCA", "KNN", "FC", "GT (oracle)")
KNN_LAM = {"rotation": 0.5, "label": 0.9}   # the paper's lambda_knn per task
TASK_NAME = {"rotation": "Rotation", "label": "Private label"}


def build(method, args, task):
    local = LocalTraining(steps=1, lr=args.lr, batch_size=args.batch_size)
    model = mlp((784, args.hidden, 10) if args.hidden else (784, 10))
    ch = args.chunk
    if method == "FC":
        return FederatedClustering(model, FCConfig(
            local=local, tc_iters=args.tc_iters, radius_quantile=0.2,
            num_groups=args.fc_groups, same_init=True, chunk=args.fc_chunk or None,
            tc_method=args.tc_method))
    if method == "IFCA":
        return IFCA(model, IFCAConfig(num_clusters=4, option="model", local=local, chunk=ch))
    if method == "GT (oracle)":
        return IFCA(model, IFCAConfig(num_clusters=4, option="model", local=local,
                                      assignment="oracle", chunk=ch))
    if method == "Global":
        return FedAvg(model, FedAvgConfig(local=local, chunk=ch))
    if method == "Local":
        return Local(model, LocalConfig(local=local, chunk=ch))
    if method == "Ditto":
        return Ditto(model, DittoConfig(local=local, lam=1.0, chunk=ch))
    if method == "KNN":
        return KNNPer(model, KNNPerConfig(local=local, lam=KNN_LAM[task], neighbors=10, chunk=ch))
    raise ValueError(method)


def stack(datas):
    return jax.tree.map(lambda *a: jnp.stack(a), *datas)


def run(alg, keys, data, rounds):
    def one(key, d):
        state = alg.init(jax.random.fold_in(key, 0), d)
        state = jax.lax.scan(lambda s, t: (alg.round(s, jax.random.fold_in(key, t + 1), d)[0], None),
                             state, jnp.arange(rounds))[0]
        ev = alg.evaluate(state, d)
        return ev["assigned_test_acc"], ev["assigned_test_loss"], ev["assign"]
    return jax.jit(jax.vmap(one))(keys, data)


def time_round(alg, keys, data, reps=2):
    """Seconds per round (all seeds), after compilation."""
    state = jax.jit(jax.vmap(lambda k, d: alg.init(jax.random.fold_in(k, 0), d)))(keys, data)
    rnd = jax.jit(jax.vmap(lambda s, k, d: alg.round(s, k, d)[0]))
    t0 = time.perf_counter()
    state = jax.block_until_ready(rnd(state, keys, data))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(reps):
        state = jax.block_until_ready(rnd(state, keys, data))
    return (time.perf_counter() - t0) / reps, compile_s


def fmt(v, scale=1.0, digits=1):
    v = np.asarray(v, float) * scale
    if v.size == 1:                       # one seed: no spread to show
        return f"{v.mean():.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}"


class Combined(NamedTuple):
    """What ``combine`` read: the files' common ``setting``, ``lines`` of accuracy mean +-
    std per (task, method), the ``differ``ences between files (one line each) and their
    ``summary`` ("N of the M values found in more than one file differ")."""
    setting: str
    lines: list
    differ: list
    summary: str


def combine(paths, first_wins=False):
    """``Combined`` lines of accuracy mean +- std over every seed found in result files
    written by ``main`` (not by ``combined_file``): one-seed files give their table values,
    several-seed files their per-seed lines. The files must share one setting, and a (task,
    method, seed) found in several files must agree; otherwise every disagreement is listed
    with its files, and how many of the shared values agree. ``first_wins`` instead keeps the
    first file's value and returns the disagreements (for the combined file to list)."""
    per, settings = {}, {}                               # (task, method) -> {seed: acc}
    where, differ = {}, []                  # (task, method, seed) -> first file; disagreements
    shared = 0

    def put(task, method, seed, acc):
        nonlocal shared
        old = per.setdefault((task, method), {}).setdefault(seed, acc)
        if (task, method, seed) in where:
            shared += 1
            if old != acc:
                differ.append(f"{task} {method} seed {seed}: {old} in "
                              f"{where[task, method, seed]}, {acc} in {path}")
        where.setdefault((task, method, seed), path)

    for path in paths:
        text = open(path).read()
        setting = re.search(r"^Setting: (.*?)\. Command", text, re.M)
        if not setting:
            sys.exit(f"{path}: no 'Setting: ... Command' line; not a per-run result file of "
                     "this script")
        settings.setdefault(setting[1], path)
        if len(settings) > 1:
            sys.exit("different settings, not combined:\n" + "\n".join(
                f"{f}: {s}" for s, f in settings.items()))
        seeds = [int(v) for v in re.search(r"over seeds \[([\d, ]+)\]", text)[1].split(",")]
        if len(seeds) == 1:
            for row in re.findall(r"^\| (.+?) \| (.+?) \| .+? \| .+? \| .+? \| (.+?) \|", text, re.M):
                method = "FC" if row[0].startswith("FC") else row[0]
                for task, acc in (("rotation", row[1]), ("label", row[2])):
                    if method in METHODS and acc != "not run":
                        put(task, method, seeds[0], float(acc))
        lines = re.findall(
            r"^- (Rotation|Private label), (.+?): ([\d., ]+?)(?: \(misclustering.*)?$", text, re.M)
        if len(seeds) > 1 and not lines:
            sys.exit(f"{path}: {len(seeds)} seeds but no per-seed section (written before the "
                     "script printed one); rerun it or leave it out")
        for task, method, accs in lines:
            task = next(t for t, n in TASK_NAME.items() if n == task)
            for seed, acc in zip(seeds, accs.split(",")):
                put(task, method, seed, float(acc))
    summary = f"{len(differ)} of the {shared} values found in more than one file differ"
    if differ and not first_wins:
        sys.exit(f"{summary}, not combined (--first-wins keeps the first file's value and "
                 "lists these in the output):\n" + "\n".join(differ))
    return Combined(next(iter(settings)), [
        f"{TASK_NAME[task]}, {method}: {fmt(list(per[task, method].values()))} "
        f"over seeds {sorted(per[task, method])}"
        for task in TASK_NAME for method in METHODS if (task, method) in per], differ, summary)


def combine_jsonl(paths, argv, notes_file=None):
    """The whole result file (table, IFCA misclustering, run times, then ``notes_file``) from
    JSONL records written by ``--jsonl``. The records must share one setting; a later record
    for the same (task, method) replaces an earlier one."""
    recs = {}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    recs[r["task"], r["method"]] = r
    if not recs:
        sys.exit(f"no records in {', '.join(paths)}")
    first = next(iter(recs.values()))
    for r in recs.values():
        if r["setting"] != first["setting"] or r["seeds"] != first["seeds"]:
            sys.exit("records of different settings or seeds, not combined:\n"
                     f"{first['setting']} seeds {first['seeds']}\n{r['setting']} seeds {r['seeds']}")
    order = {m: i for i, m in enumerate(METHODS)}
    rows = sorted(recs.values(), key=lambda r: (list(TASK_NAME).index(r["task"]),
                                                order[r["method"]]))
    results, times, cpu, loads, miscls = {}, {}, {}, {}, {}
    for r in rows:
        results.setdefault(r["task"], {})[r["method"]] = (r["acc"], r["loss"], r["rounds"])
        key = f"{r['method']} ({r['task']})"
        times[key], cpu[key] = r["seconds"], r["cpu_seconds"]
        loads[key] = r["uptime_before"].split("load average:")[-1].strip()
        if r["misclustering"] is not None:
            miscls[r["task"]] = r["misclustering"]
    args = argparse.Namespace(note=[], **first["setting"])
    commands = list(dict.fromkeys(r["command"] for r in rows))
    text = table(results, times, sum(times.values()), args, first["seeds"], miscls,
                 first_line=generated_by([__file__, *argv]).rstrip("\n"),
                 run_commands=commands, cpu=cpu, loads=loads,
                 machine="; ".join(dict.fromkeys(r["machine"] for r in rows)))
    if notes_file:
        text += "\n" + open(notes_file).read()
    return text


def combined_file(combined, paths, argv):
    """Markdown of a ``Combined``'s lines and disagreements, with the setting, files and
    command (``argv``)."""
    return "\n".join([
        generated_by([__file__, *argv]).rstrip("\n"), "",
        "# Threshold-clustering paper, Table 1: test accuracy (%) over seeds", "",
        f"Setting: {combined.setting}.", "",
        "Mean ± std over the seeds of " + ", ".join(f"`{p}`" for p in paths) + ". Command: "
        f"`{command([__file__, *argv])}`.", "",
        *[f"- {line}" for line in combined.lines], "",
        *([f"{combined.summary}; the first file's value is used:", "",
           *[f"- {line}" for line in combined.differ], ""] if combined.differ else [])])


def default_data_dir():
    """The first ``shared/data/mnist`` in the repository root's parent or a folder above it
    (../shared/data/mnist from a checkout beside ``shared``; works from nested worktrees)."""
    for up in Path(__file__).resolve().parents[1].parents:
        if (up / "shared" / "data" / "mnist").is_dir():
            return str(up / "shared" / "data" / "mnist")
    return "../shared/data/mnist"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


SETTING_KEYS = ("hidden", "lr", "batch_size", "rounds", "fc_rounds", "tc_iters", "fc_groups",
                "tc_method")


def make_parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_MNIST") or default_data_dir(),
                   help="MNIST IDX files (default: $FEDCLUST_MNIST, else the first "
                        "shared/data/mnist in the repository root's parent or above)")
    p.add_argument("--tasks", nargs="+", default=["rotation", "label"], choices=["rotation", "label"])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--seeds", type=int, default=3, help="number of seeds")
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds run are first-seed, ..., first-seed + seeds - 1")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--fc-rounds", type=int, default=None, help="FC rounds (default --rounds)")
    p.add_argument("--hidden", type=int, default=200,
                   help="MLP hidden units (0: softmax regression, 784-10)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--tc-iters", type=int, default=10)
    p.add_argument("--fc-groups", type=int, default=16)
    p.add_argument("--tc-method", default="gram", choices=["gram", "points"],
                   help="FC's TC in Gram space (default) or over the gradients")
    p.add_argument("--chunk", type=int, default=None, help="clients per chunk (baselines)")
    p.add_argument("--fc-chunk", type=int, default=1,
                   help="clients per chunk in FC (0: all at once, for an accelerator)")
    p.add_argument("--time-round", action="store_true", help="only time one round per method")
    p.add_argument("--out", type=output_file, default=None)
    p.add_argument("--jsonl", type=output_file, default=None,
                   help="append one JSON line per (task, method) to this file (command, seconds, "
                        "per-seed accuracy, loss and IFCA misclustering); --combine reads it")
    p.add_argument("--note", action="append", default=[], help="a line for the notes")
    p.add_argument("--notes-file", default=None,
                   help="markdown file appended to the --combine output (committed notes)")
    p.add_argument("--combine", nargs="+", metavar="FILE",
                   help="only print (and with --out write) mean +- std over the seeds of result "
                        "files of this script")
    p.add_argument("--first-wins", action="store_true",
                   help="--combine of .md files: where a seed's accuracy differs between files, "
                        "use the first file's and list the differences in the output")
    return p


def main(argv=None):
    p = make_parser()
    args = p.parse_args(argv)
    if args.notes_file and not os.path.isfile(args.notes_file):
        p.error(f"--notes-file {args.notes_file}: no such file")
    if args.combine and all(f.endswith(".jsonl") for f in args.combine):
        text = combine_jsonl(args.combine, sys.argv[1:] if argv is None else argv,
                             args.notes_file)
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text)
        return
    if args.combine:
        if any(f.endswith(".jsonl") for f in args.combine):
            sys.exit("--combine takes either JSONL files (from --jsonl) or result .md files, "
                     "not both")
        combined = combine(args.combine, args.first_wins)
        print("\n".join(combined.lines + ([combined.summary, *combined.differ]
                                           if combined.differ else [])))
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(combined_file(combined, args.combine,
                                       sys.argv[1:] if argv is None else argv))
                if args.notes_file:
                    fh.write("\n" + open(args.notes_file).read())
        return
    if args.seeds < 1 or args.first_seed < 0:
        p.error(f"--seeds must be >= 1 and --first-seed >= 0 (got {args.seeds}, {args.first_seed})")

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    results, times, miscls = {}, {}, {}
    t_all = time.perf_counter()
    for task in args.tasks:
        data = stack([personalized_mnist(jax.random.key(s), task=task, data_dir=args.data_dir)
                      for s in seeds])
        print(f"{task}: {data.count.shape[1]} clients, {int(data.count.max())} train / "
              f"{int(data.count_test.max())} test images each, seeds {seeds}", flush=True)
        for method in args.methods:
            alg = build(method, args, task)
            if args.time_round:
                per, comp = time_round(alg, keys, data)
                print(f"  {method}: {per:.2f} s/round ({len(seeds)} seeds), first call {comp:.1f} s",
                      flush=True)
                continue
            rounds = args.fc_rounds if (method == "FC" and args.fc_rounds) else args.rounds
            t0, cpu0, load = time.perf_counter(), time.process_time(), uptime()
            acc, loss, assign = jax.block_until_ready(run(alg, keys, data, rounds))
            dt = time.perf_counter() - t0
            acc = [100 * float(np.nanmean(a)) for a in np.asarray(acc)]
            loss = [float(np.nanmean(a)) for a in np.asarray(loss)]
            results.setdefault(task, {})[method] = (acc, loss, rounds)
            times[f"{method} ({task})"] = dt
            extra = ""
            if method == "IFCA":
                miscl = [metrics.misclustering(a, c) for a, c in
                         zip(np.asarray(assign), np.asarray(data.cluster))]
                miscls.setdefault(task, miscl)
                extra = f", misclustering {fmt(miscl, digits=3)}"
            print(f"  {method} [{rounds} rounds]: acc {fmt(acc)}, loss {fmt(loss, digits=3)}"
                  f"{extra} [{dt:.0f} s]", flush=True)
            if args.jsonl:
                record = dict(
                    task=task, method=method, seeds=seeds, rounds=rounds, acc=acc, loss=loss,
                    misclustering=miscls[task] if method == "IFCA" else None,
                    seconds=round(dt, 1), cpu_seconds=round(time.process_time() - cpu0, 1),
                    uptime_before=load, setting={k: getattr(args, k) for k in SETTING_KEYS},
                    machine=f"{platform.processor() or platform.machine()}, JAX "
                            f"{jax.__version__} on {jax.devices()[0].platform}",
                    command=command(None if argv is None else [__file__, *argv]))
                with open(args.jsonl, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
    if args.time_round:
        return
    wall = time.perf_counter() - t_all
    text = table(results, times, wall, args, seeds, miscls)
    if args.notes_file:
        text += "\n" + open(args.notes_file).read()
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


def without_notes(argv):
    """``argv`` without its ``--note TEXT`` / ``--note=TEXT`` pairs (``--notes-file`` kept)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return out


def table(results, times, wall, args, seeds, miscls, *, first_line=None, run_commands=None,
          cpu=None, loads=None, machine=None):
    """Markdown of one setting's results. ``results[task][method] = (acc, loss, rounds)``
    (per seed), ``times["method (task)"]`` seconds, ``miscls[task]`` IFCA's misclustering per
    seed. Defaults describe the running invocation (``sys.argv``); ``--combine`` of JSONL
    passes its own ``first_line``, the ``run_commands`` that made the records, their
    ``cpu`` seconds and ``loads`` (uptime before each) and the records' ``machine``."""
    fc_rounds = args.fc_rounds or args.rounds
    run_argv = [__file__, *without_notes(sys.argv[1:])]
    if run_commands is None:
        run_commands = [command(run_argv)]
    if first_line is None:
        first_line = generated_by(run_argv).rstrip("\n")
    lines = [
        first_line, "",
        "# Threshold-clustering paper, Table 1 (MNIST, K = 4 x 75 clients)", "",
        "Test accuracy (%) and test loss (mean cross-entropy) of each client's model on its own "
        "test images, averaged over the 300 clients; mean ± std over seeds "
        f"{seeds} (vmapped; one seed: the value alone). Paper: one run, no error bars.", "",
        f"Setting: {'MLP 784-%d-10' % args.hidden if args.hidden else 'softmax regression 784-10'}, SGD lr {args.lr}, minibatch {args.batch_size} (fresh per "
        f"gradient), one step per round; {args.rounds} rounds (FC: {fc_rounds}); FC: "
        f"{args.fc_groups} random subgroups per round, l = {args.tc_iters} TC iterations, "
        "radius = 20th percentile. " + ("Command" if len(run_commands) == 1 else "Commands")
        + ": " + ", ".join(f"`{c}`" for c in run_commands) + ".", "",
        "| method | Rot acc (ours) | Rot acc (paper) | Rot loss (ours) | Rot loss (paper) "
        "| Priv acc (ours) | Priv acc (paper) | Priv loss (ours) | Priv loss (paper) |",
        "|---|---|---|---|---|---|---|---|---|"]
    for m in ("Local", "Global", "Ditto", "IFCA", "KNN", "FC", "GT (oracle)"):
        row = [m if m != "FC" else "FC (Federated-Clustering)"]
        for task in ("rotation", "label"):
            r = results.get(task, {}).get(m)
            pa, pl = PAPER[task][m]
            row += [fmt(r[0]) if r else "not run", f"{pa:.1f}",
                    fmt(r[1], digits=3) if r else "not run", f"{pl:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    if miscls:
        lines += ["", "IFCA misclustering (fraction of clients outside their true cluster, "
                  "Hungarian matching, final models): " + "; ".join(
                      f"{TASK_NAME[t]} {fmt(v, digits=3)}" for t, v in miscls.items()) + "."]
    if len(seeds) > 1:
        lines += ["", "## Per seed", "", "Test accuracy (%) of each seed, in the order "
                  f"{seeds}; IFCA misclustering beside it.", ""]
        for task, res in results.items():
            for m, (acc, _, _) in res.items():
                per = ", ".join(f"{a:.1f}" for a in acc)
                if m == "IFCA" and task in miscls:
                    per += " (misclustering " + ", ".join(f"{v:.3f}" for v in miscls[task]) + ")"
                lines.append(f"- {TASK_NAME[task]}, {m}: {per}")
    if loads is None:
        lines += ["", "## Run time (all seeds, includes compilation)", "", "| run | seconds |",
                  "|---|---|"]
        lines += [f"| {k} | {v:.0f} |" for k, v in times.items()]
        lines += [f"| total (wall) | {wall:.0f} |"]
    else:
        lines += ["", "## Run time (all seeds, includes compilation)", "",
                  "Wall and CPU seconds of each (method, task), and the load average (`uptime`) "
                  "just before it started.", "",
                  "| run | seconds | CPU seconds | load average before |", "|---|---|---|---|"]
        lines += [f"| {k} | {v:.0f} | {cpu[k]:.0f} | {loads[k]} |" for k, v in times.items()]
        lines += [f"| sum | {wall:.0f} | {sum(cpu.values()):.0f} | |"]
    if machine is None:
        machine = (f"{platform.processor() or platform.machine()}, JAX {jax.__version__} on "
                   f"{jax.devices()[0].platform}")
    lines += ["", f"Machine: {machine}.", ""]
    if args.note:
        lines += ["## Notes", ""] + [f"- {n}" for n in args.note] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
