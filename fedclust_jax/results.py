"""Results of a study: the table, the effective settings, the environment and the JSON file.

``check_output_path`` runs before any compute (the folder is created, the path must not be a
folder and must be writable); ``save_results`` and ``save_rows`` write atomically and, if the
path still fails, write a fallback file and return its path, so nothing computed is lost
(``write_results`` / ``write_rows``: the same without the fallback, for outputs rewritten as
results come).

Nothing a user made is replaced: a writer replaces a file only when it holds what that writer
writes (``written_kind``: run / compare results, sweep rows, a plot, a saved run state), or
with ``overwrite`` (``--overwrite``); otherwise it writes the first free
``<stem>-<n><suffix>`` beside it (``output_target``) and says so on stderr.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import sys
import tempfile
import time

TABLE_COLUMNS = (("test_acc", "acc"), ("test_loss", "loss"), ("purity", "purity"),
                 ("misclustering", "miscl"),
                 ("ari", "ARI"), ("param_error", "param err"), ("num_clusters_found", "K found"))


def format_table(results: list[dict]) -> str:
    """Plain-text table, one row per result (columns present in any result)."""
    cols = [(k, h) for k, h in TABLE_COLUMNS if any(r["metrics"].get(k) is not None for r in results)]
    header = ["algorithm"] + [h for _, h in cols] + ["time s"]
    rows = []
    for r in results:
        row = [r["algorithm"]]
        for k, _ in cols:
            v = r["metrics"].get(k)
            row.append("-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)))
        row.append(f"{r['wall_s']:.1f}")
        rows.append(row)
    return aligned(header, rows)


def aligned(header: list[str], rows: list[list[str]], first_left: bool = True) -> str:
    """Plain-text table: header, a dashed rule, then the rows; columns right-aligned, the
    first left-aligned when ``first_left``."""
    widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
    fmt = lambda row: "  ".join(c.ljust(w) if first_left and not i else c.rjust(w)
                                for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


CURVE_COLUMNS = (("test_acc", "acc"), ("test_loss", "loss"), ("misclustering", "miscl"),
                 ("ari", "ARI"), ("num_clusters_found", "K found"))
# the evaluation's curve keys; any other scalar curve is an algorithm's own round metric
EVAL_CURVES = {"round", "test_acc", "test_loss", "assigned_test_acc", "assigned_test_loss",
               "misclustering", "ari", "num_clusters_found", "cluster_sizes", "purity",
               "objective"}


def _curve_rows(n: int, max_rows: int) -> list[int]:
    """Indices of the curve points printed: all when n <= max_rows, else max_rows of
    them evenly spread, the first and the last included."""
    if n <= max_rows:
        return list(range(n))
    return sorted({round(j * (n - 1) / (max_rows - 1)) for j in range(max_rows)})


def format_curves(results: list[dict], max_rows: int = 20) -> str:
    """One plain-text block per result that holds "curves" (eval_every): a row per
    evaluated round (at most ``max_rows``, evenly spread, the last included; the JSON holds
    every point), columns test accuracy, test loss, misclustering, ARI and non-empty
    clusters where recorded, then the algorithm's own scalar round metrics by name. The curves are those of the restart chosen by the training
    objective. "" when no result has curves."""
    blocks = []
    for r in results:
        curves = r.get("curves")
        if not curves or not curves.get("round"):
            continue
        cols = [(k, h) for k, h in CURVE_COLUMNS if curves.get(k) is not None]
        cols += [(k, k) for k, v in curves.items() if k not in EVAL_CURVES
                 and isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)]
        n = len(curves["round"])
        shown = _curve_rows(n, max_rows)
        info = r.get("restarts") or {}
        restarts = len(info.get("objective", [])) or 1
        title = f"curves of {r['algorithm']}"
        if restarts > 1:
            title += f", restart {info.get('chosen', 0)} of {restarts} (lowest training objective)"
        if len(shown) < n:
            title += f"; {len(shown)} of {n} evaluated rounds shown"
        cell = lambda v: (f"{v:.4f}" if isinstance(v, float) else str(v))
        header = ["round"] + [h for _, h in cols]
        body = [[str(curves["round"][i])] + [cell(curves[k][i]) for k, _ in cols] for i in shown]
        blocks.append(title + "\n" + aligned(header, body, first_left=False))
    return "\n\n".join(blocks)


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_short(x) for x in v) + "]"
    return str(v)


def format_settings(results: list[dict]) -> str:
    """One block per result: the algorithm's effective settings (every parameter, defaults
    included), its rounds and restarts, the model and the client layout used."""
    lines = []
    for r in results:
        eff = r.get("effective", {})
        params = eff.get("params", r["config"].get("params", {}))
        name = r["config"]["algorithm"]
        label = r["algorithm"] if r["algorithm"] == name else f"{r['algorithm']} ({name})"
        head = (f"{label}: rounds={r['config']['rounds']} "
                f"restarts={r['config']['restarts']} model={eff.get('model', r['config'].get('model'))}")
        model_args = r["config"].get("model_args") or {}
        if model_args:
            head += " " + " ".join(f"{k}={_short(v)}" for k, v in model_args.items())
        layout = r.get("layout")
        if layout:
            chunk = layout.get("chunk")
            head += (f" layout={'one vmap' if chunk is None else f'chunks of {chunk}'}"
                     f" ({layout.get('requested')!s} on {layout.get('backend')})")
        lines.append(head)
        lines.append("    " + " ".join(f"{k}={_short(v)}" for k, v in params.items()))
    return "\n".join(lines)


def planned_settings(configs, data) -> list[dict]:
    """Result-shaped entries ({"algorithm", "config", "effective"}) for ``format_settings``
    before anything runs: every parameter as it will run on ``data`` (defaults and
    data-dependent values included), from (label, ExperimentConfig) pairs."""
    from fedclust_jax.algorithms.registry import effective_params
    from fedclust_jax.models.registry import DEFAULT_MODEL
    return [{"algorithm": label, "config": cfg.to_dict(),
             "effective": {"model": cfg.model or DEFAULT_MODEL[data.task],
                           "params": effective_params(cfg.algorithm, cfg.params, data)}}
            for label, cfg in configs]


def format_sweep_plan(table: dict, paths: list[str], points: int, configs) -> str:
    """What a sweep will run, printed before anything is built: the grid (``table``: the
    study's sweep table, ``paths`` its swept paths, ``points`` grid points) and each
    algorithm's settings as the study gives them (label, ExperimentConfig pairs; the swept
    values replace them point by point)."""
    mode = table.get("mode", "product")
    grid = ", ".join(f"{p} = {_short(table[p])}" for p in paths)
    cfg0 = configs[0][1]
    lines = [f"sweep: {points} point(s), {mode} of {grid}; dataset {cfg0.dataset}"
             + (" " + " ".join(f"{k}={_short(v)}" for k, v in cfg0.data.items()) if cfg0.data else "")]
    for label, cfg in configs:
        name = label if label == cfg.algorithm else f"{label} ({cfg.algorithm})"
        head = (f"{name}: rounds={cfg.rounds} restarts={cfg.restarts} "
                f"model={cfg.model or '(task default)'}"
                + (f" eval_every={cfg.eval_every}" if cfg.eval_every else ""))
        params = " ".join(f"{k}={_short(v)}" for k, v in cfg.params.items())
        lines.append(head + (f"\n    {params} (other parameters at their defaults)" if params
                             else "\n    (every parameter at its default)"))
    return "\n".join(lines)


def format_layouts(results: list[dict]) -> str:
    """One line: the client layout each algorithm ran with (chosen when it started)."""
    parts = []
    for r in results:
        layout = r.get("layout")
        if layout:
            chunk = layout.get("chunk")
            parts.append(f"{r['algorithm']} {'one vmap' if chunk is None else f'chunks of {chunk}'}"
                         f" ({layout.get('requested')!s} on {layout.get('backend')})")
    return "layout: " + ", ".join(parts) if parts else ""


def environment() -> dict:
    """Package, JAX and jaxlib versions, Python, the backend and the devices used."""
    import jax
    import jaxlib

    from fedclust_jax import __version__
    devices = jax.devices()
    return {"fedclust_jax": __version__, "jax": jax.__version__,
            "jaxlib": getattr(jaxlib, "__version__", None), "python": platform.python_version(),
            "backend": jax.default_backend(), "device": str(devices[0].device_kind),
            "device_count": len(devices), "platform": platform.platform(),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


KINDS = {"results": "run / compare results", "rows": "sweep rows", "figure": "a plot",
         "trained": "a saved run state"}
FIGURE_CREATOR = "fedclust-jax {version} plot"    # a figure's metadata (plot.py) ...
FIGURE_MARK = re.compile(rb"fedclust-jax [0-9][0-9A-Za-z.+-]* plot")  # ... found in its bytes


def result_kind(obj) -> str | None:
    """What ``obj`` is: "results" (a run result, an object with "algorithm" and "metrics",
    or a list of them: compare), "rows" (a list of sweep rows, objects with "algorithm" and
    "point"), "table" (a reproduce record), else None."""
    entries = obj if isinstance(obj, list) else [obj]
    if not entries or not all(isinstance(e, dict) for e in entries):
        return None
    if isinstance(obj, dict) and {"table", "rows", "verdict"} <= set(obj):
        return "table"
    if all("algorithm" in e and isinstance(e.get("metrics"), dict) for e in entries):
        return "results"
    if isinstance(obj, list) and all("algorithm" in e and "point" in e for e in entries):
        return "rows"
    return None


def written_kind(path: str) -> str | None:
    """What fedclust_jax wrote at ``path``: ``result_kind`` of a JSON file; "rows" for a .csv
    whose header has "algorithm" and "point"; "figure" for an image whose metadata names
    ``FIGURE_CREATOR``; "trained" for an .npz that ``trained.load_trained`` reads; None for
    a file it did not write, or none."""
    try:
        if path.endswith(".npz") and os.path.isfile(path):
            from fedclust_jax.trained import is_trained_file
            return "trained" if is_trained_file(path) else None
        if not os.path.isfile(path) or os.path.getsize(path) > 2**28:
            return None
        if path.endswith(".csv"):
            import csv
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            return "rows" if {"algorithm", "point"} <= set(header) else None
        with open(path, "rb") as f:
            data = f.read()
        if data.lstrip()[:1] in (b"{", b"["):
            return result_kind(json.loads(data))
        return "figure" if FIGURE_MARK.search(data) else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def sibling(path: str, n: int) -> str:
    """``path`` with ``-<n>`` before its suffix (``r.json`` -> ``r-1.json``)."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}-{n}{suffix}"


def output_target(path: str, kind: str | None, overwrite: bool = False) -> str:
    """Where a writer of ``kind`` (see ``KINDS``) puts what it was asked to write at
    ``path``: ``path`` when it does not exist, holds a file of that kind, or ``overwrite``;
    else the first ``sibling(path, n)`` that is free or of that kind (``path`` is kept)."""
    for n in range(10_000):
        target = path if n == 0 else sibling(path, n)
        if (not os.path.lexists(target) or (n == 0 and overwrite)
                or (kind is not None and written_kind(target) == kind)):
            return target
    raise ValueError(f"{path!r}: no free {sibling(path, 'N')!r} beside it; choose another path")


def kept_line(path: str, kind: str | None, target: str, future: bool = False) -> str:
    """The stderr line saying ``path`` is kept and the output goes (``future``: will go) to
    ``target``."""
    what = f"{KINDS.get(kind, 'results')} written by fedclust-jax"
    if future:
        return (f"fedclust-jax: {path} is not {what}: it is kept (--overwrite replaces it); "
                f"the output will go to {target}")
    return f"fedclust-jax: output written to {target}; {path} is kept (not {what})"


def check_output_path(path: str, what: str = "--output", example: str | None = "results.json",
                      kind: str | None = None, overwrite: bool | None = None) -> str:
    """Creates ``path``'s folder and checks that ``path`` can be written (not a folder);
    raises ValueError with advice otherwise (``example``: a file name to suggest inside a
    folder given by mistake; None suggests none). Leaves no file behind. With ``overwrite``
    given (True or False), the file a writer of ``kind`` will write (``output_target``) is
    checked instead, said on stderr when it is not ``path``; returns the path checked."""
    if not path:
        raise ValueError(f"{what} needs a file name")
    if os.path.isdir(path):
        hint = f", e.g. {os.path.join(path, example)!r}" if example else " inside it"
        raise ValueError(f"{what} {path!r} is a folder; give a file name{hint}")
    if overwrite is not None:
        target = output_target(path, kind, overwrite)
        if target != path:
            print(kept_line(path, kind, target, future=True), file=sys.stderr, flush=True)
            path = target
    folder = os.path.dirname(os.path.abspath(path))
    above = folder                      # the nearest part of the path that exists
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ValueError(f"{what} {path!r}: {above!r} is a file, not a folder; choose another path")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what} {path!r}: cannot create the folder {folder!r} "
                         f"({e.strerror or e}); choose another path") from None
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path!r} exists and is not writable; choose another path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".fedclust-write-test-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"{what} {path!r}: cannot write in {folder!r} ({e.strerror or e}); "
                         "choose another path") from None
    return path


def fallback_path(path: str) -> str:
    """Where results go when ``path`` cannot be written: the working folder, else the
    temporary folder."""
    name = f"fedclust-results-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
    for folder in (os.getcwd(), tempfile.gettempdir()):
        if os.access(folder, os.W_OK):
            return os.path.join(folder, name)
    return os.path.join(tempfile.gettempdir(), name)


def results_text(results) -> str:
    """The JSON text ``save_results`` writes for ``results``."""
    return json.dumps(results, indent=2, default=_jsonable)


def _write_text(text: str, path: str):
    """``text`` to ``path`` atomically: a hidden temporary file beside it, renamed over it."""
    from fedclust_jax.checkpoint import file_mode
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_json(results, path: str):
    _write_text(results_text(results), path)


def _jsonable(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def write_results(results: list[dict] | dict, path: str) -> None:
    """``results`` as JSON at ``path``, atomically; OSError when it cannot be written (no
    fallback: for the writes made as results come, the last one falls back)."""
    _write_json(results, path)


def write_rows(rows: list[dict], path: str) -> None:
    """Sweep rows at ``path`` as ``save_rows`` writes them, without its fallback."""
    _write_rows(rows, path)


def save_results(results: list[dict] | dict, path: str, overwrite: bool = False) -> str:
    """Writes ``results`` (a list of results, or one result object) as JSON to ``path``
    (atomically); to ``output_target(path)`` when ``path`` holds a file of another kind and
    not ``overwrite``. If that fails, writes them to ``fallback_path(path)`` instead. Says
    either on stderr and returns the path written."""
    return _save(_write_json, results, path, overwrite)


def _save(write, obj, path: str, overwrite: bool) -> str:
    """``write(obj, target)``, ``target`` = ``output_target`` of ``path`` for ``obj``'s
    kind, with the fallback of ``_write_or_fall_back``; a line on stderr when the result
    did not go to ``path``."""
    kind = result_kind(obj)
    target = output_target(path, kind, overwrite)
    written = _write_or_fall_back(write, obj, target)
    if target != path and written == target:
        print(kept_line(path, kind, target), file=sys.stderr)
    return written


def _write_or_fall_back(write, obj, path: str) -> str:
    """``write(obj, path)``; on OSError ``write(obj, fallback_path(path))``, said on stderr.
    Returns the path written."""
    try:
        write(obj, path)
        return path
    except OSError as e:
        other = fallback_path(path)
        write(obj, other)
        print(f"fedclust-jax: could not write {path!r} ({e.strerror or e}); results written to "
              f"{other} instead", file=sys.stderr)
        return other


ROW_METRICS = (("test_acc", "acc"), ("test_loss", "loss"), ("purity", "purity"),
               ("misclustering", "miscl"), ("ari", "ARI"), ("num_clusters_found", "K found"))


def format_rows(rows: list[dict], paths: list[str]) -> str:
    """Compact table of sweep rows: algorithm, the swept paths ("-" where a path does not
    apply to the algorithm), the seed and the main metrics present."""
    keys = [p for p in paths if p != "seed"] + ["seed"]
    cols = [(k, h) for k, h in ROW_METRICS if any(r.get(k) is not None for r in rows)]
    header = ["algorithm"] + keys + [h for _, h in cols]
    cell = lambda v: "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    body = [[r["algorithm"]] + [cell(r.get(k)) for k in keys] + [cell(r.get(k)) for k, _ in cols]
            for r in rows]
    return aligned(header, body)


def row_columns(rows: list[dict]) -> list[str]:
    """Every key of any row, in order of first appearance (the CSV header)."""
    return list(dict.fromkeys(k for r in rows for k in r))


def _csv_cell(v):
    if v is None:
        return ""
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=_jsonable)
    return v


def rows_text(rows: list[dict], path: str) -> str:
    """The text ``save_rows`` writes for ``rows`` at ``path`` (.csv or .json)."""
    import csv
    if not path.endswith(".csv"):
        return json.dumps(rows, indent=1, default=_jsonable)
    f = io.StringIO(newline="")
    cols = row_columns(rows)
    writer = csv.writer(f)
    writer.writerow(cols)
    for r in rows:
        writer.writerow([_csv_cell(r.get(c)) for c in cols])
    return f.getvalue()


def _write_rows(rows: list[dict], path: str):
    _write_text(rows_text(rows, path), path)


def distinct_outputs(outputs: list[tuple[str, str, list[str]]], folders=frozenset()) -> None:
    """Refuses (ValueError, one line) two outputs of one command on one path: ``outputs``
    holds (option, its value, the files it writes: several for several algorithms), an
    option in ``folders`` names a folder, and nothing else may lie inside it."""
    def real(path):
        return os.path.normcase(os.path.realpath(path))
    seen = {}
    for option, value, paths in outputs:
        for path in paths:
            here = real(path)
            if here in seen and seen[here][0] != option:
                other, other_value = seen[here]
                raise ValueError(f"{other} {other_value!r} and {option} {value!r} are one path "
                                 f"({path!r}); give each its own")
            seen.setdefault(here, (option, value))
    for option, value, paths in outputs:
        if option not in folders:
            continue
        inside = real(value) + os.sep
        for here, (other, other_value) in seen.items():
            if other != option and (here + os.sep).startswith(inside):
                raise ValueError(f"{other} {other_value!r} lies inside the {option} folder "
                                 f"{value!r}, which holds only what the command saves there; "
                                 f"put it outside that folder")


def check_rows_path(path: str, what: str = "--output", overwrite: bool | None = None) -> str:
    """A sweep's output must be a writable .csv or .json file (``check_output_path``)."""
    if not (path.endswith(".csv") or path.endswith(".json")):
        raise ValueError(f"{what} {path!r}: sweep results are written as .csv or .json; "
                         "name the file results.csv or results.json")
    return check_output_path(path, what, kind="rows", overwrite=overwrite)


def save_rows(rows: list[dict], path: str, overwrite: bool = False) -> str:
    """Sweep rows to ``path``: .json, a list of row objects (curves nested); .csv, one line
    per row, scalar columns, lists and the curves JSON-encoded in their cell, empty for
    none. Kept files and fallback as ``save_results`` (as JSON); returns the path written."""
    return _save(_write_rows, rows, path, overwrite)
