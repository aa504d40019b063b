"""Figures from result files: per-round curves and sweep plots (`fedclust-jax plot`).

Reads two kinds of file, told apart by their shape:

- **run**: the JSON of `fedclust-jax run/compare --output` (``results.save_results``): one
  result (run) or a list with one per algorithm (compare), each holding "algorithm", "config" (its "seed"), "metrics",
  "history" ({"train_loss": [one per round]}) and, where recorded, "curves" ({"round": [...],
  "test_acc": [...], "test_loss", "misclustering", "ari", "num_clusters", "cluster_sizes"}).
- **sweep**: the rows of `fedclust-jax sweep --output rows.json|rows.csv`, one flat dict per
  (algorithm, point, seed) with "algorithm", "seed", one column per swept parameter path
  ("ifca.lr", "data.num_clients"), final-metric columns and "curves" (in CSV a JSON string).

Both become *records*, ``{"algorithm", "seed", "params": {path: value}, "final": {metric:
value}, "curves": {"round": [...], metric: [...]}}`` (``to_records``); missing or null
entries are skipped, extra keys and columns ignored. Curves are averaged over seeds (mean
and std at the rounds every seed recorded) for each algorithm and sweep point.

Diverged points are drawn, never dropped: a plotted value (a mean over seeds, so one
diverged seed makes its point diverged) is *diverged* when it is not finite or, on a loss
axis (``LOSS_METRICS``), *exploded*: above ``EXPLODED`` (1e6) times the median of the
panel's finite values. Such a point is a red x at the top of its panel, its line breaks
there, and the legend names the line and where it diverged. A loss axis is logarithmic when
the values drawn span more than two decades. The figure has one legend, in an empty panel
slot or beside the panels.

matplotlib is imported only when a figure is drawn (``pip install 'fedclust_jax[plot]'``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from collections import defaultdict

import numpy as np

# per-round curves, in panel order, with their axis labels
CURVE_METRICS = {"test_acc": "test accuracy", "test_loss": "test loss",
                 "train_loss": "training loss", "misclustering": "misclustering",
                 "ari": "ARI", "num_clusters": "non-empty clusters", "purity": "purity",
                 "objective": "objective"}
# final metrics a sweep row may hold, in the order the default is picked
FINAL_METRICS = {"test_acc": "test accuracy", "test_loss": "test loss",
                 "misclustering": "misclustering", "ari": "ARI",
                 "param_error": "parameter error", "num_clusters_found": "clusters found",
                 "purity": "purity", "assigned_test_loss": "assigned test loss",
                 "train_loss": "training loss"}
ALIASES = {"num_clusters": "num_clusters_found", "num_clusters_found": "num_clusters"}
# what the evaluation records besides CURVE_METRICS: not drawn (an algorithm's own round
# metrics, under other names, are)
EVAL_ONLY = {"assigned_test_loss", "assigned_test_acc", "num_clusters_found", "cluster_sizes"}
# sweep columns that are neither swept parameters nor metrics
RESERVED = {"algorithm", "label", "seed", "curves", "history", "point", "config", "effective",
            "environment", "restarts", "layout", "data", "metrics", "wall_s", "seconds",
            "compile_s", "time_s"}
PIP_HINT = "pip install 'fedclust_jax[plot]' (or pip install matplotlib)"
# axes that get a log scale when wide and where a value far above the rest has exploded
LOSS_METRICS = {"test_loss", "train_loss", "assigned_test_loss", "objective"}
EXPLODED = 1e6          # a loss above EXPLODED x the panel's median has exploded
LOG_DECADES = 2.0       # a loss axis spanning more decades than this is logarithmic
MARKERS = "osD^vP*Xph"
STYLES = ("-", "--", "-.", ":")


# ---------------------------------------------------------------- reading

def _cell(text: str):
    """A CSV cell as a number, None (empty) or the text."""
    if text is None or text.strip() == "" or text.strip().lower() in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_file(path: str):
    """The parsed content of a .json or .csv result file (CSV: a list of row dicts with
    numbers converted and the "curves" column decoded). ValueError with the reason when the
    file is missing, a folder, unreadable or not valid JSON / CSV."""
    if not os.path.exists(path):
        raise ValueError(f"results file {path!r} not found")
    if os.path.isdir(path):
        raise ValueError(f"results file {path!r} is a folder; give the .json or .csv file "
                         "written by --output")
    try:
        with open(path, newline="") as f:
            if path.lower().endswith(".csv"):
                rows = [{k: _cell(v) for k, v in row.items() if k is not None}
                        for row in csv.DictReader(f)]
                for row in rows:
                    if isinstance(row.get("curves"), str):
                        row["curves"] = json.loads(row["curves"])
                return rows
            return json.load(f)
    except OSError as e:
        raise ValueError(f"results file {path!r} cannot be read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, csv.Error) as e:
        kind = "CSV" if path.lower().endswith(".csv") else "JSON"
        raise ValueError(f"results file {path!r} is not valid {kind}: {e}") from None


def file_kind(content) -> str:
    """'run' (run/compare JSON), 'sweep' (sweep rows) or ValueError."""
    if isinstance(content, dict):
        content = content.get("rows", content.get("results", [content]))
    if not isinstance(content, list) or not content or not all(isinstance(r, dict) for r in content):
        raise ValueError("expected a list of results (run/compare --output) or of sweep rows, "
                         f"got {type(content).__name__}" + (" (empty)" if content == [] else ""))
    if all("algorithm" in r and ("metrics" in r or "history" in r) for r in content):
        return "run"
    if all("algorithm" in r for r in content):
        return "sweep"
    raise ValueError("the entries have no 'algorithm' key: not the output of run, compare or "
                     "sweep --output")


def _num(v) -> float:
    return float("nan") if v is None or isinstance(v, (str, bool)) else float(v)


def _scalars(vals) -> bool:
    return isinstance(vals, list) and bool(vals) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in vals)


def _clean_curves(curves, history=None) -> dict:
    """{"round": [...], metric: [...]} with None kept as NaN: every scalar curve (the
    evaluation's and an algorithm's own round metrics); from the history (rounds 1..T)
    each scalar round metric the curves do not hold, with its rounds in "<name>_round";
    "num_clusters" from "cluster_sizes"."""
    out = {}
    curves = curves if isinstance(curves, dict) else {}
    rounds = curves.get("round")
    if isinstance(rounds, list) and rounds:
        for key, vals in curves.items():
            if (key != "round" and key not in EVAL_ONLY and _scalars(vals)
                    and len(vals) == len(rounds)):
                out[key] = [_num(v) for v in vals]
        sizes = curves.get("cluster_sizes")
        if "num_clusters" not in out and isinstance(sizes, list) and len(sizes) == len(rounds):
            out["num_clusters"] = [float(sum(1 for s in row if s)) if isinstance(row, list)
                                   else float("nan") for row in sizes]
        if out:
            out["round"] = [int(r) for r in rounds]
    for key, vals in (history.items() if isinstance(history, dict) else ()):
        if key not in out and _scalars(vals):
            out[f"{key}_round"] = list(range(1, len(vals) + 1))
            out[key] = [_num(v) for v in vals]
    return out


def to_records(content) -> tuple[str, list[dict]]:
    """(kind, records) from the parsed content of one file (see the module docstring)."""
    kind = file_kind(content)
    if isinstance(content, dict):
        content = content.get("rows", content.get("results", [content]))
    records = []
    for r in content:
        if kind == "run":
            config = r.get("config") or {}
            final = {k: v for k, v in (r.get("metrics") or {}).items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)}
            records.append({"algorithm": str(r["algorithm"]), "seed": config.get("seed"),
                            "params": {}, "final": final,
                            "curves": _clean_curves(r.get("curves"), r.get("history"))})
        else:
            curves = _decoded(r.get("curves"))
            final = {k: r[k] for k in FINAL_METRICS
                     if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)}
            params = _row_params(r)
            records.append({"algorithm": str(r["algorithm"]), "seed": r.get("seed"),
                            "params": params, "final": final,
                            "curves": _clean_curves(curves, r.get("history"))})
    return kind, records


def _decoded(cell):
    """A CSV cell holding JSON (a string) decoded, None if it is not JSON; other values as
    they are (JSON rows hold them decoded already)."""
    if not isinstance(cell, str):
        return cell
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        return None


def _row_params(row: dict) -> dict:
    """A sweep row's swept parameters: the paths its "swept" column names (seed apart), or
    for rows without one, every scalar column that is not reserved or a metric."""
    swept = _decoded(row.get("swept"))
    if isinstance(swept, list):
        return {k: row.get(k) for k in swept if k != "seed"}
    return {k: v for k, v in row.items()
            if k not in RESERVED and k not in FINAL_METRICS and k not in CURVE_METRICS
            and not isinstance(v, (dict, list))}


def load_results(paths) -> tuple[str, list[dict]]:
    """(kind, records) from one path or several (all of one kind; their records pooled, so
    run files of several seeds average together)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    kinds, records = set(), []
    for path in paths:
        try:
            kind, recs = to_records(read_file(os.fspath(path)))
        except ValueError as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith("results file") else
                             f"results file {os.fspath(path)!r}: {msg}") from None
        kinds.add(kind)
        records += recs
    if len(kinds) > 1:
        raise ValueError("give either run/compare results or sweep rows, not both in one figure")
    return kinds.pop(), records


def _records(results) -> list[dict]:
    """Records from a path, a list of paths, run results, sweep rows or records."""
    if isinstance(results, (str, os.PathLike)):
        return load_results(results)[1]
    if isinstance(results, list) and results and isinstance(results[0], (str, os.PathLike)):
        return load_results(results)[1]
    if isinstance(results, list) and results and all(
            isinstance(r, dict) and {"params", "final", "curves"} <= set(r) for r in results):
        return results
    return to_records(results)[1]


def swept_params(records: list[dict]) -> list[str]:
    """Parameter columns that take more than one value across the records (first-seen
    order)."""
    seen: dict[str, set] = {}
    for r in records:
        for k, v in r["params"].items():
            if v is not None:
                seen.setdefault(k, set()).add(v if not isinstance(v, float) else round(v, 12))
    return [k for k, vals in seen.items() if len(vals) > 1]


def curve_metrics(records: list[dict]) -> list[str]:
    """Curve metrics present (not all NaN) in any record: ``CURVE_METRICS`` in panel order,
    then an algorithm's own round metrics by name."""
    held = {m for r in records for m, v in r["curves"].items()
            if m != "round" and not (m.endswith("_round") and m[:-6] in r["curves"])
            and not np.all(np.isnan(v))}
    return [m for m in CURVE_METRICS if m in held] + sorted(held - set(CURVE_METRICS))


def curve_label(metric: str) -> str:
    """A panel's axis label: ``CURVE_METRICS``'s, else the metric's own name."""
    return CURVE_METRICS.get(metric, metric.replace("_", " "))


def final_metrics(records: list[dict]) -> list[str]:
    """Final metrics any record holds (a diverged inf or NaN counts), in FINAL_METRICS
    order."""
    return [m for m in FINAL_METRICS if any(_final(r, m) is not None for r in records)]


# ---------------------------------------------------------------- statistics

def _point_label(params: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={_fmt(params.get(k))}" for k in keys if params.get(k) is not None)


def _group_label(key: tuple, by: list[str]) -> str:
    """'ifca (ifca.lr=0.1)' for the group key (algorithm, *values of by)."""
    point = _point_label(dict(zip(by, key[1:])), by)
    return key[0] + (f" ({point})" if point else "")


def _colors(records: list[dict], by: list[str]) -> dict:
    """label -> matplotlib colour, fixed by the groups' first appearance in all records, so
    a group keeps its colour in every panel."""
    keys = dict.fromkeys((r["algorithm"],) + tuple(r["params"].get(k) for k in by) for r in records)
    return {_group_label(k, by): f"C{i % 10}" for i, k in enumerate(keys)}


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _sort_key(v):
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def mean_curves(records: list[dict], metric: str, by: list[str] | None = None):
    """[(label, rounds [T], mean [T], std [T], seeds)] per algorithm and value of the ``by``
    parameters (default: every swept one), over the records' seeds at the rounds they all
    recorded; a round where a seed's value is not finite has a non-finite mean (drawn as
    diverged)."""
    by = swept_params(records) if by is None else by
    groups = defaultdict(list)
    for r in records:
        if metric in r["curves"]:
            key = (r["algorithm"],) + tuple(r["params"].get(k) for k in by)
            groups[key].append(r)
    out = []
    for key, recs in groups.items():
        rkey = f"{metric}_round" if f"{metric}_round" in recs[0]["curves"] else "round"
        common = set(recs[0]["curves"].get(rkey, []))
        for r in recs[1:]:
            common &= set(r["curves"].get(rkey, []))
        rounds = np.array(sorted(common))
        if not len(rounds):
            continue
        vals = np.array([[dict(zip(r["curves"][rkey], r["curves"][metric]))[t] for t in rounds]
                         for r in recs])
        with warnings.catch_warnings():  # one diverged seed (inf, NaN) makes the mean so
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, std = vals.mean(0), vals.std(0)
        label = _group_label(key, by)
        out.append((label, rounds, mean, std, len(recs)))
    return out


def mean_finals(records: list[dict], param: str, metric: str, by: list[str] | None = None):
    """[(label, x values [P], mean [P], std [P], seeds per x [P])]: the final ``metric``
    against ``param`` per algorithm (and value of the other swept parameters ``by``), mean
    and std over seeds (one diverged seed makes the mean non-finite); records without a
    value for ``param`` or ``metric`` are left out (``mean_unswept`` gives the algorithms
    that lack ``param``)."""
    by = [k for k in swept_params(records) if k != param] if by is None else by
    groups = defaultdict(lambda: defaultdict(list))
    for r in records:
        x, y = r["params"].get(param), _final(r, metric)
        if x is None or y is None:
            continue
        groups[(r["algorithm"],) + tuple(r["params"].get(k) for k in by)][x].append(y)
    out = []
    for key, per_x in groups.items():
        xs = sorted(per_x, key=_sort_key)
        ys = [np.array(per_x[x]) for x in xs]
        label = _group_label(key, by)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out.append((label, xs, np.array([y.mean() for y in ys]),
                        np.array([y.std() for y in ys]), [len(y) for y in ys]))
    return out


def _final(record: dict, metric: str) -> float | None:
    """A record's final ``metric``: None when absent (or null), inf / NaN kept (diverged)."""
    v = record["final"].get(metric)
    if v is None or isinstance(v, (str, bool)):
        return None
    return float(v)


def mean_unswept(records: list[dict], param: str, metric: str):
    """[(label, mean, std, seeds)]: the final ``metric`` of each algorithm that has no
    value for ``param`` (e.g. FedAvg in a sweep of "ifca.lr"), over all its records."""
    groups = defaultdict(list)
    for r in records:
        y = _final(r, metric)
        if r["params"].get(param) is None and y is not None:
            groups[r["algorithm"]].append(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [(alg, float(np.mean(ys)), float(np.std(ys)), len(ys)) for alg, ys in groups.items()]


# ---------------------------------------------------------------- drawing

def pyplot():
    """matplotlib.pyplot, on the Agg backend (no display needed) unless pyplot was already
    imported (a notebook); ImportError with the pip command when matplotlib is missing."""
    import sys
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"plotting needs matplotlib: {PIP_HINT}") from None
    if "matplotlib.pyplot" not in sys.modules:  # a notebook's own backend is kept
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _axes(ax):
    if ax is not None:
        return ax
    return pyplot().subplots(figsize=(4.6, 3.4))[1]


def plot_band(ax, x, mean, spread=None, label=None, **kw):
    """A line through (x, mean) with a shaded band mean +- spread (none where spread is
    None or all zero). Returns the line."""
    line, = ax.plot(x, mean, label=label, **kw)
    if spread is not None and np.any(np.asarray(spread) > 0):
        mean, spread = np.asarray(mean, float), np.asarray(spread, float)
        ax.fill_between(x, mean - spread, mean + spread, color=line.get_color(), alpha=0.2,
                        linewidth=0)
    return line


def log_x_if_wide(ax, values, decades: float = 2.0) -> bool:
    """Log x-axis when the positive numeric ``values`` span >= ``decades`` decades."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(nums) == len(values) and nums and min(nums) > 0 and max(nums) / min(nums) >= 10 ** decades:
        ax.set_xscale("log")
        return True
    return False


def diverged(values, reference, metric: str) -> np.ndarray:
    """bool mask of ``values`` that diverged: not finite, or on a loss axis
    (``LOSS_METRICS``) above ``EXPLODED`` times the median of the finite |``reference``|
    (the values of the whole panel)."""
    values = np.asarray(values, float)
    bad = ~np.isfinite(values)
    ref = np.abs(np.asarray(reference, float))
    ref = ref[np.isfinite(ref)]
    if metric in LOSS_METRICS and ref.size and np.median(ref) > 0:
        with np.errstate(invalid="ignore"):
            bad |= np.abs(values) > EXPLODED * np.median(ref)
    return bad


def _style(i: int) -> dict:
    """Line i's marker, dash and width: lines that coincide stay visible (the wider under
    the narrower, each with its own marker)."""
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": STYLES[(i // len(MARKERS)) % len(STYLES)],
            "linewidth": max(3.2 - 0.5 * i, 1.0), "markersize": max(6.5 - 0.6 * i, 3.5),
            "zorder": 2 + 0.01 * i}


def _color(colors: dict, label: str) -> str:
    """``label``'s colour, a new one for a label not seen yet (``colors`` is extended)."""
    if label not in colors:
        colors[label] = f"C{len(set(colors.values())) % 10}"
    return colors[label]


def _draw(ax, lines, metric: str, colors: dict, where) -> list[str]:
    """Draws [(label, x, mean, std or None, legend label)] on ``ax``: diverged points
    (``diverged`` over the whole panel) as red x at the top, the lines broken there; a
    log y-axis for a loss whose drawn values span more than ``LOG_DECADES``. ``where(x)``
    says where a line diverged (for the legend). Returns the diverged descriptions."""
    every = np.concatenate([np.asarray(m, float) for _, _, m, _, _ in lines]) if lines else np.zeros(0)
    shown, notes = [], []
    for i, (label, x, mean, std, legend) in enumerate(lines):
        x, mean = np.asarray(x, float), np.asarray(mean, float)
        bad = diverged(mean, every, metric)
        y = np.where(bad, np.nan, mean)
        spread = None if std is None else np.where(bad, np.nan, np.asarray(std, float))
        plot_band(ax, x, y, spread, label=legend, color=_color(colors, label), **_style(i))
        shown.append(y[~bad])
        if bad.any():
            note = f"diverged: {label}: {where(x[bad])}"
            ax.plot(x[bad], np.full(int(bad.sum()), 0.97), linestyle="none", marker="x",
                    color="red", markersize=9, markeredgewidth=2.2, clip_on=False, zorder=5,
                    transform=ax.get_xaxis_transform(), label=note)
            notes.append(note)
    drawn = np.concatenate(shown) if shown else np.zeros(0)
    drawn = drawn[np.isfinite(drawn)]
    if (metric in LOSS_METRICS and drawn.size and drawn.min() > 0
            and drawn.max() / drawn.min() > 10 ** LOG_DECADES):
        ax.set_yscale("log")
    return notes


def _rounds(x) -> str:
    x = [int(v) for v in x]
    return f"at round {x[0]}" if len(x) == 1 else f"at {len(x)} rounds from round {x[0]}"


def plot_curves(results, metric: str, ax=None, by: list[str] | None = None,
                colors: dict | None = None):
    """One line per algorithm (and sweep point) of the per-round ``metric`` against the
    round, mean +- std over seeds as a band; diverged points as red x at the top (module
    docstring). ``results``: a path, run results, sweep rows or records; ``colors``: label
    -> colour, shared between panels (extended here). Returns the Axes."""
    records = _records(results)
    held = curve_metrics(records)
    if metric not in held:
        raise ValueError(f"no curve {metric!r} in these results; they hold: "
                         f"{', '.join(held) or 'none'}")
    ax = _axes(ax)
    by = swept_params(records) if by is None else by
    colors = _colors(records, by) if colors is None else colors
    lines = [(label, rounds, mean, std if seeds > 1 else None,
              label + (f", {seeds} seeds" if seeds > 1 else ""))
             for label, rounds, mean, std, seeds in mean_curves(records, metric, by)]
    _draw(ax, lines, metric, colors, lambda x: f"{curve_label(metric)} {_rounds(x)}")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if metric == "num_clusters":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        counts = np.concatenate([np.asarray(m, float) for _, _, m, _, _ in lines] or [np.zeros(0)])
        counts = counts[np.isfinite(counts)]
        if counts.size and counts.min() == counts.max():   # flat: whole numbers around it
            ax.set_ylim(counts.min() - 1, counts.max() + 1)
    ax.set_xlabel("round")
    ax.set_ylabel(curve_label(metric))
    return ax


def plot_sweep(rows, param: str, metric: str, ax=None, by: list[str] | None = None,
               colors: dict | None = None):
    """The final ``metric`` against the swept ``param``: one line per algorithm (and value
    of the other swept parameters), mean +- std over seeds; an algorithm without ``param``
    (FedAvg in a sweep of "ifca.lr") as a dashed level across the panel; diverged points as
    red x at the top; log x-axis when the values span >= 2 decades, evenly spaced
    categories when they are not all numbers. Returns the Axes."""
    records = _records(rows)
    ax = _axes(ax)
    by = [k for k in swept_params(records) if k != param] if by is None else by
    colors = _colors(records, by) if colors is None else colors
    found = mean_finals(records, param, metric, by)
    allx = sorted({x for _, xs, *_ in found for x in xs}, key=_sort_key)
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in allx)
    pos = {x: (x if numeric else i) for i, x in enumerate(allx)}
    lines = [(label, [pos[x] for x in xs], mean, std if max(seeds) > 1 else None, label)
             for label, xs, mean, std, seeds in found]
    name = f"final {FINAL_METRICS.get(metric, metric)}"
    back = {v: k for k, v in pos.items()}
    _draw(ax, lines, metric, colors,
          lambda x: f"{name} at {param} = {', '.join(_fmt(back.get(v, v)) for v in x)}")
    every = np.concatenate([np.asarray(m, float) for _, _, m, _, _ in lines]) if lines else np.zeros(0)
    for alg, mean, std, seeds in mean_unswept(records, param, metric) if allx else []:
        level = f"{alg} (no {param})"
        color = colors[alg] if alg in colors else _color(colors, level)
        if diverged([mean], every, metric)[0]:
            ax.plot([0.5], [0.97], linestyle="none", marker="x", color="red", markersize=9,
                    markeredgewidth=2.2, clip_on=False, transform=ax.transAxes,
                    label=f"diverged: {level}: {name}")
        else:
            ax.axhline(mean, color=color, linestyle="--", linewidth=1.5, label=level)
    if numeric:
        log_x_if_wide(ax, allx)
    else:
        ax.set_xticks(range(len(allx)), [str(x) for x in allx])
    ax.set_xlabel(param)
    ax.set_ylabel(name)
    return ax


def _resolve_metric(metric, curves, finals):
    """(curve metric or None, final metric or None) for --metric; ValueError when the
    results hold neither."""
    if metric is None:
        return None, None
    c = metric if metric in curves else ALIASES.get(metric) if ALIASES.get(metric) in curves else None
    f = metric if metric in finals else ALIASES.get(metric) if ALIASES.get(metric) in finals else None
    if c is None and f is None:
        held = sorted(set(curves) | set(finals))
        raise ValueError(f"unknown metric {metric!r}; the results hold: {', '.join(held) or 'none'}")
    return c, f


def figure(kind: str, records: list[dict], metric: str | None = None, x: str | None = None,
           title: str | None = None):
    """The figure for records of one kind: a panel per curve metric present (or only
    ``metric``) and, for sweeps, the final metric (``metric`` or the first present of
    FINAL_METRICS) against each swept parameter (or only ``x``). ValueError for an unknown
    metric or parameter, before drawing."""
    curves = curve_metrics(records)
    finals = final_metrics(records) if kind == "sweep" else []  # run files: curves only
    c, f = _resolve_metric(metric, curves, finals)
    params = swept_params(records) if kind == "sweep" else []
    if x is not None:
        if kind != "sweep":
            raise ValueError(f"--x {x}: run/compare results have no swept parameters; "
                             "--x applies to sweep rows")
        columns = sorted({k for r in records for k in r["params"]})
        if x not in columns:
            raise ValueError(f"--x {x!r}: no such column; swept parameters: "
                             f"{', '.join(params) or 'none'}")
        params = [x]
    curve_panels = curves if metric is None else ([c] if c else [])
    final = f if metric is not None else (finals[0] if finals else None)
    sweep_panels = params if (kind == "sweep" and final) else []
    panels = [("curve", m) for m in curve_panels] + [("sweep", p) for p in sweep_panels]
    if not panels:
        raise ValueError("nothing to draw: the results hold no per-round curves"
                         + (" and no swept parameter with a final metric" if kind == "sweep" else ""))
    plt = pyplot()
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    spare = nrows * ncols > len(panels)     # an empty slot holds the legend
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(4.6 * ncols + (0 if spare else 3.2), 3.5 * nrows + 0.4))
    colors = _colors(records, swept_params(records))   # one colour per line in every panel
    handles: dict = {}
    for ax, (what, name) in zip(axes.flat, panels):
        if what == "curve":
            plot_curves(records, name, ax=ax, colors=colors)
            ax.set_title(curve_label(name))
        else:
            plot_sweep(records, name, final, ax=ax, colors=colors)
            ax.set_title(f"final {FINAL_METRICS.get(final, final)} vs {name}")
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    size = 8 if len(handles) <= 12 else 6
    if handles and spare:               # one legend for the figure: in the empty slot,
        slot = list(axes.flat)[len(panels)]
        slot.set_visible(True)
        slot.axis("off")
        slot.legend(list(handles.values()), list(handles), loc="upper left", fontsize=size,
                    frameon=False)
    elif handles:                       # or beside the panels
        fig.legend(list(handles.values()), list(handles), loc="outside right upper",
                   fontsize=size)
    if title is None:
        seeds = sorted({r["seed"] for r in records if r["seed"] is not None}, key=_sort_key)
        algs = sorted({r["algorithm"] for r in records})
        title = (f"{', '.join(algs)}; seed{'s' if len(seeds) > 1 else ''} "
                 f"{', '.join(map(str, seeds)) or '-'}"
                 + ("; lines: mean, bands: ± std over seeds" if len(seeds) > 1 else ""))
    fig.suptitle(title, fontsize=10)
    return fig


def _marked(ext: str, mark: str) -> dict:
    """savefig keywords that put ``mark`` (who made the figure) into the file's metadata:
    png, pdf, svg, ps, eps, jpg and tif; none for the other formats."""
    key = {"png": "Software", "pdf": "Creator", "svg": "Creator", "ps": "Creator",
           "eps": "Creator"}.get(ext)
    if key:
        return {"metadata": {key: mark}}
    pil = {"jpg": "comment", "jpeg": "comment", "tif": "description", "tiff": "description"}.get(ext)
    return {"pil_kwargs": {pil: mark}} if pil else {}


def plot_results(paths, out: str, metric: str | None = None, x: str | None = None,
                 title: str | None = None, dpi: int = 120, overwrite: bool = False):
    """Reads result file(s) ``paths`` (see the module docstring), draws ``figure`` and
    writes it to ``out`` (format from its extension); to ``results.output_target(out)``,
    said on stderr, when ``out`` holds a file plot did not write (it marks its files:
    ``_marked``; a .webp, say, is never its own) and not ``overwrite``. Returns the
    figure, its ``fedclust_path`` the file written."""
    from fedclust_jax import __version__
    from fedclust_jax.results import FIGURE_CREATOR, check_output_path
    kind, records = load_results(paths)
    check_output_path(out, "-o", example="figure.png")
    pyplot()
    from matplotlib.backend_bases import FigureCanvasBase
    ext = os.path.splitext(out)[1].lstrip(".").lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if ext not in supported:
        raise ValueError(f"-o {out!r}: unknown image format {ext or '(none)'!r}; use one of "
                         f"{', '.join(sorted(supported))}, e.g. fig.png")
    fig = figure(kind, records, metric=metric, x=x, title=title)
    target = check_output_path(out, "-o", kind="figure", overwrite=overwrite)
    fig.savefig(target, dpi=dpi, **_marked(ext, FIGURE_CREATOR.format(version=__version__)))
    fig.fedclust_path = target
    return fig


# ---------------------------------------------------------------- command line

def add_plot_parser(sub):
    """The `plot` subcommand on the CLI's subparsers."""
    p = sub.add_parser(
        "plot", help="draw curves and sweep plots from result files",
        description="Draw per-round curves (mean +- std over seeds, one panel per metric, plus "
                    "the cluster-count trace) from run/compare --output JSON or sweep rows "
                    "(.json or .csv), and for sweeps the final metric against each swept "
                    f"parameter. Needs matplotlib: {PIP_HINT}.")
    p.add_argument("results", nargs="+", help="result file(s): run/compare JSON (several are "
                                              "pooled, e.g. one per seed) or sweep rows")
    p.add_argument("-o", "--output", required=True, metavar="FIG",
                   help="image file, e.g. fig.png; a file plot did not write (it marks its png, "
                        "pdf, svg, ps, eps, jpg and tif files) is kept and the figure goes to "
                        "FIG-<n> beside it")
    p.add_argument("--overwrite", action="store_true", help="replace FIG whatever made it")
    p.add_argument("--metric", help="draw only this metric (e.g. test_acc, misclustering, ari, "
                                    "num_clusters, test_loss, param_error)")
    p.add_argument("--x", metavar="PARAM", help="sweeps: only this parameter on the x-axis")
    p.add_argument("--title", help="figure title")
    return p


def plot_command(args) -> int:
    """Runs `fedclust-jax plot`: 0, or 1 when the figure went beside -o (a file plot did
    not write is kept); ValueError / ImportError for bad input (the CLI turns them into exit
    code 2 and one line)."""
    fig = plot_results(args.results, args.output, metric=args.metric, x=args.x,
                       title=args.title, overwrite=args.overwrite)
    pyplot().close(fig)
    print(f"figure written to {fig.fedclust_path}")
    return 0 if fig.fedclust_path == args.output else 1
