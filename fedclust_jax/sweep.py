"""Sweeps: a grid of settings of one study run as few compiled programs.

A study's ``sweep`` table maps parameter paths to lists of values::

    [sweep]
    seed = [0, 1, 2, 3]
    "ifca.lr" = [0.01, 0.03, 0.1, 0.3]
    mode = "product"          # default; "zip" pairs the lists element by element

Paths: ``seed``, ``rounds``, ``restarts``, ``eval_every``, ``model``, ``dtype``, ``data.<parameter>``,
``model_args.<parameter>`` and ``<algorithm label>.<parameter>`` (a parameter of that
algorithm, or its ``rounds`` / ``restarts``). Every value of every point is checked
(``experiment.study_configs``) before anything is built or run.

Programs: for each algorithm, the points that differ only in seed and in parameters its
config may trace (``algorithms.hparams.traced_names``) form one group, run as ONE compiled
program vmapped over the points (restarts a vmap inside). Everything else (K, local steps,
batch size, model, dataset parameters, rounds) is static and makes a separate program.
Data come from each seed as in ``run_experiment`` (``fold_in(key(seed), 0)``); data equal
for every seed of a group are shared, otherwise each point gets its seed's data on a
leading axis; they are built when first needed and a sweep holds only some of them at a time
(``PointData``). Points are run in calls of ``c`` points, c the largest that fits memory
(``core.memory`` pre-check; the last call is padded so every call reuses the program); a
first call the device cannot hold after all (out of memory) is run again with half as many.
A call runs three compiled programs vmapped over its points (``sweep_calls``): init, chunks
of rounds (``loop.run_chunk``, the loop every run goes through, one compilation for chunks
of any length) and the end of run, with the keys of ``run_experiment``, so a point equals
the single run with its settings.

Resume (``checkpoint=DIR``, ``sweep_store``): each call saves its points' state at the
cadence, the rows of ended calls are kept in DIR, and rerunning the same sweep skips them
and resumes the call in flight; ``on_rows`` gets the rows so far after every call, so an
output file is whole after every point.

Rows (``run_sweep``): one per (algorithm, point, seed) -- points that give an algorithm the
same configuration (e.g. another algorithm's parameter varies) run once -- holding:
algorithm (label), algorithm_name, point (index in the grid), program (index of the
compiled program), swept (the swept paths that apply to the algorithm), the swept paths as columns (e.g. "ifca.lr"), the effective setting
(dataset, model, rounds, restarts, eval_every, seed, data.<k>, model_args.<k>,
params.<k>), the final metrics (``experiment.summarize``: test_loss, test_acc, ...,
misclustering, ari), curves (``experiment.curves_from_records``; None without
eval_every) and program_wall_s (seconds of the call of its program that ran it).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import checkpoint as ckpt
from fedclust_jax import tracking
from fedclust_jax.algorithms import hparams
from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params, effective_params
from fedclust_jax.core.memory import OutOfMemoryAtStart, out_of_memory_line
from fedclust_jax.experiment import (ExperimentConfig, build_run_algorithm, check_fits_data,
                                     check_labelled, effective_data, load_study_data,
                                     resolve_layout, stored_data, study_configs, summarize)
from fedclust_jax.loop import curve_rounds, curves_from_records, eval_spec
from fedclust_jax.sweep_store import as_json, fingerprint

MODES = ("product", "zip")
# the study-level paths: the ExperimentConfig fields declared swept beside their defaults
GLOBAL_PATHS = tuple(f.name for f in dataclasses.fields(ExperimentConfig)
                     if f.metadata.get("swept"))
PATH_HELP = (", ".join(GLOBAL_PATHS) + ", data.<parameter>, model_args.<parameter> or "
             "<algorithm label>.<parameter>")       # the path forms, for messages


def _show(value) -> str:
    return json.dumps(value) if isinstance(value, (int, float, str, bool, list)) else repr(value)


def parse_sweep(study: dict) -> tuple[dict, list[str], list[tuple]]:
    """(the study without its sweep table, the swept paths, the grid: one tuple of values
    per point, in order -- product: the last path varies fastest; zip: element i of every
    list). ValueError (one line naming the path and value) on a bad entry; every value is
    checked against the study (``study_configs``) alone and in its points."""
    if not isinstance(study, dict):
        raise ValueError(f"a study must be a table, got {type(study).__name__}")
    if "sweep" not in study:
        raise ValueError("the study has no [sweep] table; add one, e.g. [sweep] seed = [0, 1] "
                         "\"ifca.lr\" = [0.01, 0.1]")
    base = {k: copy.deepcopy(v) for k, v in study.items() if k != "sweep"}
    table = study["sweep"]
    if not isinstance(table, dict) or not table:
        raise ValueError(f"sweep must be a table {{path: [values]}} with at least one path, got {table!r}")
    table = dict(table)
    mode = table.pop("mode", "product")
    if mode not in MODES:
        raise ValueError(f"sweep mode {mode!r}: use one of {', '.join(MODES)}")
    if not table:
        raise ValueError("sweep has no paths; add e.g. seed = [0, 1]")
    study_configs(base)                       # the study itself is valid
    labels = list(base["algorithms"])
    for path, values in table.items():
        _check_path(path, labels, base)
        if not isinstance(values, list) or not values:
            raise ValueError(f"sweep {path!r} = {_show(values)}: give a non-empty list of values, "
                             f"e.g. {path!r} = [{_show(values) if not isinstance(values, list) else '...'}]")
        for v in values:
            if isinstance(v, dict):
                raise ValueError(f"sweep {path!r} = {_show(v)}: values must be numbers, strings or lists")
            try:
                study_configs(apply_point(base, {path: v}))
            except ValueError as e:
                raise ValueError(f"sweep {path!r} = {_show(v)}: {e}") from None
    paths = list(table)
    if mode == "zip":
        lengths = {p: len(v) for p, v in table.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError("sweep mode \"zip\" needs lists of equal length, got "
                             + ", ".join(f"{p!r}: {n}" for p, n in lengths.items()))
        grid = list(zip(*table.values()))
    else:
        grid = list(itertools.product(*table.values()))
    first = {}
    for i, point in enumerate(grid):
        j = first.setdefault(json.dumps(point, default=str), i)
        if j != i:
            where = ", ".join(f"{p} = {_show(v)}" for p, v in zip(paths, point))
            raise ValueError(f"sweep point {i + 1} ({where}) repeats point {j + 1}; remove the "
                             f"repeated value, each point runs once")
        try:
            study_configs(apply_point(base, dict(zip(paths, point))))
        except ValueError as e:
            where = ", ".join(f"{p} = {_show(v)}" for p, v in zip(paths, point))
            raise ValueError(f"sweep point ({where}): {e}") from None
    return base, paths, grid


def _check_path(path, labels: list[str], base: dict):
    if not isinstance(path, str):
        raise ValueError(f"sweep path {path!r}: use {PATH_HELP}")
    if path in GLOBAL_PATHS:
        return
    head, _, tail = path.partition(".")
    if not tail:
        raise ValueError(f"sweep: unknown path {path!r}; use {PATH_HELP} (labels: {', '.join(labels)})")
    if head in ("data", "model_args"):
        return                                # the parameter is checked with its values
    if head not in labels:
        raise ValueError(f"sweep: unknown path {path!r}: no algorithm labelled {head!r} in the "
                         f"study (labels: {', '.join(labels)}); use {PATH_HELP}")
    params = base["algorithms"][head] or {}
    name = params.get("algorithm", head)
    if tail not in ("rounds", "restarts") and tail not in accepted_params(name):
        raise ValueError(f"sweep: unknown path {path!r}: algorithm {name!r} has no parameter "
                         f"{tail!r}; it takes {', '.join(accepted_params(name))}")


def apply_point(base: dict, point: dict) -> dict:
    """The study ``base`` with the values of one grid point set (``rounds`` / ``restarts``
    set every algorithm's, overriding their own)."""
    study = copy.deepcopy(base)
    study["algorithms"] = {k: dict(v or {}) for k, v in study["algorithms"].items()}
    for path, value in point.items():
        if path in GLOBAL_PATHS:
            study[path] = value
            if path in ("rounds", "restarts"):
                for params in study["algorithms"].values():
                    params.pop(path, None)
            continue
        head, _, tail = path.partition(".")
        if head in ("data", "model_args"):
            study[head] = dict(study.get(head) or {})
            study[head][tail] = value
        else:
            study["algorithms"][head][tail] = value
    return study


def _applies(path: str, label: str) -> bool:
    head = path.partition(".")[0]
    return path in GLOBAL_PATHS or head in ("data", "model_args") or head == label


def _number(value) -> bool:
    """A value a traced parameter can take as an array (not None, a bool or a string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _data_key(cfg) -> str:
    return json.dumps([cfg.dataset, cfg.data, cfg.seed, cfg.dtype], sort_keys=True, default=str)


def _shape_key(data) -> str:
    return str(jax.tree.map(lambda a: (tuple(a.shape), str(a.dtype)), data))


DATA_HELD_FRACTION = 0.25   # of the device's free memory: the points' data a sweep keeps built


class PointData:
    """Each point's data by ``_data_key``, built on first use (``load_study_data``) and
    held while the held data stay within ``limit`` bytes (default: ``DATA_HELD_FRACTION`` of
    the device's free memory, ``core.memory.available_bytes``; 2 GiB where unknown); the
    least recently used are let go first, the newest always kept, and one let go is built
    again when asked for. So a sweep of thousands of points, each with data of its own,
    never holds them all, and a small sweep builds each once. ``shapes[key]``: its shapes,
    kept for every key built."""

    def __init__(self, limit: int | None = None):
        if limit is None:
            from fedclust_jax.core.memory import available_bytes
            free = available_bytes()
            limit = int(DATA_HELD_FRACTION * free) if free else 2 * 2 ** 30
        self.limit, self.held, self.shapes = limit, {}, {}

    def get(self, cfg):
        key = _data_key(cfg)
        if key in self.held:
            self.held[key] = self.held.pop(key)           # the most recent last
            return self.held[key]
        data = stored_data(cfg, load_study_data(cfg))
        self.shapes[key] = _shape_key(data)
        self.held[key] = data
        size = lambda d: sum(getattr(a, "nbytes", 0) for a in jax.tree.leaves(d))
        while len(self.held) > 1 and sum(map(size, self.held.values())) > self.limit:
            self.held.pop(next(iter(self.held)))
        return data


def _same(datas, cfgs) -> bool:
    """Whether every config of ``cfgs`` has the data of the first (equal keys, else equal
    arrays; built one at a time, stopping at the first that differs)."""
    keys = list(dict.fromkeys(_data_key(cfg) for cfg in cfgs))
    if len(keys) == 1:
        return True
    first = jax.tree.leaves(datas.get(cfgs[0]))
    for cfg in {_data_key(c): c for c in cfgs}.values():
        leaves = jax.tree.leaves(datas.get(cfg))
        if not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(first, leaves)):
            return False
    return True


def plan(study: dict) -> tuple[list[str], list[dict], PointData]:
    """(swept paths, groups, the points' data): checks the sweep (``parse_sweep``), builds
    each seed's data (``PointData``) and groups the points into programs. A group: label,
    cfg (its first point's config), traced (names vmapped), items [(point index, label,
    cfg)]."""
    base, paths, grid = parse_sweep(study)
    datas, groups, seen = PointData(), {}, set()
    for i, point in enumerate(grid):
        values = dict(zip(paths, point))
        for label, cfg in study_configs(apply_point(base, values)):
            key = (label, json.dumps(cfg.to_dict(), sort_keys=True, default=str))
            if key in seen:                   # the same run for this algorithm: once
                continue
            seen.add(key)
            data = datas.get(cfg)
            where = ", ".join(f"{p} = {_show(v)}" for p, v in values.items())
            try:
                check_fits_data(label, cfg, data)
            except ValueError as e:
                raise ValueError(f"sweep point ({where}): {e}") from None
            cls = ALGORITHMS[cfg.algorithm].config_cls
            traced = tuple(sorted(p for p in hparams.traced_names(cls)
                                  if f"{label}.{p}" in paths and _number(cfg.params.get(p))))
            static = cfg.to_dict()
            static.pop("seed")
            static["params"] = {k: v for k, v in static["params"].items() if k not in traced}
            gkey = json.dumps([label, static, traced, datas.shapes[_data_key(cfg)]],
                              sort_keys=True, default=str)
            if gkey not in groups:            # the settings that need the data, before compute
                try:                          # and the contract, before any group trains
                    check_labelled(label, cfg, data)
                except ValueError as e:
                    raise type(e)(f"sweep point ({where}): {e}") from None
                groups[gkey] = {"label": label, "cfg": cfg, "traced": traced, "items": []}
            groups[gkey]["items"].append((i, label, cfg))
    return paths, list(groups.values()), datas


def _fit_points(alg, data, layout, restarts: int, n: int, shared: bool, limit) -> int:
    """The most points (<= n) one call can hold in memory (``core.memory``)."""
    from fedclust_jax.core import memory
    available = memory.available_bytes() if limit is None else limit
    if available is None:
        return n
    data_bytes = 0 if shared else memory.tree_bytes(data)
    c = n
    while True:
        try:
            need = memory.estimate(alg, data, restarts=restarts * c, chunk=layout["chunk"])
        except Exception:                     # shapes not traceable abstractly: no estimate
            return n
        need["data"] += c * data_bytes
        need["total"] += c * data_bytes
        if need["total"] <= available:
            return c
        if c == 1:
            memory.check_fits(need, available)
        c = max(1, c // 2)


def grid_key(study: dict) -> tuple[str, str]:
    """(fingerprint, the grid in words) of a sweep: every point's label and configuration
    (``sweep_store``), from the study alone (nothing is built)."""
    base, paths, grid = parse_sweep(study)
    items = [[i, label, cfg.rounds, ckpt.comparable(cfg.to_dict())]
             for i, point in enumerate(grid)
             for label, cfg in study_configs(apply_point(base, dict(zip(paths, point))))]
    table = study["sweep"]
    grid_text = " x ".join(f"{p} = {_show(table[p])}" for p in paths)
    if table.get("mode", "product") == "zip":
        grid_text = "zip of " + grid_text.replace(" x ", ", ")
    return fingerprint([paths, items]), f"{len(grid)} point(s): {grid_text}"


def _calls(n: int, c: int) -> list[list[int]]:
    """Item indices of each call of c points (the last padded with its last item, so every
    call has the program's shapes)."""
    out = []
    for start in range(0, n, c):
        idx = list(range(start, min(start + c, n)))
        out.append(idx + [idx[-1]] * (c - len(idx)))
    return out


def run_group(g: int, group: dict, datas: PointData, paths: list[str], *, memory_limit=None,
              max_points=None, stats: dict, progress: bool = True, store=None,
              cadence=None, on_call=None, programs_count: int = 1, loggers=None) -> None:
    """Runs one group's points in calls of c points; the rows of each call, in item order,
    go to ``on_call(rows)`` as it ends. With ``store`` (``sweep_store.SweepStore``) an
    ended call's rows are read back instead of run, the call in flight resumes from its
    state file, and each call saves its state at ``cadence``."""
    from fedclust_jax.sweep_calls import CAPACITY, Programs
    items, cfg0 = group["items"], group["cfg"]
    data0 = datas.get(items[0][2])
    n = len(items)
    c = store.points_per_call(g) if store is not None else None
    calls = None if c is None else _calls(n, c)
    ended = [] if calls is None else [store.ended(g, k) for k in range(len(calls))]
    if calls is not None and all(r is not None for r in ended):
        if progress:
            print(f"sweep: program {g + 1}: {group['label']}, {n} point(s) ended in "
                  f"{store.path}", file=sys.stderr, flush=True)
        for k, rows in enumerate(ended):
            store.end_kept(g, k)
            on_call(rows)
        return
    alg = build_run_algorithm(cfg0, data0)
    alg, layout = resolve_layout(alg, data0, restarts=cfg0.restarts, memory_limit=memory_limit)
    shared = _same(datas, [cfg for _, _, cfg in items])
    spec = eval_spec(alg, data0) if cfg0.eval_every else None
    # the capacity does not depend on the cadence: a rerun with another runs the same program
    programs = Programs(alg, cfg0, spec, shared, stats, max(1, min(cfg0.rounds, CAPACITY)))
    if c is not None:
        _run_calls(g, group, datas, paths, programs, c, calls, ended, data0, shared,
                   store=store, cadence=cadence, on_call=on_call, progress=progress,
                   programs_count=programs_count, loggers=loggers)
        return
    c = _fit_points(alg, data0, layout, cfg0.restarts, n, shared, memory_limit)
    if max_points is not None:
        c = min(c, max_points)
    while True:          # the estimate is a model: a first call the device cannot hold halves c
        calls = _calls(n, c)
        if store is not None:
            store.set_points_per_call(g, c)
        try:
            _run_calls(g, group, datas, paths, programs, c, calls, [None] * len(calls), data0,
                       shared, store=store, cadence=cadence, on_call=on_call,
                       progress=progress, programs_count=programs_count, loggers=loggers)
            return
        except OutOfMemoryAtStart as e:
            if c == 1:
                from fedclust_jax.core.memory import ADVICE
                raise ValueError(f"sweep program {g + 1} ({group['label']}): one point does not "
                                 f"fit in the device's memory ({e}); {ADVICE}") from None
            c = max(1, c // 2)
            if progress:
                print(f"sweep: program {g + 1}: out of device memory ({e}); {c} point(s) per "
                      "call", file=sys.stderr, flush=True)


def _run_calls(g, group, datas, paths, programs, c, calls, ended, data0, shared, *, store,
               cadence, on_call, progress, programs_count, loggers=None):
    """Runs the group's calls of c points (``run_group``); raises ``core.memory.OutOfMemoryAtStart``
    when the first call run here (none ended before it) does not fit in the device."""
    from fedclust_jax.sweep_calls import CallRun, run_call
    items, cfg0, alg = group["items"], group["cfg"], programs.alg
    n = len(items)
    if progress:
        done = sum(r is not None for r in ended)
        print(f"sweep: program {g + 1}: {group['label']} ({cfg0.algorithm}), {n} point(s)"
              f"{', traced ' + ', '.join(group['traced']) if group['traced'] else ''}"
              f"{'' if c >= n else f', {c} per call'}"
              f"{f', {done} of {len(calls)} calls ended in {store.path}' if done else ''}",
              file=sys.stderr, flush=True)
    first = True
    for k, idx in enumerate(calls):
        if ended[k] is not None:
            store.end_kept(g, k)
            on_call(ended[k])
            continue
        t0 = time.perf_counter()
        hp = {name: jnp.asarray([float(items[i][2].params[name]) for i in idx], jnp.float32)
              for name in group["traced"]}
        seeds = jnp.asarray([items[i][2].seed for i in idx], jnp.uint32)
        data = data0 if shared else jax.tree.map(
            lambda *a: jnp.stack(a), *[datas.get(items[i][2]) for i in idx])
        where = (f"program {g + 1} of {programs_count} ({group['label']}, "
                 f"{_points([items[i][0] for i in dict.fromkeys(idx)])})")
        state_path = store.state_path(g, k) if store is not None else None
        status = CallRun(cfg0.rounds, where, state_path)
        tracker = None if loggers is None else loggers.call(
            [_tracked(items[i], g, paths, data0 if shared else datas.get(items[i][2]))
             for i in dict.fromkeys(idx)], state_path=state_path, eval_every=cfg0.eval_every)
        try:
            objective, evaluation, records = run_call(
                programs, hp, data, seeds, state_path=state_path,
                config=store.call_config(g, k, [items[i][0] for i in idx]) if store else {},
                cadence=cadence, label=f"sweep {where}", progress=progress, status=status,
                tracker=tracker)
        except KeyboardInterrupt:
            if tracker is not None:
                tracker.close("interrupted")
            raise CallInterrupted(status) from None
        except jax.errors.ConcretizationTypeError as e:     # Python code on a traced value
            swept = ", ".join(group["traced"]) or "none"
            raise ValueError(f"sweep {where}: {cfg0.algorithm} branches in Python on a traced "
                             f"value ({str(e).strip().splitlines()[0]}); traced here: {swept}. "
                             "Compute with them (jnp.where, jax.lax.cond) or leave them out "
                             "of the config's TRACED") from None
        except Exception as e:
            oom = out_of_memory_line(e)
            if oom is None or not first or status.saved:
                raise
            raise OutOfMemoryAtStart(oom) from None
        first = False
        wall = time.perf_counter() - t0
        rows, summaries = [], []
        for j, i in enumerate(dict.fromkeys(idx)):
            obj = np.asarray(objective[j])
            chosen = int(np.nanargmin(obj)) if np.isfinite(obj).any() else 0
            ev = jax.tree.map(lambda a: a[j, chosen], evaluation)
            point, label, cfg = items[i]
            point_data = data0 if shared else jax.tree.map(lambda a: a[j], data)
            metrics = summarize(alg, ev, point_data)
            curves = None
            if cfg.eval_every:
                done = curve_rounds(cfg.rounds, cfg.eval_every)
                own = {k: v[j, chosen] for k, v in records.items() if k.startswith("round.")}
                curves = curves_from_records({key: v[j, chosen] for key, v in records.items()
                                              if not key.startswith("round.")}, done, programs.spec)
                for key, values in own.items():     # the algorithm's round metrics
                    curves.setdefault(key[len("round."):], [float(x) for x in values])
            rows.append(_row(label, point, g, paths, cfg, point_data, metrics, curves, wall))
            summaries.append({"metrics": metrics, "wall_s": wall})
        if tracker is not None:
            tracker.finish(summaries)
        rows = as_json(rows)
        if store is not None:
            store.end(g, k, rows)
        on_call(rows)
    if progress:
        print(f"sweep: program {g + 1} done", file=sys.stderr, flush=True)


def _points(points: list[int]) -> str:
    """Grid points (0-based) in words, numbered from 1: "points 1, 3" or "points 5-12"."""
    shown = [p + 1 for p in points]
    if len(shown) > 1 and shown == list(range(shown[0], shown[-1] + 1)):
        return f"points {shown[0]}-{shown[-1]}"
    if len(shown) <= 4:
        return ("point " if len(shown) == 1 else "points ") + ", ".join(map(str, shown))
    return f"{len(shown)} points from {shown[0]} to {shown[-1]}"


class CallInterrupted(KeyboardInterrupt):
    """An interrupt inside a call (``run_group``); ``status``: its ``CallRun``."""

    def __init__(self, status):
        super().__init__(status.where)
        self.status = status


def _tracked(item, g, paths, data) -> tuple[str, dict]:
    """A point's logged run: its name (``<label>-p<point>``, numbered from 1) and its
    parameters (its row's settings and swept values, ``tracking.sweep_params``)."""
    point, label, cfg = item
    return (f"{label}-p{point + 1}",
            tracking.sweep_params(_row(label, point, g, paths, cfg, data, {}, None, None)))


def _row(label, point, g, paths, cfg, data, metrics, curves, wall) -> dict:
    eff_params = effective_params(cfg.algorithm, cfg.params, data)
    eff_data = effective_data(cfg)
    setting = {"dataset": cfg.dataset, "model": cfg.model, "rounds": cfg.rounds,
               "restarts": cfg.restarts, "eval_every": cfg.eval_every, "dtype": cfg.dtype,
               "seed": cfg.seed}
    row = {"algorithm": label, "algorithm_name": cfg.algorithm, "point": point, "program": g,
           "swept": [p for p in paths if _applies(p, label)]}
    for path in paths:
        if not _applies(path, label):
            continue
        head, _, tail = path.partition(".")
        if path in GLOBAL_PATHS:
            row[path] = setting[path]
        elif head == "data":
            row[path] = eff_data.get(tail)
        elif head == "model_args":
            row[path] = cfg.model_args.get(tail)
        else:
            row[path] = {"rounds": cfg.rounds, "restarts": cfg.restarts}.get(tail, eff_params.get(tail))
    row.update(setting)
    row.update({f"data.{k}": v for k, v in eff_data.items()})
    row.update({f"model_args.{k}": v for k, v in cfg.model_args.items()})
    row.update({f"params.{k}": v for k, v in eff_params.items()})
    row.update(metrics)
    row["curves"] = curves
    row["program_wall_s"] = wall
    return row


def run_sweep(study: dict, *, progress: bool = True, memory_limit: int | None = None,
              max_points: int | None = None, stats: dict | None = None,
              checkpoint: str | None = None, checkpoint_every=None, on_rows=None,
              loggers=None) -> list[dict]:
    """Runs the study's sweep (module docstring); returns the rows, ordered by algorithm
    (the study's order), then grid point.

    memory_limit: bytes (default: what the device has free); max_points: at most this many
    points per call of a program. stats: a dict filled with "programs" (groups run) and
    "traces" (chunk programs traced, i.e. compiled; one per group run).
    checkpoint: a folder (``sweep_store``): every call saves its points' state at the
    cadence ``checkpoint_every`` ("60s" or "50r"; default ``progress.DEFAULT_CADENCE``),
    ended calls keep their rows there, and a rerun of the same sweep skips them and resumes
    the call in flight; another sweep's folder is refused in one line before anything is
    built. on_rows: called with every row so far (ordered) after each call ends, e.g. to
    write the output as points end. An interrupt raises ``progress.RunInterrupted`` naming
    the program, the points ended and what the folder holds.
    loggers: trackers (``tracking.loggers``), checked before anything runs; one logged run
    per point and algorithm, its swept values among its parameters, grouped by sweep.
    """
    from fedclust_jax.progress import DEFAULT_CADENCE, Cadence, RunInterrupted
    from fedclust_jax.sweep_store import SweepStore
    stats = {} if stats is None else stats
    loggers = tracking.sweep_loggers(loggers, study)
    cadence = Cadence.parse(checkpoint_every) if checkpoint_every is not None else DEFAULT_CADENCE
    store = None
    if checkpoint is not None:
        store = SweepStore(checkpoint, *grid_key(study)).open()
    paths, groups, datas = plan(study)
    stats.update(programs=len(groups), traces=0)
    order = {label: i for i, label in enumerate(study["algorithms"])}
    rows = []
    total = sum(len(g["items"]) for g in groups)

    def on_call(new):
        rows.extend(new)
        rows.sort(key=lambda r: (order[r["algorithm"]], r["point"]))
        if on_rows is not None:
            on_rows(list(rows))
    for g, group in enumerate(groups):
        try:
            run_group(g, group, datas, paths, memory_limit=memory_limit, max_points=max_points,
                      stats=stats, progress=progress, store=store, cadence=cadence,
                      on_call=on_call, programs_count=len(groups), loggers=loggers)
        except CallInterrupted as e:
            s = e.status
            kept = f"{len(rows)} of {total} point(s) ended" + (f" in {checkpoint}" if store else "")
            raise RunInterrupted(f"sweep {s.where}", s.done, s.rounds, s.state_path, s.saved,
                                 finished=kept, hint="--checkpoint DIR") from None
    return rows
