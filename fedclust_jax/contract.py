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

The runner checks every algorithm registered from outside the package before its first
compile (``experiment.run_experiment``, ``sweep``); the built-ins are checked once each by
the test suite, which spares every run of theirs the extra trace.
"""

from __future__ import annotations

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


def _trace(alg, method: str, fn, *args):
    """``jax.eval_shape(fn, *args)``; an output that is not a pytree of arrays is a
    ContractError naming the method."""
    try:
        return jax.eval_shape(fn, *args)
    except jax.errors.ConcretizationTypeError as e:      # a Python branch on a traced value
        first = str(e).strip().splitlines()[0]
        raise ContractError(f"{_where(alg)}: {method} branches in Python on a traced value "
                            f"({first}); compute with it instead: jnp.where(cond, a, b) or "
                            "jax.lax.cond(cond, f, g, ...)") from None
    except TypeError as e:
        if "not a valid JAX type" in str(e):
            raise ContractError(f"{_where(alg)}: {method} returns a value that is not an "
                                "array or a pytree of arrays (metrics and states hold arrays "
                                f"only; a string or None cannot be traced): {' '.join(str(e).split())}"
                                ) from None
        raise


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


def check_algorithm(alg, data) -> None:
    """Traces the four methods abstractly on ``data``; ContractError on the first break."""
    if type(alg).__module__.startswith("fedclust_jax."):
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
