"""The Algorithm contract, checked abstractly before anything compiles.

``check_algorithm(alg, data)`` traces ``init``, ``round``, ``evaluate`` and ``objective``
(and ``objective_and_evaluate`` where ``fused_end_of_run``) once with ``jax.eval_shape``:
no FLOPs, no memory beyond the trace. A break of the contract is a ``ContractError`` (a
ValueError, so the command line prints it as one line and exits 2) naming the algorithm,
the method, the leaf path and both types:

- ``round(state, key, data)`` returns ``(state, metrics)`` with the state of the same tree
  structure, shapes and dtypes as ``init``'s (the runner carries it through ``lax.scan``);
- ``metrics`` is a dict of arrays, keyed by strings (recorded once per round);
- ``evaluate(state, data)`` returns a dict holding what the declared capabilities need
  (``evaluation_keys``), each of the stated shape;
- ``objective(state, data)`` returns a scalar.

Anything else raised while tracing (an index of a float array, ``lax.cond`` branches of
different types, a shape mismatch) is a ContractError too: the algorithm, the method, the
user's file:line (the innermost frame outside this package and installed libraries) and
the error's first line.

The runner checks every algorithm registered from outside the package before its first
compile (``experiment.run_experiment``, ``sweep``); the built-ins are checked once each by
the test suite, which spares every run of theirs the extra trace.
"""

from __future__ import annotations

import os
import re
import site
import sysconfig
import traceback

import jax
import jax.numpy as jnp

from fedclust_jax.config_check import ConfigError


class ContractError(ConfigError):
    """An algorithm that breaks the ``Algorithm`` contract (one-line message)."""


def evaluation_keys(alg, data) -> dict[str, tuple]:
    """{key: (shape, kind)} that ``alg.evaluate`` must return on ``data``; kind "float"
    or "int". Points (``clusters_points``): point_assign int[N, n_max]. Clients: test_loss
    float[N], test_acc float[N] (classification) and, with ``clusters_clients``, assign
    int[N]."""
    n = data.num_clients
    if alg.clusters_points:
        return {"point_assign": ((n, data.n_max), "int")}
    keys = {"test_loss": ((n,), "float")}
    if data.task == "classification":
        keys["test_acc"] = ((n,), "float")
    if alg.clusters_clients:
        keys["assign"] = ((n,), "int")
    return keys


OPTIONAL_KEYS = {"assigned_test_loss": "float", "assigned_test_acc": "float"}   # float[N]


def _type(leaf) -> str:
    return f"{leaf.dtype}{list(leaf.shape)}"


def _where(alg) -> str:
    return f"algorithm {alg.name!r}"


def _paths(tree) -> dict[str, object]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path) or "(the state itself)": leaf for path, leaf in leaves}


def _library(filename: str) -> bool:
    """Whether a traceback frame's file belongs to this package, JAX or another installed
    library (or Python itself) rather than to the user's code."""
    here = os.path.abspath(filename)
    if filename.startswith("<") or here.startswith(PACKAGE_DIR + os.sep):
        return True
    return any(here.startswith(root + os.sep) for root in LIBRARY_ROOTS)


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
LIBRARY_ROOTS = sorted({os.path.abspath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                        if (p := sysconfig.get_paths().get(key))}
                       | {os.path.abspath(p) for p in getattr(site, "getsitepackages", list)()
                          + [site.getusersitepackages()] if p})


def user_frame(exc: BaseException) -> str | None:
    """"file:line" of the innermost frame of ``exc``'s traceback in the user's code (outside
    this package, JAX and other installed libraries); None when there is none. The file is
    given relative to the working folder when it lies inside it."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not _library(frame.filename):
            name = os.path.abspath(frame.filename)
            rel = os.path.relpath(name)
            return f"{rel if not rel.startswith('..') else name}:{frame.lineno}"
    return None


TYPE_IN_TEXT = re.compile(r"\b(?:b?float|u?int|bool|complex)\d*\[")


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message. When that line names no type and a later line
    does (JAX's "branches must have equal output types" gives both types further down),
    that line follows it."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0]
    if not TYPE_IN_TEXT.search(head):
        typed = next((line for line in lines[1:] if TYPE_IN_TEXT.search(line)), None)
        if typed is not None:
            head = f"{head} {typed}"
    return head


def _trace(alg, method: str, fn, *args):
    """``jax.eval_shape(fn, *args)``. Anything raised while tracing becomes a ContractError
    of one line: the algorithm, the method, the user's file:line (``user_frame``) and the
    error's first line; a value that is not a pytree of arrays and a Python branch on a
    traced value also say what to do instead."""
    try:
        return jax.eval_shape(fn, *args)
    except ContractError:
        raise
    except Exception as e:
        where = user_frame(e)
        at = f" at {where}" if where else ""
        first = first_line(e)
        if isinstance(e, jax.errors.ConcretizationTypeError):   # a Python branch on a traced value
            raise ContractError(f"{_where(alg)}: {method} branches in Python on a traced value"
                                f"{at} ({first}); compute with it instead: jnp.where(cond, a, b) "
                                "or jax.lax.cond(cond, f, g, ...)") from None
        if isinstance(e, TypeError) and "not a valid JAX type" in str(e):
            raise ContractError(f"{_where(alg)}: {method} returns a value that is not an "
                                "array or a pytree of arrays (metrics and states hold arrays "
                                f"only; a string or None cannot be traced){at}: "
                                f"{' '.join(str(e).split())}") from None
        raise ContractError(f"{_where(alg)}: {method} failed while traced{at}: "
                            f"{type(e).__name__}: {first}") from None


def check_state(alg, before, after, method: str = "round") -> None:
    """``after`` (the state ``method`` returns) must match ``before`` leaf by leaf."""
    if jax.tree.structure(before) != jax.tree.structure(after):
        old, new = _paths(before), _paths(after)
        gone = sorted(set(old) - set(new))
        added = sorted(set(new) - set(old))
        detail = (f"leaf {gone[0]} is missing" if gone else
                  f"leaf {added[0]} is new" if added else
                  f"its tree is {jax.tree.structure(after)}, init's {jax.tree.structure(before)}")
        raise ContractError(f"{_where(alg)}: {method} changes the state's structure: {detail}; "
                            f"{method} must return the state init returns, with the same leaves")
    for (path, a), b in zip(_paths(before).items(), jax.tree.leaves(after)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            raise ContractError(f"{_where(alg)}: {method} changes state leaf {path} from "
                                f"{_type(a)} (init) to {_type(b)}; the state must keep each "
                                "leaf's shape and dtype across rounds (cast it back with "
                                ".astype, or keep a fixed shape with a mask)")


def check_metrics(alg, metrics) -> None:
    if not isinstance(metrics, dict):
        raise ContractError(f"{_where(alg)}: round returns metrics of type "
                            f"{type(metrics).__name__}; it must return (state, metrics) with "
                            "metrics a dict of arrays, e.g. {} or {\"train_loss\": loss}")
    for k, v in metrics.items():
        if not isinstance(k, str):
            raise ContractError(f"{_where(alg)}: round's metrics key {k!r} is not a string")
        bad = [leaf for leaf in jax.tree.leaves(v) if not hasattr(leaf, "dtype")]
        if bad or not jax.tree.leaves(v):
            raise ContractError(f"{_where(alg)}: round's metric {k!r} is "
                                f"{type(v).__name__}, not an array; metrics must be arrays")


def check_evaluation(alg, data, ev, method: str = "evaluate") -> None:
    if not isinstance(ev, dict):
        raise ContractError(f"{_where(alg)}: {method} returns {type(ev).__name__}; it must "
                            "return a dict (see fedclust_jax.algorithms.base.Algorithm)")
    need = evaluation_keys(alg, data)
    missing = [k for k in need if k not in ev]
    if missing:
        caps = ("clusters_points" if alg.clusters_points else
                "clusters_clients" if alg.clusters_clients else "per-client scores")
        raise ContractError(f"{_where(alg)}: {method} returns no {missing[0]!r}, which "
                            f"{caps} on {data.task} data requires; it returns "
                            f"{sorted(ev)} and must return {sorted(need)}")
    n = data.num_clients
    want = {**need, **{k: ((n,), kind) for k, kind in OPTIONAL_KEYS.items() if k in ev}}
    for k, (shape, kind) in want.items():
        leaf = ev[k]
        ok_kind = (jnp.issubdtype(leaf.dtype, jnp.integer) if kind == "int"
                   else jnp.issubdtype(leaf.dtype, jnp.floating))
        if tuple(leaf.shape) != tuple(shape) or not ok_kind:
            raise ContractError(f"{_where(alg)}: {method}'s {k!r} is {_type(leaf)}; it must be "
                                f"{kind}{list(shape)} (one value per client"
                                + (", -1 on padding)" if k == "point_assign" else ")"))


def check_objective(alg, value, method: str = "objective") -> None:
    if not hasattr(value, "shape") or tuple(value.shape) != ():
        got = _type(value) if hasattr(value, "shape") else type(value).__name__
        raise ContractError(f"{_where(alg)}: {method} returns {got}; it must return a scalar "
                            "(the training objective the runner minimises over restarts)")


def check_algorithm(alg, data, model_builder=None) -> None:
    """Traces the four methods abstractly on ``data``; ContractError on the first break.
    Only where the user's code takes part: an algorithm class, or the registered builder of
    its model (``model_builder``), from outside the package."""
    ours = lambda thing: getattr(thing, "__module__", "fedclust_jax.").startswith("fedclust_jax.")
    if ours(type(alg)) and (model_builder is None or ours(model_builder)):
        return          # built-ins: tests/test_contract.py checks each; a run saves the trace
    check_methods(alg, data)


def check_methods(alg, data) -> None:
    """``check_algorithm`` for any algorithm, built-in or not."""
    key = jax.random.key(0)
    state = _trace(alg, "init", alg.init, key, data)
    out = _trace(alg, "round", alg.round, state, key, data)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ContractError(f"{_where(alg)}: round returns {type(out).__name__}; it must return "
                            "a pair (state, metrics)")
    check_state(alg, state, out[0])
    check_metrics(alg, out[1])
    check_evaluation(alg, data, _trace(alg, "evaluate", alg.evaluate, state, data))
    check_objective(alg, _trace(alg, "objective", alg.objective, state, data))
    if alg.fused_end_of_run:
        both = _trace(alg, "objective_and_evaluate", alg.objective_and_evaluate, state, data)
        check_objective(alg, both[0], "objective_and_evaluate")
        check_evaluation(alg, data, both[1], "objective_and_evaluate")
