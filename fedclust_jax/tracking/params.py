"""What a logged run holds besides its curves: its parameters (the effective settings,
flat) and its summary (final metrics, restart diagnostics, wall time)."""

from __future__ import annotations

import json

def _scalar(v):
    """A parameter value a tracker shows: numbers, strings and bools as they are, None as
    "none", anything else as its JSON."""
    if v is None:
        return "none"
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return json.dumps(v, default=str)


def run_params(label: str, cfg, data) -> dict:
    """The effective settings of one run as flat parameters (``run``, ``compare``):
    algorithm (the label) and algorithm_name, dataset, model, rounds, seed, restarts,
    eval_every, dtype, ``data.<k>`` (every builder parameter as used), ``model_args.<k>``
    and ``params.<k>`` (every algorithm parameter as it runs on ``data``)."""
    from fedclust_jax.algorithms.registry import effective_params
    from fedclust_jax.experiment import effective_data
    out = {"algorithm": label, "algorithm_name": cfg.algorithm, "dataset": cfg.dataset,
           "model": cfg.model, "rounds": cfg.rounds, "seed": cfg.seed,
           "restarts": cfg.restarts, "eval_every": cfg.eval_every, "dtype": cfg.dtype}
    out.update({f"data.{k}": v for k, v in effective_data(cfg).items()})
    out.update({f"model_args.{k}": v for k, v in cfg.model_args.items()})
    out.update({f"params.{k}": v for k, v in effective_params(cfg.algorithm, cfg.params,
                                                              data).items()})
    return flat_params(out)


def flat_params(params: dict) -> dict:
    """{key: number, string or bool} (``_scalar``)."""
    return {str(k): _scalar(v) for k, v in params.items()}


def sweep_params(row: dict) -> dict:
    """A sweep point's parameters from its row before metrics (``sweep._row``): the swept
    paths and the effective settings; "swept" names the swept paths."""
    skip = ("curves", "program_wall_s", "program")
    out = {k: v for k, v in row.items() if k not in skip}
    out["swept"] = ",".join(row.get("swept") or [])
    return flat_params(out)


def summary_values(result: dict) -> dict:
    """What a run's summary holds, flat: ``final/<metric>`` for every final metric (the
    result's "metrics"), ``restarts/<key>`` for the restart diagnostics (lists as
    ``restarts/<key>/<r>``) and ``wall_s``."""
    out: dict = {}
    for k, v in (result.get("metrics") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"final/{k}"] = float(v)
    for k, v in (result.get("restarts") or {}).items():
        if isinstance(v, list):
            for r, x in enumerate(v):
                if isinstance(x, (int, float)):
                    out[f"restarts/{k}/{r}"] = float(x)
        elif isinstance(v, (int, float)):
            out[f"restarts/{k}"] = float(v)
    if isinstance(result.get("wall_s"), (int, float)):
        out["wall_s"] = float(result["wall_s"])
    return out
