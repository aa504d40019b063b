"""Paper tables as study files: run one through the runner, write it beside the paper's numbers.

    python -m fedclust_jax.reproduce srfca-table5 [--quick] [--out DIR] [--data-dir DIR]
        [--seeds 0 1 2]
    python -m fedclust_jax.reproduce --list

(the same as ``fedclust-jax reproduce``: one host device per core, and Ctrl-C or SIGTERM
saves the run in flight to --checkpoint and says how to resume).

A table ``<paper>-<name>`` is the file ``fedclust_jax/studies/<paper>/<name>.toml``, shipped
with the package (a wheel or ``pip install git+URL`` runs every table)::

    [table]
    title = "SR-FCA Table 5: test accuracy (%) after each phase"
    numbers = "table5.paper.toml"    # the paper's numbers, beside this file
    metric = "assigned_test_acc"     # a column of the runner's rows (final metrics), or
                                     # "restarts.<key>" (runner = "study"), e.g.
                                     # "restarts.oracle_best_param_error"; a list gives
                                     # each metric its columns ("<column> / <metric>")
    scale = 100.0                    # multiplies the metric (default 1); scale, digits and
                                     # tolerance may be tables {metric: value}
    threshold = 0.6                  # optional: the cell is the fraction of seeds with
                                     # metric <= threshold (a success probability), or
                                     # {field, factor, offset}: factor x row[field] + offset
    best_over = "ifca.lr"            # optional: the minimum of the metric over this field
                                     # (e.g. a step-size sweep) before the threshold
    digits = 2                       # decimals shown
    spread = "std"                   # our "±": "std" or "se" (standard error) over seeds
    tolerance = 0.0                  # a cell agrees when |ours - paper| <= max(the paper's
                                     # spread, tolerance)
    rows = "algorithm"               # row field(s) of the runner's rows: "algorithm" (the
    columns = "part"                 # study's label), "part", "seed", a swept path, or
                                     # "round": with eval_every, each curve point is a row
                                     # (its round and the curve's metrics there)
    runner = "sweep"                 # "sweep": run_sweep (seeds vmapped); "study": every
                                     # point and seed through run_study (restart diagnostics)
    [table.labels]                   # optional display names of row / column keys
    "srfca-1" = "After 1st REFINE"
    [table.size]                     # the paper's run size; ours is read from the rows
    clients = 100
    rounds = 2
    seeds = 5

    [study]                          # as for `fedclust-jax sweep --config` ([sweep] optional;
    dataset = "srfca-rotated-mnist"  # a study without one runs every seed of --seeds)
    ...
    [parts.inverted]                 # optional: several studies, each [study] deep-merged
    dataset = "srfca-inverted-mnist" # with its part (the column "part")
    [quick]                          # deep-merged over [study] with --quick (CI size; a
    select = ["inverted"]            # "dataset" here drops the study's "data"; "select":
    [quick.parts.inverted]           # only these parts), then over each part

The paper's numbers file (TOML or JSON) maps row key -> column key -> value, a value being
a number or [mean, spread]; keys are the raw keys (the field values, several joined by
" / "), and optionally "source" and "spread" (what the paper's ± is) at the top (e.g.
``studies/srfca/table5.paper.toml``)::

    source = "<the paper, the table>"
    [numbers.<row key>]
    <column key> = [<mean>, <spread>]
    [[claims]]                       # a figure without numbers: claims on our cells
    text = "BR-IFCA beats IFCA-FedAvg"
    lower = "brifca-median"          # row key with the smaller mean ...
    higher = "ifca-fedavg"           # ... than this one, in every column (or "columns")

Outputs in DIR: ``<name>.md`` (its first line is the command; the table, ours beside the
paper's, the run size against the paper's, hardware, package commit, verdict) and
``<name>.json`` (the command, the run's metadata and the raw rows). DIR defaults to the
checkout's ``benchmarks/results/<paper>/`` (where the committed results live) for a full run
from a source checkout, and to ``results/<paper>/`` under the working folder (created on
demand) for a --quick run and for an installed package. Files there are replaced only when
they hold this table's results from a run no larger (a --quick run is smaller than a full
one; fewer seeds smaller than more), or with --overwrite; otherwise the run writes
``<name>-<n>.md`` and ``.json`` beside them (the first such pair it may write) and says so
before it starts. Verdict: "reproduced" when every cell with a paper number agrees, "partly"
when some do, "not reproduced" when none does, "not run" for a --quick run (CI size, not
compared).
``render(spec, record)`` rebuilds the markdown from the JSON alone.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
STUDIES = PACKAGE / "studies"          # <paper>/<name>.toml and the paper's numbers
PAPERS = ("ifca", "uifca", "srfca", "threshold", "brifca")
TABLE_KEYS = {"title", "numbers", "metric", "scale", "threshold", "best_over", "digits", "spread",
              "tolerance", "rows", "columns", "runner", "labels", "size", "notes"}
FILE_KEYS = {"table", "study", "parts", "quick"}


# ----------------------------------------------------------------------------- study files

def table_ids() -> list[str]:
    """Every table id, ``<paper>-<name>`` for ``fedclust_jax/studies/<paper>/<name>.toml``."""
    return sorted(f"{p}-{f.stem}" for p in PAPERS for f in (STUDIES / p).glob("*.toml")
                  if not f.stem.endswith(".paper"))


def table_path(table_id: str) -> Path:
    paper, _, name = table_id.partition("-")
    path = STUDIES / paper / f"{name}.toml"
    if not table_ids():
        raise ValueError(f"no study files in {STUDIES}: this install of fedclust_jax lacks its "
                         "package data; reinstall it (pip install --force-reinstall fedclust_jax)")
    if paper not in PAPERS or not name or not path.exists():
        raise ValueError(f"unknown table {table_id!r}; available: {', '.join(table_ids())}")
    return path


def merge(base: dict, over: dict) -> dict:
    """``base`` with ``over`` deep-merged into it (tables merge, other values replace)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _as_list(v) -> list[str]:
    return [] if v is None else [v] if isinstance(v, str) else list(v)


def load_spec(table_id: str) -> dict:
    """The study file as a dict with "id", "paper", "path" and "paper_numbers" added;
    ValueError (one line) on an unknown key or a missing numbers file."""
    path = table_path(table_id)
    spec = tomllib.loads(path.read_text())
    unknown = sorted(set(spec) - FILE_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {unknown}; allowed: {sorted(FILE_KEYS)}")
    table = spec.get("table", {})
    bad = sorted(set(table) - TABLE_KEYS)
    if bad:
        raise ValueError(f"{path}: unknown [table] key(s) {bad}; allowed: {sorted(TABLE_KEYS)}")
    for key in ("metric", "rows", "numbers"):
        if key not in table:
            raise ValueError(f"{path}: [table] needs {key!r}")
    if table.get("runner", "sweep") not in ("sweep", "study"):
        raise ValueError(f"{path}: runner must be \"sweep\" or \"study\", got {table['runner']!r}")
    if table.get("spread", "std") not in ("std", "se"):
        raise ValueError(f"{path}: spread must be \"std\" or \"se\", got {table['spread']!r}")
    numbers = path.parent / table["numbers"]
    if not numbers.exists():
        raise ValueError(f"{path}: the paper's numbers file {numbers} does not exist")
    text = numbers.read_text()
    spec["paper_numbers"] = json.loads(text) if numbers.suffix == ".json" else tomllib.loads(text)
    spec.update(id=table_id, paper=path.parent.name, name=path.stem,
                path=path.relative_to(PACKAGE.parent).as_posix())
    return spec


def _accepts(dataset: str, param: str) -> bool:
    from fedclust_jax.data.registry import DATASETS
    return param in inspect.signature(DATASETS[dataset]).parameters


def studies(spec: dict, *, quick: bool = False, seeds: list[int] | None = None,
            data_dir: str | None = None) -> dict[str, dict]:
    """part name -> the study to run ("" when the file has no parts): [study] merged with
    the part, then [quick] with --quick; ``seeds`` replaces the sweep's seed list (a study
    without a [sweep] gets one); ``data_dir`` goes to every dataset that takes one."""
    base, quick_over = spec.get("study", {}), spec.get("quick", {})
    parts = spec.get("parts") or {"": {}}
    if quick and "select" in quick_over:
        parts = {k: v for k, v in parts.items() if k in quick_over["select"]}
    out = {}
    for name, part in parts.items():
        study = merge(base, part)
        if quick:
            if "dataset" in quick_over:     # another dataset: its own parameters only
                study.pop("data", None)
            study = merge(study, {k: v for k, v in quick_over.items() if k not in ("parts", "select")})
            study = merge(study, quick_over.get("parts", {}).get(name, {}))
        sweep = dict(study.get("sweep", {}))
        if seeds is not None:
            sweep["seed"] = list(seeds)
        sweep.setdefault("seed", [study.get("seed", 0)])
        study["sweep"] = sweep
        if data_dir is not None and _accepts(study.get("dataset", "synthetic-regression"), "data_dir"):
            study.setdefault("data", {})["data_dir"] = data_dir
        out[name] = study
    return out


# ----------------------------------------------------------------------------- running

def _study_rows(study: dict, progress: bool, checkpoint: str | None = None,
                checkpoint_every=None, loggers=None) -> list[dict]:
    """run_study for every point of the study's sweep: one row per (algorithm, point, seed)
    with the swept paths, seed, rounds, the final metrics and "restarts.<key>" entries.
    checkpoint: a folder holding each point's checkpoint (``point_checkpoint``)."""
    from fedclust_jax.experiment import run_study
    from fedclust_jax.sweep import apply_point, parse_sweep
    base, paths, grid = parse_sweep(study)
    rows = []
    for i, point in enumerate(grid):
        setting = dict(zip(paths, point))
        for r in run_study(apply_point(base, setting), progress=progress,
                           checkpoint=point_checkpoint(checkpoint, i),
                           checkpoint_every=checkpoint_every, loggers=loggers):
            row = {"algorithm": r["algorithm"], "point": i, **setting,
                   "seed": r["config"]["seed"], "rounds": r["config"]["rounds"],
                   "restarts": r["config"]["restarts"], "wall_s": r["wall_s"]}
            row.update({f"data.{k}": v for k, v in r["effective"]["data"].items()})
            row.update(r["metrics"])
            row.update({f"restarts.{k}": v for k, v in r["restarts"].items()})
            rows.append(row)
    return rows


def run_table(spec: dict, *, quick: bool = False, seeds: list[int] | None = None,
              data_dir: str | None = None, progress: bool = True,
              checkpoint: str | None = None, checkpoint_every=None,
              loggers=None) -> list[dict]:
    """The rows of every part through the runner (``run_sweep`` or ``run_study``), each
    with "part" added; curves are dropped (the tables read final metrics). checkpoint: the
    table's folder (``open_checkpoint``, checked before anything runs), each part resumable
    in its own; checkpoint_every: its cadence ("60s" or "50r"); loggers: trackers
    (``tracking.loggers``), one logged run per point and algorithm, grouped by table part."""
    from fedclust_jax import tracking
    from fedclust_jax.sweep import run_sweep
    checkpoint_every = open_checkpoint(spec, quick, seeds, checkpoint, checkpoint_every)
    runner = spec["table"].get("runner", "sweep")
    rows = []
    for part, study in studies(spec, quick=quick, seeds=seeds, data_dir=data_dir).items():
        ck = part_checkpoint(checkpoint, part)
        logged = tracking.loggers(loggers, group=spec["id"] + (f"-{part}" if part else ""))
        got = (run_sweep(study, progress=progress, checkpoint=ck, checkpoint_every=checkpoint_every,
                         loggers=logged)
               if runner == "sweep" else _study_rows(study, progress, ck, checkpoint_every, logged))
        for r in got:
            rows += [{"part": part, **x} for x in curve_points(r)]
    return rows


def curve_points(row: dict) -> list[dict]:
    """A row with curves (eval_every) as one row per curve point, "round" the rounds done
    and the curve's scalar metrics at that point; without curves the row itself with
    "round" = its rounds."""
    curves = row.get("curves")
    base = {k: v for k, v in row.items() if k != "curves"}
    if not curves:
        return [{**base, "round": base.get("rounds")}]
    out = []
    for j, t in enumerate(curves["round"]):
        point = {**base, "round": t}
        point.update({k: v[j] for k, v in curves.items()
                      if k != "round" and isinstance(v, list) and not isinstance(v[j], list)})
        out.append(point)
    return out


# ----------------------------------------------------------------------------- the table

def _key(row: dict, fields: list[str]) -> str:
    return " / ".join(str(row.get(f)) for f in fields)


def per_metric(table: dict, key: str, metric: str, default):
    """``table[key]``: one value, or a table {metric: value}."""
    v = table.get(key, default)
    return v.get(metric, default) if isinstance(v, dict) else v


def _value(row: dict, table: dict, metric: str):
    v = row.get(metric)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    v = float(v)
    if "threshold" in table:
        t = table["threshold"]
        if isinstance(t, dict):          # factor x row[field] + offset
            t = t.get("factor", 1.0) * float(row[t["field"]]) + t.get("offset", 0.0)
        return float(v <= t)
    return v * per_metric(table, "scale", metric, 1.0)


def best_over(rows: list[dict], field: str | None, metrics: list[str]) -> list[dict]:
    """With ``field`` (e.g. a swept step size), one row per group of rows equal but for it:
    each metric its minimum over the group (NaN and None ignored)."""
    if not field:
        return rows
    groups: dict = {}
    for r in rows:
        key = json.dumps({k: v for k, v in r.items() if k not in metrics and k != field
                          and not k.endswith("wall_s") and k not in ("point", "program")},
                         sort_keys=True, default=str)
        groups.setdefault(key, []).append(r)
    out = []
    for group in groups.values():
        row = dict(group[0])
        for m in metrics:
            vals = [float(g[m]) for g in group if g.get(m) is not None and not math.isnan(float(g[m]))]
            row[m] = min(vals) if vals else None
        out.append(row)
    return out


def column_key(row: dict, fields: list[str], metric: str, metrics: list[str]) -> str:
    """The column of a row's value: its column fields, and the metric when there are several."""
    parts = ([_key(row, fields)] if fields else []) + ([metric] if len(metrics) > 1 else [])
    return " / ".join(parts)


def cells(spec: dict, rows: list[dict]) -> dict:
    """{(row key, column key): {"mean", "spread", "n", "paper", "paper_spread", "agrees",
    "metric"}} over the seeds of each cell (mean ± std or standard error of the metric)."""
    table = spec["table"]
    rf, cf, metrics = _as_list(table["rows"]), _as_list(table.get("columns")), _as_list(table["metric"])
    groups: dict[tuple, list] = {}
    for r in best_over(rows, table.get("best_over"), metrics):
        for m in metrics:
            groups.setdefault((_key(r, rf), column_key(r, cf, m, metrics), m), []).append(
                _value(r, table, m))
    numbers = spec["paper_numbers"].get("numbers", {})
    out = {}
    for (rk, ck, metric), vals in groups.items():
        vals = [v for v in vals if v is not None]
        n = len(vals)
        mean = sum(vals) / n if n else None
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / n) if n else None
        spread = None if n < 2 else sd / math.sqrt(n) if table.get("spread") == "se" else sd
        paper = numbers.get(rk, {}).get(ck) if ck else numbers.get(rk)
        p_mean, p_spread = (paper if isinstance(paper, list) else (paper, None)) if paper is not None else (None, None)
        agrees = None
        if p_mean is not None and mean is not None:
            tol = per_metric(table, "tolerance", metric, 0.0)
            agrees = abs(mean - p_mean) <= max(p_spread or 0.0, tol) + 1e-9
        out[(rk, ck)] = {"mean": mean, "spread": spread, "n": n, "paper": p_mean,
                         "paper_spread": p_spread, "agrees": agrees, "metric": metric}
    return out


def claims(spec: dict, cell: dict) -> list[dict]:
    """The paper's qualitative claims checked on our cells: each [[claims]] entry of the
    numbers file {text, lower, higher, columns (default: every column)} says row ``lower``
    has a smaller mean than row ``higher`` in each of those columns."""
    out = []
    for c in spec["paper_numbers"].get("claims", []):
        cols = c.get("columns") or list(dict.fromkeys(k[1] for k in cell))
        for ck in cols:
            lo, hi = cell.get((c["lower"], ck)), cell.get((c["higher"], ck))
            if lo and hi and lo["mean"] is not None and hi["mean"] is not None:
                out.append({"text": c["text"], "column": ck, "holds": lo["mean"] < hi["mean"]})
    return out


def verdict(spec: dict, cell: dict, quick: bool) -> str:
    if quick:
        return "not run (--quick: a CI-size run, not compared with the paper)"
    checked = [c["agrees"] for c in cell.values() if c["agrees"] is not None]
    checked += [c["holds"] for c in claims(spec, cell)]
    if not checked:
        return "not run (no cell has a paper number)"
    ok = sum(checked)
    word = "reproduced" if ok == len(checked) else "partly" if ok else "not reproduced"
    return f"{word} ({ok} of {len(checked)} cells within the paper's spread or claims holding)"


def run_size(rows: list[dict]) -> dict:
    """Ours, as ranges over the rows: clients (data.num_clients, data.m or data.num_clusters x
    data.clients_per_cluster), rounds, seeds."""
    def span(vals):
        vals = sorted({v for v in vals if v is not None})
        return None if not vals else vals[0] if len(vals) == 1 else f"{vals[0]}-{vals[-1]}"
    clients = [r.get("data.num_clients") or r.get("data.m")
               or (r.get("data.num_clusters") or 0) * (r.get("data.clients_per_cluster") or 0) or None
               for r in rows]
    return {"clients": span(clients), "rounds": span(r.get("rounds") for r in rows),
            "seeds": len({r.get("seed") for r in rows})}


def _fmt(mean, spread, digits) -> str:
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}" + ("" if spread is None else f" ± {spread:.{digits}f}")


def _resumed(rows: list[dict], wall_s: float) -> str:
    """What the hardware line adds when the rows' runs took longer than the command, which
    then resumed them from --checkpoint: their own seconds, each run once (a sweep
    program's ``program_wall_s`` per part and program, else a run's ``wall_s``)."""
    seen = {}
    for r in rows:
        if "program_wall_s" in r:
            seen[(r.get("part"), r.get("program"))] = r["program_wall_s"]
        elif "wall_s" in r:
            seen[(r.get("part"), r.get("point"), r.get("algorithm"), r.get("seed"))] = r["wall_s"]
    ran = sum(seen.values())
    return f" (its runs' own times sum to {ran:.0f} s: resumed from --checkpoint)" if ran > wall_s + 1 else ""


def render(spec: dict, record: dict) -> str:
    """The markdown of a results record (``record["rows"]`` the raw rows, the rest as
    ``main`` writes it): command, table, run size, hardware, commit, verdict."""
    table, rows = spec["table"], record["rows"]
    labels = table.get("labels", {})
    cell = cells(spec, rows)
    cf = _as_list(table.get("columns")) + _as_list(table["metric"])[1:]
    row_keys = list(dict.fromkeys(k[0] for k in cell))
    col_keys = list(dict.fromkeys(k[1] for k in cell))
    name = lambda k: labels.get(k, k)
    header = [" / ".join(_as_list(table["rows"]))]
    for ck in col_keys:
        head = f"{name(ck)}: " if cf else ""
        header += [f"{head}ours", f"{head}paper"]
    lines = [f"`{record['command']}`", "", f"# {table.get('title', spec['id'])}", "",
             f"Study file `{spec['path']}`; metric "
             + ", ".join(f"`{m}`" + (f" x {per_metric(table, 'scale', m, 1.0):g}"
                                     if per_metric(table, "scale", m, 1.0) != 1.0 else "")
                         for m in _as_list(table["metric"]))
             + (f", minimum over `{table['best_over']}`" if table.get("best_over") else "")
             + (f" <= {json.dumps(table['threshold'])} (fraction of seeds)" if "threshold" in table else "")
             + f", mean ± {table.get('spread', 'std')} over seeds; the paper's numbers from "
             f"{spec['paper_numbers'].get('source', table['numbers'])}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rk in row_keys:
        line = [name(rk)]
        for ck in col_keys:
            c = cell.get((rk, ck))
            if c is None:
                line += ["-", "-"]
                continue
            mark = "" if c["agrees"] is None or record["quick"] else " ✓" if c["agrees"] else " ✗"
            digits = per_metric(table, "digits", c["metric"], 3)
            line += [_fmt(c["mean"], c["spread"], digits) + mark,
                     _fmt(c["paper"], c["paper_spread"], digits)]
        lines.append("| " + " | ".join(line) + " |")
    size, paper_size, env = run_size(rows), table.get("size", {}), record["environment"]
    lines += ["", "| run size | ours | paper |", "|---|---|---|"]
    lines += [f"| {k} | {size.get(k)} | {paper_size.get(k, '-')} |" for k in ("clients", "rounds", "seeds")]
    lines += ["", f"Hardware: {env['backend']} ({env['device']} x {env['device_count']}), "
              f"jax {env['jax']}; package commit {record['commit']}; "
              f"{record['wall_s']:.0f} s" + _resumed(rows, record["wall_s"]) + "."]
    held = claims(spec, cell)
    if held:
        lines += ["", "| the paper's claim | column | holds |", "|---|---|---|"]
        lines += [f"| {c['text']} | {name(c['column'])} | {'yes' if c['holds'] else 'no'} |" for c in held]
    lines += ["", f"Verdict: {record['verdict']}."]
    if table.get("notes"):
        lines += ["", table["notes"]]
    return "\n".join(lines) + "\n"


def checkout() -> Path | None:
    """The source checkout the package runs from (its root holds pyproject.toml and
    benchmarks/results/), or None for an installed package."""
    root = PACKAGE.parent
    ok = (root / "pyproject.toml").is_file() and (root / "benchmarks" / "results").is_dir()
    return root if ok else None


def commit() -> str:
    """The package's git commit (short), "+dirty" when tracked files differ from it; for an
    installed package (no checkout) its version."""
    from fedclust_jax import __version__
    root = checkout()
    if root is None:
        return f"unknown (installed fedclust_jax {__version__})"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                "--", "fedclust_jax"], cwd=root, text=True,
                               capture_output=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command_line(args) -> str:
    parts = ["python -m fedclust_jax.reproduce", args.table]
    if args.quick:
        parts.append("--quick")
    if args.seeds is not None:
        parts += ["--seeds", *map(str, args.seeds)]
    if args.data_dir is not None:
        parts += ["--data-dir", args.data_dir]
    if args.out is not None:
        parts += ["--out", args.out]
    return " ".join(parts)


# ----------------------------------------------------------------------------- output files

def default_out(paper: str, quick: bool) -> Path:
    """--out's default: the checkout's benchmarks/results/<paper>/ for a full run from a
    source checkout (the committed results), else results/<paper>/ under the working folder."""
    root = checkout()
    if root is not None and not quick:
        return root / "benchmarks" / "results" / paper
    return Path("results") / paper


def size_of(quick: bool, seeds) -> tuple[int, int]:
    """A run's size, for comparing runs of one table: (1 for a full run, 0 for --quick),
    then the number of seeds."""
    return (0 if quick else 1, len(set(seeds)))


def held_size(md: Path, raw: Path, table_id: str):
    """What a run of ``table_id`` finds at ``md`` / ``raw``: None when neither exists; the
    size (``size_of``) of the run that wrote them when ``raw`` is that table's record and
    ``md`` (if any) was rendered from it; "foreign" for anything else."""
    if not md.exists() and not raw.exists():
        return None
    try:
        record = json.loads(raw.read_text())
        ours = (record.get("table") == table_id and {"rows", "verdict", "quick"} <= set(record)
                and (not md.exists() or md.read_text().split("\n", 1)[0] == f"`{record['command']}`"))
        return size_of(record["quick"], [r.get("seed") for r in record["rows"]]) if ours else "foreign"
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return "foreign"


def output_files(out: Path, spec: dict, size: tuple, overwrite: bool = False):
    """(md, json, why): ``<name>.md`` / ``.json`` in ``out`` when they are free, hold this
    table's results from a run no larger than ``size``, or ``overwrite``; else the first
    ``<name>-<n>`` pair that is, and why the first pair is kept (None when not)."""
    why = None
    for n in range(10_000):
        stem = spec["name"] if n == 0 else f"{spec['name']}-{n}"
        md, raw = out / f"{stem}.md", out / f"{stem}.json"
        held = held_size(md, raw, spec["id"])
        if held is None or overwrite or (held != "foreign" and held <= size):
            return md, raw, why
        if n == 0:
            why = ("were not written by reproduce for this table" if held == "foreign" else
                   f"hold the results of a larger run ({'full' if held[0] else '--quick'}, "
                   f"{held[1]} seed(s))")
    raise ValueError(f"--out {out}: no free <name>-<n>.md in 10,000 tries; choose another folder")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# ----------------------------------------------------------------------------- command line

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("table", nargs="?", help="table id, e.g. srfca-table5 (--list shows them)")
    p.add_argument("--list", action="store_true", help="list the table ids and exit")
    p.add_argument("--quick", action="store_true",
                   help="CI size: the study file's [quick] settings (not compared with the paper)")
    p.add_argument("--out", default=None,
                   help="folder for <name>.md and <name>.json (default: benchmarks/results/<paper> "
                        "for a full run from a source checkout, else results/<paper> under the "
                        "working folder, created on demand); files there are replaced only when "
                        "they hold this table from a run no larger, else <name>-<n>.md is written")
    p.add_argument("--overwrite", action="store_true",
                   help="replace <name>.md and <name>.json in --out whatever made them")
    p.add_argument("--data-dir", default=None, help="folder with the real data sets (MNIST, LEAF)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="seeds to run (default: the study file's)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    add_checkpoint_arguments(p)
    from fedclust_jax.tracking import add_log_argument
    add_log_argument(p)


def main(args) -> int:
    """Runs ``args.table``; exit 2 with one line on bad input (before compute)."""
    from fedclust_jax.results import check_output_path, distinct_outputs, environment
    if args.list:
        if not table_ids():
            print(f"error: no study files in {STUDIES}: this install of fedclust_jax lacks its "
                  "package data; reinstall it", file=sys.stderr)
            return 2
        print("\n".join(table_ids()))
        return 0
    try:
        if not args.table:
            raise ValueError("name a table, e.g. srfca-table5 (--list shows them)")
        from fedclust_jax.tracking import loggers as check_loggers
        loggers = check_loggers(getattr(args, "log", None))   # before compute, one line
        spec = load_spec(args.table)
        if args.seeds is not None and (len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0):
            raise ValueError(f"--seeds {args.seeds}: give distinct integers >= 0")
        from fedclust_jax.sweep import parse_sweep
        planned = studies(spec, quick=args.quick, seeds=args.seeds, data_dir=args.data_dir)
        for study in planned.values():
            parse_sweep(study)
        out = Path(args.out) if args.out else default_out(spec["paper"], args.quick)
        if getattr(args, "checkpoint", None):
            distinct_outputs([("--out", str(out), [str(out)]),
                              ("--checkpoint", args.checkpoint, [args.checkpoint])],
                             folders={"--checkpoint"})
        check_output_path(str(out / f"{spec['name']}.md"), "--out", example=None)
        seeds = [s for study in planned.values() for s in study["sweep"]["seed"]]
        md, raw, kept = output_files(out, spec, size_of(args.quick, seeds),
                                     getattr(args, "overwrite", False))
        if kept:
            print(f"reproduce: {out / spec['name']}.md and .json {kept}; they are kept and "
                  f"this run writes {md} and {raw.name} (--overwrite replaces them)",
                  file=sys.stderr, flush=True)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        rows = run_table(spec, quick=args.quick, seeds=args.seeds, data_dir=args.data_dir,
                         progress=not args.no_progress, loggers=loggers,
                         **checkpoint_arguments(args))
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:          # checkpoint.SaveFailed: a save failed (one line)
        print(f"error: {e}", file=sys.stderr)
        return 1
    record = {"command": command_line(args), "table": spec["id"], "quick": args.quick,
              "commit": commit(), "environment": environment(),
              "wall_s": time.perf_counter() - t0}
    record["verdict"] = verdict(spec, cells(spec, rows), args.quick)
    record["rows"] = rows
    _write_atomic(raw, json.dumps(record, indent=1, default=_jsonable) + "\n")
    record = json.loads(raw.read_text())
    _write_atomic(md, render(spec, record))
    print(md.read_text())
    print(f"reproduce: wrote {md} and {raw.name}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- resume

def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """--checkpoint DIR and --checkpoint-every (``fedclust-jax sweep``'s)."""
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="folder where the table's runs save their state and ended points; "
                        "rerunning the same command skips what ended and resumes the rest")
    p.add_argument("--checkpoint-every", default=None, metavar="60s|50r",
                   help="how often --checkpoint is saved: seconds (60s, the default) or rounds (50r)")


TABLE_KIND = "fedclust_jax table checkpoint"


def checkpoint_arguments(args) -> dict:
    """run_table's checkpoint and checkpoint_every from --checkpoint / --checkpoint-every."""
    return {"checkpoint": getattr(args, "checkpoint", None),
            "checkpoint_every": getattr(args, "checkpoint_every", None)}


def open_checkpoint(spec: dict, quick: bool, seeds, folder: str | None, every):
    """Checks or creates the table's checkpoint folder and returns its cadence
    (``progress.Cadence``, None: the default). DIR/table.json names the table and a
    fingerprint of its studies (the data folder aside), so another table, --quick or
    --seeds is refused in one line before anything runs; each part resumes in DIR/<part>
    (``part_checkpoint``). A cadence without a folder is refused."""
    import os

    from fedclust_jax import checkpoint as ckpt
    from fedclust_jax.progress import Cadence
    from fedclust_jax.sweep_store import fingerprint
    if folder is None:
        if every is not None:
            raise ValueError(f"--checkpoint-every {every} needs --checkpoint DIR")
        return None
    cadence = None if every is None else Cadence.parse(every)
    parts = studies(spec, quick=quick, seeds=seeds, data_dir=None)
    key = fingerprint([spec["id"], parts])
    manifest = os.path.join(folder, "table.json")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"--checkpoint {folder!r} is a file; give a folder")
    if os.path.exists(manifest):
        saved = ckpt.read_json(manifest, TABLE_KIND)
        if saved.get("fingerprint") != key:
            raise ValueError(f"--checkpoint {folder!r} holds the runs of {saved.get('table')} "
                             f"(quick {saved.get('quick')}, seeds {saved.get('seeds')}, or other "
                             f"settings of its study file); rerun the command that wrote it, or "
                             f"remove it or give another folder to start afresh")
    elif os.path.isdir(folder) and any(not n.startswith(".") for n in os.listdir(folder)):
        raise ValueError(f"--checkpoint {folder!r} holds files that are not a table checkpoint; "
                         f"give an empty or new folder")
    else:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--checkpoint {folder!r}: cannot create the folder "
                             f"({e.strerror or e})") from None
        ckpt.write_json(manifest, {"format": TABLE_KIND, "table": spec["id"], "quick": quick,
                                   "seeds": seeds, "fingerprint": key})
    return cadence


def part_checkpoint(folder: str | None, part: str) -> str | None:
    """A part's checkpoint folder inside the table's (``<part>``, or ``table`` when the
    file has no parts)."""
    import os
    return None if folder is None else os.path.join(folder, part or "table")


def point_checkpoint(folder: str | None, point: int) -> str | None:
    """Grid point ``point``'s checkpoint (runner "study"): ``point-<i>.npz``, several
    algorithms ``point-<i>-<label>.npz``. The folder is made on first use."""
    import os
    if folder is None:
        return None
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"point-{point + 1}.npz")


def _jsonable(v):
    import numpy as np
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


if __name__ == "__main__":
    # The command line itself (`python -m fedclust_jax reproduce ...`, this process replaced):
    # one host device per core, and Ctrl-C or SIGTERM saves the run in flight and says how
    # to resume. Nothing of this layer imports the command line's module.
    os.execv(sys.executable, [sys.executable, "-m", "fedclust_jax", "reproduce", *sys.argv[1:]])
