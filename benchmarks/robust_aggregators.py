"""Seconds per call of each robust per-cluster aggregator (after compilation).

    python benchmarks/robust_aggregators.py [--clients 1000] [--dim 50000] [--clusters 4]
        [--trials 0] [--repeats 3] [--only median trimmed] [--skip masked]
        [--out FILE.md] [--jsonl FILE.jsonl]
    python benchmarks/robust_aggregators.py --combine FILE.jsonl|FILE.md ... --out FILE.md \
        [--notes-file NOTES.md]

Uploads N x d float32, assignments uniform over K clusters; median (three sorting backends),
trimmed mean beta = 0.1 (three backends), mean, geometric median (10 Weiszfeld steps),
Krum, multi-Krum, centered clipping (1 step). ``--trials T``: T independent problems, one
vmap over them (as the BR-IFCA Figure 1 trials).

A run prints one line per variant; ``--out FILE.md`` appends the run's table (a heading with
the setting, a line with the command and load, the table), ``--jsonl FILE`` appends one
record per variant (seconds, first-call seconds, setting, device, jax version, load before
the run, date, command). ``--combine`` writes a result file from JSONL records and from
markdown written by ``--out`` (also the older form without the command line): one table per
setting, headed by the runs that produced it, then ``--notes-file``. A later row of the same
setting and variant replaces an earlier one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, load_averages  # noqa: E402
from provenance import generated_by  # noqa: E402

VARIANTS = ("median / packed", "median / masked", "median / numpy", "trimmed mean / packed",
            "trimmed mean / masked", "trimmed mean / numpy", "mean", "geometric median", "krum",
            "multi-krum", "centered clipping")
HEAD = re.compile(r"^### (?:(\d+) trials \(vmap\) of )?N = (\d+), d = (\d+), K = (\d+), backend "
                  r"(\S+) \((?:(.+), )?([^,]+), (\d+) devices?\), best of (\d+) after compilation$")
ROW = re.compile(r"^\| (.+?) \| ([\d.]+) \| ([\d.]+) \|$")
SETTING = ("trials", "clients", "dim", "clusters", "backend", "device_kind", "platform",
           "devices", "repeats")


def variants():
    from fedclust_jax.core import robust as R
    fns = {
        "median / packed": lambda v, a, p: R.cluster_median(v, a, p, method="packed"),
        "median / masked": lambda v, a, p: R.cluster_median(v, a, p, method="masked"),
        "median / numpy": lambda v, a, p: R.cluster_median(v, a, p, method="numpy"),
        "trimmed mean / packed": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="packed"),
        "trimmed mean / masked": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="masked"),
        "trimmed mean / numpy": lambda v, a, p: R.cluster_trimmed_mean(v, a, p, 0.1, method="numpy"),
        "mean": R.cluster_plain_mean,
        "geometric median": lambda v, a, p: R.cluster_geometric_median(v, a, p, iters=10),
        "krum": lambda v, a, p: R.cluster_krum(v, a, p, byz_frac=0.1),
        "multi-krum": lambda v, a, p: R.cluster_krum(v, a, p, byz_frac=0.1, multi=True),
        "centered clipping": lambda v, a, p: R.cluster_centered_clipping(v, a, p, tau=1.0),
    }
    assert tuple(fns) == VARIANTS
    return fns


def heading(s: dict) -> str:
    """The markdown heading of a setting (a record's ``SETTING`` fields)."""
    kind = "" if s["device_kind"] in (None, s["backend"]) else s["device_kind"] + ", "
    return ("### " + (f"{s['trials']} trials (vmap) of " if s["trials"] else "")
            + f"N = {s['clients']}, d = {s['dim']}, K = {s['clusters']}, backend {s['backend']} "
            f"({kind}{s['platform']}, {s['devices']} device), best of {s['repeats']} after "
            "compilation")


def run_line(r: dict) -> str:
    """The line under a heading that says which run made a record."""
    return (f"Run: `{r['command']}`, {r['date']}, {r['load_before']} before, jax "
            f"{r['jax_version']}, {r['cores']} core{'s' if r['cores'] != 1 else ''}.")


def table(rows) -> str:
    """rows: records (``VARIANTS`` order) -> the markdown table."""
    return "| aggregator / backend | seconds | first call (compile) |\n|---|---|---|\n" + "\n".join(
        f"| {r['variant']} | {r['seconds']:.3f} | {r['first_call_seconds']:.2f} |" for r in rows)


def read_markdown(path: str) -> list[dict]:
    """Rows of a file written by ``--out``: each a record with the heading's setting, the
    table's numbers and ``runs``, the "Run:" lines under the heading (or, where there are
    none, a line saying the file holds no command or load)."""
    rows, setting, runs = [], None, []
    for line in open(path).read().splitlines():
        m = HEAD.match(line)
        if m:
            t, n, d, k, backend, kind, plat, devs, reps = m.groups()
            setting = dict(trials=int(t or 0), clients=int(n), dim=int(d), clusters=int(k),
                           backend=backend, device_kind=kind or backend, platform=plat, devices=int(devs),
                           repeats=int(reps))
            runs = []
        elif setting and line.startswith("Run: "):
            runs.append(line)
        elif setting and ROW.match(line):
            name, sec, first = ROW.match(line).groups()
            if name not in VARIANTS:
                sys.exit(f"{path}: unknown variant {name!r} in the table under {heading(setting)}")
            rows.append(dict(setting, variant=name, seconds=float(sec),
                             first_call_seconds=float(first), runs=runs or [
                                 f"From `{path}`, written by `--out`; the file records no "
                                 "command or load."]))
    if not rows:
        sys.exit(f"{path}: no '### N = ..., best of R after compilation' heading with a table; "
                 "not a file written by this script's --out")
    return rows


def read_records(paths) -> list[dict]:
    """Rows of JSONL files (``--jsonl``) and markdown files (``--out``), in file order."""
    rows = []
    for path in paths:
        if not os.path.isfile(path):
            sys.exit(f"--combine {path}: no such file")
        if path.endswith(".jsonl"):
            for line in open(path):
                if line.strip():
                    r = json.loads(line)
                    rows.append(dict(r, runs=[run_line(r)]))
        else:
            rows += read_markdown(path)
    return rows


def combine(paths, argv, notes_file=None) -> str:
    """The result file: the command (``argv``), one table per setting (first-seen order;
    rows in ``VARIANTS`` order, a later row of a variant replacing an earlier one) headed by
    the lines of the runs behind its rows, then ``notes_file``."""
    groups = {}
    for r in read_records(paths):
        groups.setdefault(tuple(r[k] for k in SETTING), {})[r["variant"]] = r
    lines = [generated_by([__file__, *argv]).rstrip("\n"), "",
             "# Robust per-cluster aggregators: seconds per call", "",
             "Best of R calls after the first (which includes compilation), float32, "
             "assignments uniform over K clusters; rows are aggregator / sorting backend "
             "(`core.robust`'s `method`). Rows from " + ", ".join(f"`{p}`" for p in paths) + ".",
             ""]
    for key, byname in groups.items():
        rows = [byname[v] for v in VARIANTS if v in byname]
        runs = dict.fromkeys(line for r in rows for line in r["runs"])
        lines += [heading(dict(zip(SETTING, key))), "", *runs, "", table(rows), ""]
    text = "\n".join(lines)
    if notes_file:
        text += "\n" + open(notes_file).read()
    return text


def measure(args, argv) -> list[dict]:
    """Times every selected variant; returns one record per variant."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    load, date = load_averages(), datetime.datetime.now(datetime.timezone.utc)
    rng = np.random.default_rng(0)
    batch = (args.trials,) if args.trials else ()
    v = jnp.asarray(rng.normal(size=batch + (args.clients, args.dim)).astype(np.float32))
    a = jnp.asarray(rng.integers(0, args.clusters, size=batch + (args.clients,)).astype(np.int32))
    p = jnp.zeros(batch + (args.clusters, args.dim), jnp.float32)
    common = dict(
        trials=args.trials, clients=args.clients, dim=args.dim, clusters=args.clusters,
        backend=jax.default_backend(), device_kind=jax.devices()[0].device_kind,
        platform=platform.processor() or platform.machine(), devices=jax.device_count(),
        repeats=args.repeats, jax_version=jax.__version__, cores=len(os.sched_getaffinity(0)),
        load_before=load, date=date.strftime("%Y-%m-%d %H:%M UTC"),
        command="python benchmarks/robust_aggregators.py " + shlex.join(argv))
    records = []
    for name, fn in variants().items():
        if any(s in name for s in args.skip) or (args.only and not any(s in name for s in args.only)):
            continue
        f = jax.jit(jax.vmap(fn) if args.trials else fn)
        t0 = time.perf_counter()
        f(v, a, p).block_until_ready()
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            f(v, a, p).block_until_ready()
            times.append(time.perf_counter() - t0)
        aggregator, _, sort = name.partition(" / ")
        records.append(dict(common, variant=name, aggregator=aggregator, sort_method=sort or None,
                            seconds=round(min(times), 6), first_call_seconds=round(first, 4)))
        print(f"{name:24s} {min(times):8.3f} s  (first call incl. compile {first:.2f} s)", flush=True)
    return records


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=50_000)
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=0, help="vmap over this many problems (0: one)")
    ap.add_argument("--only", nargs="*", default=[], help="variants whose name has one of these")
    ap.add_argument("--skip", nargs="*", default=[], help="variants whose name has one of these")
    ap.add_argument("--out", default=None,
                    help="run: markdown file the table is appended to; --combine: the file written")
    ap.add_argument("--jsonl", default=None, help="run: JSONL file, one record appended per variant")
    ap.add_argument("--combine", nargs="+", metavar="FILE",
                    help="only write --out from JSONL records (--jsonl) and markdown (--out)")
    ap.add_argument("--notes-file", default=None, help="markdown appended to the --combine output")
    args = ap.parse_args(argv)
    if args.combine:
        if not args.out:
            ap.error("--combine writes a file: give --out FILE.md")
        if args.notes_file and not os.path.isfile(args.notes_file):
            ap.error(f"--notes-file {args.notes_file}: no such file")
        text = combine(args.combine, argv, args.notes_file)
        with open(args.out, "w") as fh:
            fh.write(text)
        print(text)
        return
    if args.notes_file:
        ap.error("--notes-file goes with --combine")
    sys.path.insert(0, ROOT)
    records = measure(args, argv)
    if not records:
        ap.error(f"no variant matches --only {args.only} --skip {args.skip}; names: {VARIANTS}")
    print(heading(records[0])[4:])
    if args.jsonl:
        with open(args.jsonl, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(f"\n{heading(records[0])}\n\n{run_line(records[0])}\n\n{table(records)}\n")


if __name__ == "__main__":
    main()
