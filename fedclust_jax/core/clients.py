"""How per-client work is vectorized: the one place that chooses vmap or chunked lax.map."""

from __future__ import annotations

from typing import Callable

import jax
from jax import lax


def map_clients(f: Callable, *args, chunk: int | None = None):
    """Applies ``f`` to every client: ``f(*(a[i] for a in args))`` stacked over i.

    args: pytrees whose leaves share the leading client axis N.
    chunk=None: one ``vmap`` over all N (fastest on accelerators when memory allows).
    chunk=c: ``lax.map`` over chunks of c clients, each chunk vmapped; memory is bounded by
    c clients' work, and on CPU a chunk is often faster than a full vmap. The result does not
    depend on ``chunk``.
    """
    if chunk is None:
        return jax.vmap(f)(*args)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of clients or None, got {chunk}")
    return lax.map(lambda a: f(*a), args, batch_size=chunk)
