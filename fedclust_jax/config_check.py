"""Typed checks of every configuration value, before any data is built.

Expected types come from the config dataclasses' field annotations (algorithms), the
dataset and model builders' signatures, and ``STUDY_TYPES`` (the study's own keys).
Values typed on the command line arrive as ``CliText`` and are converted to the expected
type; values from Python or from study files (TOML / JSON) must already have it (an int
is accepted where a float is expected, an integral float where an int is). Every float
must be finite and every integer fit in 32 bits; a range declared in the annotation
(``fedclust_jax.bounds``: ``Size``, ``Positive``, ``Annotated[float, Bounds(...)]``) is
enforced, and so are the values a ``Literal["a", "b"]`` annotation allows. A bad value
raises ``ConfigError`` (a ValueError) whose one-line message names the value and what is
allowed.
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import functools
import inspect
import math
import types
import typing
from typing import Annotated, Any

from fedclust_jax.bounds import Bounds, Seed, Size, bounds_of

_MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A configuration value of the wrong type or out of range (one-line message)."""


class CliText(str):
    """A value typed on the command line: converted to the type its key expects."""


# An integer without declared bounds reaches an int32 (counts, shapes, loop lengths).
INT32 = Bounds(-2**31, 2**31 - 1, why="it is counted in 32-bit integers")

# The round counter of the compiled loop is int32: a run of 2**31 - 1 rounds could not be counted.
Rounds = Annotated[int, Bounds(0, 2**31 - 2, why="the round counter is a 32-bit integer")]

# The study's own keys: (annotation, default).
STUDY_TYPES = {"dataset": (str, _MISSING), "data": (dict, _MISSING),
               "model": (str | None, None), "model_args": (dict, _MISSING),
               "rounds": (Rounds, 100), "seed": (Seed, 0), "restarts": (Size, 1),
               "rounds_per_chunk": (Size | None, None), "algorithms": (dict, _MISSING),
               "devices": (Size | None, None), "eval_every": (Size | None, None)}


@dataclasses.dataclass
class _Accepts:
    """What an annotation accepts: base ``kinds`` in preference order, ``none`` allowed,
    the ``bounds`` declared per kind, those of a list's ``items``, and the values a
    ``Literal`` allows per kind (``choices``: {str: ("equal", "samples")})."""
    kinds: list
    none: bool = False
    bounds: dict = dataclasses.field(default_factory=dict)
    items: Bounds | None = None
    choices: dict = dataclasses.field(default_factory=dict)


def _accepts(annotation, default) -> _Accepts:
    if annotation is None or annotation is inspect.Parameter.empty or annotation is Any:
        if default is None:
            return _Accepts([str], True)  # unannotated, default None: a path or name (data_dir)
        if default is _MISSING:
            return _Accepts([], True)
        annotation = list if isinstance(default, (tuple, list)) else type(default)
    annotation, bounds = bounds_of(annotation)
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:  # e.g. weighting: Literal["equal", "samples"]
        choices: dict = {}
        for a in args:
            choices.setdefault(type(a), []).append(a)
        return _Accepts(list(choices), choices={k: tuple(v) for k, v in choices.items()})
    if origin in (typing.Union, types.UnionType):
        out, free = _Accepts([]), set()
        for a in args:
            if a is type(None):
                out.none = True
                continue
            part = _accepts(a, _MISSING)
            out.kinds += [k for k in part.kinds if k not in out.kinds]
            out.bounds = {**part.bounds, **out.bounds}
            out.items = out.items or part.items
            free |= set(part.kinds) - set(part.choices)
            for k, v in part.choices.items():
                out.choices[k] = out.choices.get(k, ()) + v
        for k in free:                   # str | Literal["auto"]: any string is allowed
            out.choices.pop(k, None)
        return out
    if origin in (list, tuple, collections.abc.Sequence) or annotation in (list, tuple):
        return _Accepts([list], items=bounds_of(args[0])[1] if args else None)
    return _Accepts([annotation], bounds={annotation: bounds} if bounds else {})


def _int_words(b: Bounds | None) -> str:
    if b is None:
        return f"an integer of 32 bits (at most {INT32.high})"
    return f"an integer {b.text()}"


def describe(annotation, default=_MISSING) -> str:
    """What an annotation accepts, in words: 'a finite number > 0', 'an integer >= 1 or
    none', 'an integer of 32 bits (at most 2147483647)'."""
    acc = _accepts(annotation, default)
    words = []
    for k in acc.kinds:
        b = acc.bounds.get(k)
        if k in acc.choices:
            words.append(_choice_words(acc.choices[k]))
        elif k is bool:
            words.append("true or false")
        elif k is int:
            words.append(_int_words(b))
        elif k is float:
            words.append("a finite number" + (f" {b.text()}" if b else ""))
        elif k is str:
            words.append("a string")
        elif k is list:
            words.append("a list" + (f" of integers {acc.items.text()}" if acc.items else ""))
        elif k is dict:
            words.append("a table {key: value}")
        else:
            words.append(getattr(k, "__name__", str(k)))
    if int in acc.kinds and float in acc.kinds:
        words = [w for w in words if not w.startswith("an integer")]
    if acc.none:
        words.append("none")
    return " or ".join(dict.fromkeys(words)) or "any value"


def _choice_words(values) -> str:
    """"one of the strings 'a', 'b'", "the string 'auto'", "one of 1, 2"."""
    shown = [repr(v) for v in values]
    what = "the string" if isinstance(values[0], str) else ""
    if len(shown) == 1:
        return f"{what or 'the value'} {shown[0]}"
    return f"one of {what + 's ' if what else ''}{', '.join(shown)}"


def type_text(annotation, default=_MISSING) -> str:
    """A short type for help tables: 'int >= 1 | None', 'float in (0, 1]', 'str', and a
    ``Literal``'s choices as "'equal' | 'samples'"."""
    acc = _accepts(annotation, default)
    parts = []
    for k in acc.kinds:
        b = acc.bounds.get(k)
        if k in acc.choices:
            parts += [repr(v) for v in acc.choices[k]]
            continue
        name = getattr(k, "__name__", str(k))
        if k is list and acc.items:
            name = f"list of int {acc.items.text()}"
        parts.append(f"{name} {b.text()}" if b else name)
    if acc.none:
        parts.append("None")
    return " | ".join(dict.fromkeys(parts)) or "any"


def _fail(where: str, name: str, value, annotation, default, problem: str = ""):
    shown = f"{value!r}" if not isinstance(value, CliText) else f"{str(value)!r}"
    if isinstance(value, str) and not isinstance(value, CliText):
        shown = f"the string {value!r}"
    problem = problem or "is not allowed"
    raise ConfigError(f"{where}{name} = {shown} {problem}; {name} takes "
                      f"{describe(annotation, default)}")


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


def _check_int(value: int, b: Bounds | None) -> str:
    """'' if ``value`` meets the bounds ``b`` (None: the 32-bit range), else the problem."""
    b = b or INT32
    low = INT32.low if b.low is None else b.low
    high, why = (INT32.high, INT32.why) if b.high is None else (b.high, b.why or INT32.why)
    if value < low or (b.low_open and value == low):
        return "is too small"
    if value > high or (b.high_open and value == high):
        return f"is too large (at most {high}: {why})"
    return ""


def convert(name: str, value, annotation, default=_MISSING, where: str = "", *,
            said=None):
    """``value`` as the type ``annotation`` (or the default's type) asks for, checked for
    finiteness, the 32-bit bound of integers, the ``Bounds`` the annotation declares and
    the choices of a ``Literal``; ``where`` prefixes the message (e.g. 'ifca: '), which
    says what ``said`` (default: ``annotation``) accepts."""
    acc = _accepts(annotation, default)
    kinds = acc.kinds
    said = annotation if said is None else said
    fail = lambda problem: _fail(where, name, value, said, default, problem)
    if acc.choices:
        plain = convert(name, value, _without_choices(annotation), default, where, said=said)
        allowed = acc.choices.get(type(plain))
        if allowed is not None and plain not in allowed:
            fail("is not one of the choices")
        return plain
    if isinstance(value, CliText):
        try:
            value = _from_text(value, kinds, acc.none)
        except ValueError:
            fail("is " + ("not a number" if float in kinds else "not an integer" if int in kinds
                          else "not true or false" if bool in kinds else "not allowed"))
    if not kinds:
        return value
    if value is None:
        if acc.none:
            return None
        fail("is not allowed (none)")
    if isinstance(value, bool):
        if bool in kinds:
            return value
        fail("is a boolean")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            fail("is not finite")
        if float in kinds:
            value = float(value)
            if float in acc.bounds and value not in acc.bounds[float]:
                fail("is out of range")
            return value
        if int in kinds:
            if isinstance(value, float):
                if not value.is_integer():
                    fail("is not an integer")
                value = int(value)
            problem = _check_int(value, acc.bounds.get(int))
            if problem:
                fail(problem)
            return value
        if list in kinds and acc.items is not None and isinstance(value, int):
            return convert(name, [value], annotation, default, where, said=said)
        fail("is a number")
    if isinstance(value, str):
        if str in kinds:
            return str(value)
        fail("is a string")
    if isinstance(value, (list, tuple)):
        if list not in kinds:
            fail("is a list")
        if acc.items is not None:
            for v in value:
                if isinstance(v, bool) or not isinstance(v, int):
                    fail(f"has an entry that is not {_int_words(acc.items)}")
                if _check_int(v, acc.items):
                    fail(f"has an entry {v} that {_check_int(v, acc.items)}")
        return list(value)
    if isinstance(value, dict):
        if dict in kinds:
            return value
        fail("is a table")
    if any(isinstance(value, k) for k in kinds if isinstance(k, type)):
        return value
    fail(f"has type {type(value).__name__}")


def _without_choices(annotation):
    """``annotation`` with every ``Literal`` replaced by its values' types (their bounds and
    other members kept), for converting a value before its choice is checked."""
    base, bounds = bounds_of(annotation)
    origin = typing.get_origin(base)
    if origin is typing.Literal:
        kinds = tuple(dict.fromkeys(type(a) for a in typing.get_args(base)))
        plain = kinds[0] if len(kinds) == 1 else typing.Union[kinds]
    elif origin in (typing.Union, types.UnionType):
        plain = typing.Union[tuple(_without_choices(a) for a in typing.get_args(base))]
    else:
        return annotation
    return Annotated[plain, bounds] if bounds is not None else plain


@functools.cache
def _field_hints(cls) -> dict:
    return typing.get_type_hints(cls, include_extras=True)


def check_config(obj) -> None:
    """Checks every scalar field (a Python number, string, boolean or None) of the dataclass
    ``obj`` against its annotation as ``convert`` does (type, finiteness, 32-bit integers,
    the declared ``Bounds``); raises ``ConfigError`` naming the class. A config's
    ``__post_init__`` calls it, so a config built directly in Python meets the ranges the
    command line and study files do. Arrays and traced values are skipped (a sweep's values
    are checked before they are traced)."""
    hints = _field_hints(type(obj))
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.name not in hints or not (v is None or isinstance(v, (bool, int, float, str))):
            continue
        where = f"{type(obj).__name__}: "
        kinds = _accepts(hints[f.name], f.default).kinds
        if isinstance(v, float) and int in kinds and float not in kinds:
            _fail(where, f.name, v, hints[f.name], f.default, "is not an integer")   # kept as is
        convert(f.name, v, hints[f.name], f.default, where)


def signature_fields(fn, skip=("key", "data")) -> tuple[dict, bool]:
    """({name: (annotation, default)}, accepts **kwargs) of a builder function."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        hints = {}
    fields, var_kw = {}, False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.name not in skip and p.kind is not p.VAR_POSITIONAL:
            fields[p.name] = (hints.get(p.name), p.default if p.default is not p.empty else _MISSING)
    return fields, var_kw


def check_fields(params: dict, fields: dict, where: str, what: str, *,
                 open_ended=False) -> dict:
    """Converts every ``params`` entry by ``fields`` {name: (annotation, default)}; unknown
    names are errors unless ``open_ended``."""
    if not isinstance(params, dict):
        raise ConfigError(f"{where}{what} must be a table {{key: value}}, got {params!r}")
    out = {}
    for k, v in params.items():
        if k not in fields:
            if open_ended:
                out[k] = _literal(v) if isinstance(v, CliText) else v
                continue
            raise ConfigError(f"{where}no {what} {k!r}; accepted: {', '.join(sorted(fields))}")
        out[k] = convert(k, v, *fields[k], where=where)
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
