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
leading axis. Points are run in calls of ``c`` points, c the largest that fits memory
(``core.memory`` pre-check; the last call is padded so every call reuses the program).
Each point runs ``loop.run_program``, the loop every run goes through, with the keys of
``run_experiment``, so a point equals the single run with its settings.

Rows (``run_sweep``): one per (algorithm, point, seed) -- points that give an algorithm the
same configuration (e.g. another algorithm's parameter varies) run once -- holding:
algorithm (label), algorithm_name, point (index in the grid), program (index of the
compiled program), swept (the swept paths that apply to the algorithm), the swept paths as columns (e.g. "ifca.lr"), the effective setting
(dataset, model, rounds, restarts, eval_every, seed, data.<k>, model_args.<k>,
params.<k>), the final metrics (``experiment.summarize``: test_loss, test_acc, ...,
misclustering, ari) and curves (``experiment.curves_from_records``; None without
eval_every).
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import loop
from fedclust_jax.algorithms import hparams
from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params, effective_params
from fedclust_jax.contract import check_algorithm
from fedclust_jax.experiment import (build_run_algorithm, check_fits_data, effective_data,
                                     load_study_data, resolve_layout, stored_data,
                                     study_configs, summarize)
from fedclust_jax.loop import curve_rounds, curves_from_records, eval_spec, split_history

MODES = ("product", "zip")
GLOBAL_PATHS = ("seed", "rounds", "restarts", "eval_every", "model", "dtype")
PATH_HELP = ("seed, rounds, restarts, eval_every, model, dtype, data.<parameter>, "
             "model_args.<parameter> or <algorithm label>.<parameter>")


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
            raise ValueError(f"sweep mode \"zip\" needs lists of equal length, got "
                             + ", ".join(f"{p!r}: {n}" for p, n in lengths.items()))
        grid = list(zip(*table.values()))
    else:
        grid = list(itertools.product(*table.values()))
    for point in grid:
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


def _same(datas) -> bool:
    first = jax.tree.leaves(datas[0])
    return all(all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                   zip(first, jax.tree.leaves(d))) for d in datas[1:])


def plan(study: dict) -> tuple[list[str], list[dict], dict]:
    """(swept paths, groups, data by key): checks the sweep (``parse_sweep``), builds each
    seed's data once and groups the points into programs. A group: label, cfg (its first
    point's config), traced (names vmapped), items [(point index, label, cfg)]."""
    base, paths, grid = parse_sweep(study)
    datas, groups, seen = {}, {}, set()
    for i, point in enumerate(grid):
        values = dict(zip(paths, point))
        for label, cfg in study_configs(apply_point(base, values)):
            key = (label, json.dumps(cfg.to_dict(), sort_keys=True, default=str))
            if key in seen:                   # the same run for this algorithm: once
                continue
            seen.add(key)
            dkey = _data_key(cfg)
            if dkey not in datas:
                datas[dkey] = stored_data(cfg, load_study_data(cfg))
            where = ", ".join(f"{p} = {_show(v)}" for p, v in values.items())
            try:
                check_fits_data(label, cfg, datas[dkey])
            except ValueError as e:
                raise ValueError(f"sweep point ({where}): {e}") from None
            cls = ALGORITHMS[cfg.algorithm].config_cls
            traced = tuple(sorted(p for p in hparams.traced_names(cls)
                                  if f"{label}.{p}" in paths and _number(cfg.params.get(p))))
            static = cfg.to_dict()
            static.pop("seed")
            static["params"] = {k: v for k, v in static["params"].items() if k not in traced}
            gkey = json.dumps([label, static, traced, _shape_key(datas[dkey])], sort_keys=True,
                              default=str)
            if gkey not in groups:            # the settings that need the data, before compute
                try:
                    build_run_algorithm(cfg, datas[dkey])
                except ValueError as e:
                    raise ValueError(f"sweep point ({where}): {label}: {e}") from None
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


def _program(alg, cfg, traced: tuple, spec, shared: bool, stats: dict):
    """jit(vmap over points) of ``loop.run_program``: one point's whole run (init of every
    restart, the rounds, the end of run) from its traced values {name: [c]}, data (shared
    or [c, ...]) and seed (uint32[c]); keys as ``run_experiment``'s (``loop.run_key``)."""
    def point(hp, data, seed):
        stats["traces"] = stats.get("traces", 0) + 1    # once per compilation
        a = alg.rebuild(hparams.with_values(alg.cfg, hp)) if hp else alg
        return loop.run_program(a, data, loop.run_key(seed), rounds=cfg.rounds,
                                restarts=cfg.restarts, eval_every=cfg.eval_every, spec=spec)

    return jax.jit(jax.vmap(point, in_axes=(0, None if shared else 0, 0)))


def run_group(g: int, group: dict, datas: dict, *, memory_limit=None, max_points=None,
              stats: dict, progress: bool = True) -> list[tuple[int, object, dict, dict | None]]:
    """Runs one group's points; [(point index, cfg, metrics, curves)] in item order."""
    items, cfg0 = group["items"], group["cfg"]
    point_data = [datas[_data_key(cfg)] for _, _, cfg in items]
    data0 = point_data[0]
    alg = build_run_algorithm(cfg0, data0)
    alg, layout = resolve_layout(alg, data0, restarts=cfg0.restarts, memory_limit=memory_limit)
    check_algorithm(alg, data0)
    unique = list({_data_key(cfg): datas[_data_key(cfg)] for _, _, cfg in items}.values())
    shared = _same(unique)
    n = len(items)
    c = _fit_points(alg, data0, layout, cfg0.restarts, n, shared, memory_limit)
    if max_points is not None:
        c = min(c, max_points)
    spec = eval_spec(alg, data0) if cfg0.eval_every else None
    program = _program(alg, cfg0, group["traced"], spec, shared, stats)
    t0 = time.perf_counter()
    if progress:
        print(f"sweep: program {g + 1}: {group['label']} ({cfg0.algorithm}), {n} point(s)"
              f"{', traced ' + ', '.join(group['traced']) if group['traced'] else ''}"
              f"{'' if c >= n else f', {c} per call'}", file=sys.stderr, flush=True)
    out = []
    for start in range(0, n, c):
        idx = list(range(start, min(start + c, n)))
        idx += [idx[-1]] * (c - len(idx))     # pad: every call has the program's shapes
        hp = {name: jnp.asarray([float(items[i][2].params[name]) for i in idx], jnp.float32)
              for name in group["traced"]}
        seeds = jnp.asarray([items[i][2].seed for i in idx], jnp.uint32)
        data = data0 if shared else jax.tree.map(lambda *a: jnp.stack(a), *[point_data[i] for i in idx])
        objective, evaluation, hist = jax.device_get(program(hp, data, seeds))
        for j, i in enumerate(dict.fromkeys(idx)):
            obj = np.asarray(objective[j])
            chosen = int(np.nanargmin(obj)) if np.isfinite(obj).any() else 0
            ev = jax.tree.map(lambda a: a[j, chosen], evaluation)
            cfg = items[i][2]
            metrics = summarize(alg, ev, point_data[i])
            curves = None
            if cfg.eval_every:
                done = curve_rounds(cfg.rounds, cfg.eval_every)
                rounds_hist, records = split_history({k: v[j] for k, v in hist.items()}, done)
                curves = curves_from_records({k: v[chosen] for k, v in records.items()}, done,
                                             spec, {k: v[chosen] for k, v in rounds_hist.items()})
            out.append((items[i][0], cfg, metrics, curves))
    wall = time.perf_counter() - t0
    if progress:
        print(f"sweep: program {g + 1} done in {wall:.1f} s", file=sys.stderr, flush=True)
    group["wall_s"], group["points_per_call"] = wall, c
    return out


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
              max_points: int | None = None, stats: dict | None = None) -> list[dict]:
    """Runs the study's sweep (module docstring); returns the rows, ordered by algorithm
    (the study's order), then grid point.

    memory_limit: bytes (default: what the device has free); max_points: at most this many
    points per call of a program. stats: a dict filled with "programs" (groups run) and
    "traces" (programs traced, i.e. compiled).
    """
    stats = {} if stats is None else stats
    paths, groups, datas = plan(study)
    stats.update(programs=len(groups), traces=0)
    order = {label: i for i, label in enumerate(study["algorithms"])}
    rows = []
    for g, group in enumerate(groups):
        for point, cfg, metrics, curves in run_group(g, group, datas, memory_limit=memory_limit,
                                                     max_points=max_points, stats=stats,
                                                     progress=progress):
            rows.append(_row(group["label"], point, g, paths, cfg, datas[_data_key(cfg)],
                             metrics, curves, group["wall_s"]))
    rows.sort(key=lambda r: (order[r["algorithm"]], r["point"]))
    return rows
