"""Hyperparameters a sweep may trace.

A config class lists in ``TRACED`` the continuous fields its algorithm's code handles as
arrays (no Python control flow or shapes depend on them); ``LocalTraining.TRACED`` adds the
local-training ones for configs with a ``local`` field. A grid over traced values is one
compiled program: ``with_values`` puts (traced) arrays into a config whose every grid value
was first checked concretely, by building the config through ``registry.make_config``.
Structural values (K, local steps, batch size, model, dataset parameters) stay static;
a config's docstring names the continuous ones that stay static and why.
"""

from __future__ import annotations

import copy
import dataclasses

from fedclust_jax.core.train import LocalTraining

LOCAL_KEYS = tuple(f.name for f in dataclasses.fields(LocalTraining))


def _has_local(config_cls) -> bool:
    return any(f.name == "local" for f in dataclasses.fields(config_cls))


def traced_names(config_cls) -> tuple[str, ...]:
    """Flat parameter names of ``config_cls`` that may be traced (its own ``TRACED`` plus
    ``LocalTraining.TRACED`` when it has local training)."""
    local = LocalTraining.TRACED if _has_local(config_cls) else ()
    return tuple(getattr(config_cls, "TRACED", ())) + tuple(local)


def _set(obj, changes: dict):
    out = copy.copy(obj)  # no __post_init__: values were validated concretely before
    for name, value in changes.items():
        object.__setattr__(out, name, value)
    return out


def with_values(cfg, values: dict):
    """``cfg`` with the flat parameters ``values`` ({name: scalar array, possibly traced})
    replaced, without re-running validation. Every name must be in
    ``traced_names(type(cfg))``; ValueError otherwise. A field that is None in ``cfg``
    (Ditto's personal_lr, BR-IFCA's projection_radius, ...) takes the path of a number."""
    allowed = traced_names(type(cfg))
    bad = sorted(set(values) - set(allowed))
    if bad:
        raise ValueError(f"{type(cfg).__name__} cannot trace {bad}; traceable: {list(allowed)}")
    local = {k: v for k, v in values.items() if k in LOCAL_KEYS and _has_local(type(cfg))}
    own = {k: v for k, v in values.items() if k not in local}
    if local:
        own["local"] = _set(cfg.local, local)
    return _set(cfg, own)


def rebuild(alg, values: dict):
    """The algorithm ``alg`` with the traced ``values`` in its config (``alg.rebuild``)."""
    return alg.rebuild(with_values(alg.cfg, values))


def traced_params(algorithm: str) -> tuple[str, ...]:
    """``traced_names`` of the config class of registry algorithm ``algorithm`` (e.g.
    "srfca" -> ("lam", "beta", "lr", ...)); ValueError for an unknown name."""
    from fedclust_jax.algorithms.registry import ALGORITHMS
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; available: "
                         f"{', '.join(sorted(ALGORITHMS))}")
    return traced_names(ALGORITHMS[algorithm].config_cls)
