"""Typed checks of every configuration value, before any data is built.

Expected types come from the config dataclasses' field annotations (algorithms), the
dataset and model builders' signatures, and ``STUDY_TYPES`` (the study's own keys).
Values typed on the command line arrive as ``CliText`` and are converted to the expected
type; values from Python or from study files (TOML / JSON) must already have it (an int
is accepted where a float is expected, an integral float where an int is). Every float
must be finite; the package's own parameters (not a user's) must also meet its rules by
name: sizes (``SIZES``) >= 1 and the ranges in ``RANGES``. A bad value raises
``ConfigError`` (a ValueError) whose one-line message names the value and what is allowed.
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import inspect
import math
import types
import typing
from typing import Any

_MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A configuration value of the wrong type or out of range (one-line message)."""


class CliText(str):
    """A value typed on the command line: converted to the type its key expects."""


# Integer parameters that count something and so must be >= 1 (others must be >= 0).
SIZES = {"num_clients", "num_clusters", "n", "n_test", "samples_per_client",
         "test_samples_per_client", "dim", "num_classes", "clients_per_cluster", "num_chunks",
         "keep_chunks", "points_per_client", "num_points", "subspace_dim", "steps",
         "batch_size", "chunk", "rounds_per_refine", "neighbors", "n_init", "kmeans_restarts",
         "num_groups", "t", "k_max", "target_clusters", "max_participants", "personal_steps",
         "restarts", "rounds_per_chunk", "devices", "embed", "hidden", "layers", "width",
         "crop", "one_shot_steps", "erm_steps", "eval_every"}

# name -> (low, low inclusive, high, high inclusive); None = unbounded.
RANGES = {
    "lr": (0, False, None, False), "erm_lr": (0, False, None, False),
    "personal_lr": (0, False, None, False),
    "participation": (0, False, 1, True), "lr_decay": (0, False, 1, True),
    "momentum": (0, True, 1, False), "weight_decay": (0, True, None, False),
    "noise_std": (0, True, None, False), "noise_var": (0, True, None, False),
    "separation": (0, False, None, False), "class_separation": (0, False, None, False),
    "test_fraction": (0, False, 1, False), "train_fraction": (0, False, 1, False),
    "heterogeneity": (0, True, 1, True), "alpha": (0, False, None, False),
    "byz_frac": (0, True, 1, False), "trim_frac": (0, True, 0.5, False),
    "beta": (0, True, 0.5, False), "lam_quantile": (0, True, 1, True),
    "radius_quantile": (0, False, 1, True), "std": (0, True, None, False),
    "coef_std": (0, True, None, False), "jitter": (0, True, None, False),
    "sigma": (0, True, 1, True), "krum_frac": (0, True, 1, False),
}

# Integers with an upper bound: name -> (largest allowed, why). The round counter of the
# compiled loop is int32, so a run of 2**31 - 1 rounds or more could not be counted; seeds
# are uint32 (a sweep stacks them); every other integer reaches an int32 (counts, shapes,
# loop lengths) and is bounded by INT32_MAX.
INT_MAX = {"rounds": (2**31 - 2, "the round counter is a 32-bit integer"),
           "seed": (2**32 - 1, "seeds are 32-bit unsigned integers")}
INT32_MAX = (2**31 - 1, "it is counted in 32-bit integers")

# How a message names a value besides its key.
WORDS = {"lr": "learning rate", "steps": "local steps", "erm_lr": "ERM learning rate",
         "personal_lr": "personal learning rate", "num_clusters": "number of clusters",
         "num_clients": "number of clients", "participation": "participation fraction"}

# The study's own keys: (annotation, default).
STUDY_TYPES = {"dataset": (str, _MISSING), "data": (dict, _MISSING),
               "model": (str | None, None), "model_args": (dict, _MISSING),
               "rounds": (int, 100), "seed": (int, 0), "restarts": (int, 1),
               "rounds_per_chunk": (int | None, None), "algorithms": (dict, _MISSING),
               "devices": (int | None, None), "eval_every": (int | None, None)}


def _kinds(annotation, default) -> tuple[list[type], bool]:
    """(accepted base types in preference order, None allowed) for an annotation."""
    if annotation is None or annotation is inspect.Parameter.empty or annotation is Any:
        if default is None:
            return [str], True  # unannotated, default None: a path or name (data_dir)
        if default is _MISSING:
            return [], True
        annotation = list if isinstance(default, (tuple, list)) else type(default)
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:  # e.g. chunk: int | Literal["auto"] | None
        return list(dict.fromkeys(type(a) for a in args)), False
    if origin in (typing.Union, types.UnionType):
        kinds, none = [], False
        for a in args:
            if a is type(None):
                none = True
            else:
                kinds += _kinds(a, _MISSING)[0]
        return kinds, none
    if origin in (list, tuple, collections.abc.Sequence) or annotation in (list, tuple):
        return [list], False
    return [annotation], False


def describe(name: str, annotation, default=_MISSING) -> str:
    """What ``name`` accepts, in words: 'a finite number > 0', 'an integer >= 1 or none'
    ("" for a user's parameter: its type alone)."""
    kinds, none = _kinds(annotation, default)
    words = []
    for k in kinds:
        if k is bool:
            words.append("true or false")
        elif k is int and name in INT_MAX:
            words.append(f"an integer >= {1 if name in SIZES else 0} and <= {INT_MAX[name][0]}")
        elif k is int and not name:          # a user's parameter: no rule by name
            words.append(f"an integer of 32 bits (at most {INT32_MAX[0]})")
        elif k is int:
            words.append(f"an integer >= {1 if name in SIZES else 0}" if name != "seed"
                         else "an integer >= 0")
        elif k is float:
            words.append("a finite number" + _range_words(name))
        elif k is str:
            words.append("a string")
        elif k is list:
            words.append("a list" + (" of integers >= 1" if name in SIZES else ""))
        elif k is dict:
            words.append("a table {key: value}")
        else:
            words.append(getattr(k, "__name__", str(k)))
    if int in kinds and float in kinds:
        words = [w for w in words if not w.startswith("an integer")]
    if none:
        words.append("none")
    return " or ".join(dict.fromkeys(words)) or "any value"


def _range_words(name: str) -> str:
    if name not in RANGES:
        return ""
    lo, lo_in, hi, hi_in = RANGES[name]
    if hi is None:
        return f" {'>=' if lo_in else '>'} {lo}"
    return f" in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"


def _in_range(name: str, v: float) -> bool:
    if name not in RANGES:
        return True
    lo, lo_in, hi, hi_in = RANGES[name]
    ok = v >= lo if lo_in else v > lo
    if hi is not None:
        ok = ok and (v <= hi if hi_in else v < hi)
    return ok


def _fail(where: str, name: str, key: str, value, annotation, default, problem: str = ""):
    """key: the name the rule tables are read with ("" for a user's parameter)."""
    shown = f"{value!r}" if not isinstance(value, CliText) else f"{str(value)!r}"
    if isinstance(value, str) and not isinstance(value, CliText):
        shown = f"the string {value!r}"
    problem = problem or "is not allowed"
    words = f"{WORDS[key]} " if key in WORDS else ""
    raise ConfigError(f"{where}{words}{name} = {shown} {problem}; {name} takes "
                      f"{describe(key, annotation, default)}")


def _from_text(text: str, kinds: list, none: bool):
    """Converts command-line text to the first kind it parses as; raises ValueError."""
    low = text.strip().lower()
    if none and low in ("none", "null"):
        return None
    if not kinds:
        return _literal(text)
    for k in kinds:
        if k is bool:
            if low in ("true", "false"):
                return low == "true"
        elif k is int:
            try:
                return int(text.strip())
            except ValueError:
                pass
        elif k is float:
            try:
                return float(text.strip())
            except ValueError:
                pass
        elif k is str:
            return str(text)
        elif k is list:
            v = _literal(text)
            if isinstance(v, (list, tuple, int)):
                return v
    raise ValueError(text)


def _literal(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return str(text)


def convert(name: str, value, annotation, default=_MISSING, where: str = "", *,
            rules: bool = True):
    """``value`` as the type ``annotation`` (or the default's type) asks for, checked for
    finiteness and range; ``where`` prefixes the message (e.g. 'ifca: '). ``rules``: the
    package's rules for its own parameter names (``SIZES``, ``RANGES``) apply; a user's
    parameter is checked for its type, finiteness and the 32-bit bound only."""
    key = name if rules else ""              # the name the rule tables are read with
    kinds, none = _kinds(annotation, default)
    if isinstance(value, CliText):
        try:
            value = _from_text(value, kinds, none)
        except ValueError:
            word = ("not a number" if float in kinds else "not an integer" if int in kinds
                    else "not true or false" if bool in kinds else "not allowed")
            _fail(where, name, key, value, annotation, default, f"is {word}")
    if not kinds:
        return value
    if value is None:
        if none:
            return None
        _fail(where, name, key, value, annotation, default, "is not allowed (none)")
    if isinstance(value, bool):
        if bool in kinds:
            return value
        _fail(where, name, key, value, annotation, default, "is a boolean")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            _fail(where, name, key, value, annotation, default, "is not finite")
        if float in kinds:
            value = float(value)
            if not _in_range(key, value):
                _fail(where, name, key, value, annotation, default, "is out of range")
            return value
        if int in kinds:
            if isinstance(value, float):
                if not value.is_integer():
                    _fail(where, name, key, value, annotation, default, "is not an integer")
                value = int(value)
            low = 1 if key in SIZES else 0 if rules else -INT32_MAX[0] - 1
            if value < low and name != "seed":
                _fail(where, name, key, value, annotation, default, "is too small")
            if name == "seed" and value < 0:
                _fail(where, name, key, value, annotation, default, "is negative")
            most, why = INT_MAX.get(key, INT32_MAX)
            if value > most:
                _fail(where, name, key, value, annotation, default,
                      f"is too large (at most {most}: {why})")
            return value
        if list in kinds and key in SIZES and isinstance(value, int):
            return convert(name, [value], annotation, default, where, rules=rules)
        _fail(where, name, key, value, annotation, default, "is a number")
    if isinstance(value, str):
        if str in kinds:
            return str(value)
        _fail(where, name, key, value, annotation, default, "is a string")
    if isinstance(value, (list, tuple)):
        if list not in kinds:
            _fail(where, name, key, value, annotation, default, "is a list")
        if key in SIZES:
            for v in value:
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= INT32_MAX[0]:
                    _fail(where, name, key, value, annotation, default, "has an entry that is not "
                          f"an integer in 1..{INT32_MAX[0]}")
        return list(value)
    if isinstance(value, dict):
        if dict in kinds:
            return value
        _fail(where, name, key, value, annotation, default, "is a table")
    if any(isinstance(value, k) for k in kinds if isinstance(k, type)):
        return value
    _fail(where, name, key, value, annotation, default, f"has type {type(value).__name__}")


def package_names(owner, names) -> set:
    """The names of ``names`` that this package declares for ``owner`` (a builder function,
    or a config class: the names declared by its classes from this package); its rules by
    name apply to those alone (``check_fields``)."""
    ours = lambda obj: getattr(obj, "__module__", "").split(".")[0] == "fedclust_jax"
    if not isinstance(owner, type):
        return set(names) if ours(owner) else set()
    declared = set()
    for cls in owner.__mro__:
        if ours(cls):
            declared |= set(getattr(cls, "__annotations__", {}))
    return set(names) & declared


def signature_fields(fn, skip=("key", "data")) -> tuple[dict, bool]:
    """({name: (annotation, default)}, accepts **kwargs) of a builder function."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        hints = {}
    fields, var_kw = {}, False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.name not in skip and p.kind is not p.VAR_POSITIONAL:
            fields[p.name] = (hints.get(p.name), p.default if p.default is not p.empty else _MISSING)
    return fields, var_kw


def check_fields(params: dict, fields: dict, where: str, what: str, *, open_ended=False,
                 package: set | None = None) -> dict:
    """Converts every ``params`` entry by ``fields`` {name: (annotation, default)}; unknown
    names are errors unless ``open_ended``. ``package``: the names this package declares
    (its rules by name apply to them, ``convert``); None: every name."""
    if not isinstance(params, dict):
        raise ConfigError(f"{where}{what} must be a table {{key: value}}, got {params!r}")
    out = {}
    for k, v in params.items():
        if k not in fields:
            if open_ended:
                out[k] = _literal(v) if isinstance(v, CliText) else v
                continue
            raise ConfigError(f"{where}no {what} {k!r}; accepted: {', '.join(sorted(fields))}")
        out[k] = convert(k, v, *fields[k], where=where, rules=package is None or k in package)
    return out


def check_study_value(key: str, value):
    """A study-level value (rounds, seed, restarts, ...) converted and checked."""
    annotation, default = STUDY_TYPES[key]
    return convert(key, value, annotation, default)


# Which algorithms carry a model's BatchNorm statistics (models.resnet9.StatefulModel).
STATE_CARRIERS = "fedavg, local, ifca and oracle"


def model_state_error(algorithm: str | None, model: str, qualifier: str = "") -> ConfigError:
    """The one-line refusal of a model with BatchNorm state for an algorithm (None: "this
    algorithm"; ``qualifier``: its configuration, e.g. 'with option="gradient"') that does
    not carry it."""
    what = "this algorithm" if algorithm is None else f"algorithm {algorithm!r}"
    what += f" {qualifier}" if qualifier else ""
    return ConfigError(f"{what} does not carry the BatchNorm statistics of model {model!r} (it "
                       f"would normalise with batch statistics); they are carried by "
                       f"{STATE_CARRIERS}; choose one of those, or a model without BatchNorm "
                       f"(e.g. --model cifar-cnn)")


def check_model_state(algorithm: str, cfg, model: str | None, stateful: bool):
    """Raises ``model_state_error`` when the model (name ``model``; ``stateful``: it keeps
    BatchNorm statistics) meets an algorithm config ``cfg`` that does not carry them.
    ``cfg.model_state_refusal()`` says None where it does, else the configuration that
    does not; a config without that method never carries them."""
    if not stateful:
        return
    rule = getattr(cfg, "model_state_refusal", None)
    qualifier = "" if rule is None else rule()
    if qualifier is not None:
        raise model_state_error(algorithm, str(model), qualifier)
