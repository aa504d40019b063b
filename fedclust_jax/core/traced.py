"""Hyperparameters that a sweep traces (a vmapped grid, ``algorithms.hparams``): value
checks run on concrete values only (a traced value was checked concretely before)."""

from __future__ import annotations

import jax


def is_traced(value) -> bool:
    """True for a JAX tracer (a hyperparameter of a vmapped or jitted grid)."""
    return isinstance(value, jax.core.Tracer)


def concrete(*values) -> bool:
    """True when none of ``values`` is traced (their checks can run)."""
    return not any(is_traced(v) for v in values)
