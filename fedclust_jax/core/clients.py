"""How per-client work is vectorized: the one place that chooses vmap or chunked lax.map."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
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


def chain_clients(f: Callable, start, group, *args, order_key=None):
    """Participants train one after another, each from its group's latest model.

    The SR-FCA authors' code does this (an option wherever it matters): its server hands
    every sampled client the *same* parameter tensors, so the clients of a cluster train in
    sequence on one shared model and the server then aggregates the sequence's checkpoints.

    f(params, *client_args) -> params: one client's training.
    start: [G, ...] one model per group; group: int32[M] group of participant j (-1: skipped,
    output = its group-0 model); args: pytrees with leading axis M.
    order_key: None (train in the given order) or a key drawing a random training order.
    Returns [M, ...] in the input order: participant j's model after its turn. A
    ``lax.scan`` over M, one client per step (on a CPU as fast as ``map_clients(chunk=1)``).
    """
    num_groups = jax.tree.leaves(start)[0].shape[0]
    m = group.shape[0]
    order = jnp.arange(m) if order_key is None else jax.random.permutation(order_key, m)

    def step(chain, j):
        g = group[j]
        slot = jnp.clip(g, 0, num_groups - 1)
        old = jax.tree.map(lambda c: c[slot], chain)
        trained = f(old, *jax.tree.map(lambda a: a[j], args))
        new = jax.tree.map(lambda n, o: jnp.where(g >= 0, n, o), trained, old)
        return jax.tree.map(lambda c, n: c.at[slot].set(n), chain, new), new

    new = lax.scan(step, start, order)[1]
    return jax.tree.map(lambda a: a[jnp.argsort(order)], new)
