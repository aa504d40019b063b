"""How per-client work is vectorized: the one place that chooses vmap or chunked lax.map,
and the streaming walk that adds every client's upload into per-group sums.

Layouts (``chunk``): None = one ``vmap`` over all clients; an int c = a sequential walk
over chunks of c clients, each chunk vmapped; "auto" = chosen per backend by
``resolve_chunk``. Results never depend on the layout (up to float summation order).
Inside ``core.sharding.split_clients(mesh)`` a chunked walk whose client count the mesh's
size divides is split over its devices (``_on_devices``).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

AUTO = "auto"


def check_chunk(chunk):
    """Raises ValueError unless chunk is None, "auto" or an int >= 1."""
    if chunk is None or chunk == AUTO:
        return
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of clients, None (one vmap over all "
                         f"clients) or \"auto\", got {chunk!r}")


def resolve_chunk(chunk, num_clients: int | None = None, *, backend: str | None = None,
                  devices: int = 1):
    """The layout actually used for ``chunk`` (None or an int >= 1).

    "auto": on a CPU with one device, clients one at a time (chunk = 1): every local step is
    then a plain GEMM. On accelerators, or with the runner's clients split over several
    devices (``devices``), one vmap (None); ``core.memory.fit_chunk`` bounds it by the
    device's memory before a run.
    An int larger than ``num_clients`` is the same layout as ``num_clients``.
    """
    check_chunk(chunk)
    if chunk == AUTO:
        backend = backend or jax.default_backend()
        return 1 if backend == "cpu" and devices == 1 else None
    if chunk is not None and num_clients is not None:
        return max(1, min(chunk, num_clients))
    return chunk


def map_clients(f: Callable, *args, chunk=None, shared=None):
    """Applies ``f`` to every client: ``f(*(a[i] for a in args))`` stacked over i, or
    ``f(*(a[i] for a in args), shared)`` when ``shared`` is given.

    args: pytrees whose leaves share the leading client axis N.
    shared: None, or a pytree every client reads whole (cluster models, a round's key).
    Pass what ``f`` needs of the enclosing computation here rather than through a closure:
    in a walk split over devices (``core.sharding.split_clients``) it enters the
    ``shard_map`` as an explicit replicated argument, while a closed-over value keeps the
    enclosing mesh in its type, which operations that copy their operand's sharding
    (``jnp.tril``, ``jnp.triu``, sorting) refuse inside the split walk.
    chunk=None: one ``vmap`` over all N (fastest on accelerators when memory allows).
    chunk=c: ``lax.map`` over chunks of c clients, each chunk vmapped; memory is bounded by
    c clients' work, and on CPU a chunk is often faster than a full vmap. "auto":
    ``resolve_chunk``. The result does not depend on ``chunk``.
    """
    n = jax.tree.leaves(args)[0].shape[0]
    chunk = resolve_chunk(chunk, n)
    bind = lambda sh: f if sh is None else (lambda *a: f(*a, sh))   # f with shared given
    if chunk is None:
        return jax.vmap(bind(shared))(*args)
    walk = lambda first, size, _, sh, *a: lax.map(lambda b: bind(sh)(*b), a, batch_size=chunk)
    return _on_devices(walk, n, chunk, None, args, P_CLIENTS, shared=shared)


P_CLIENTS = "clients"   # out_specs marker: stacked over the clients


def _on_devices(walk, n: int, chunk, data, args, out, shared=None):
    """``walk(first, size, data, shared, *args)`` over all n clients, or split over the
    devices of the active ``split_clients`` mesh when it has one and n is a multiple of its
    size D: under ``shard_map`` each device runs ``walk`` on its block of size = n / D
    clients (``first`` its first global id; data's per-client fields and ``args`` split,
    ``shared`` and the rest replicated; data and shared may be None).
    out: a pytree prefix of the outputs, each P_CLIENTS (stacked over the clients) or
    "sum" (added over the devices)."""
    from jax.sharding import PartitionSpec
    from fedclust_jax.core import sharding
    mesh = sharding.active_mesh()
    if mesh is None or chunk is None or n % mesh.devices.size:
        return walk(0, n, data, shared, *args)
    size = n // mesh.devices.size
    kinds, tree = jax.tree.flatten(out)

    def local(d, sh, *a):
        with sharding.split_clients(None):          # no split walks inside a split walk
            res = walk(lax.axis_index(sharding.AXIS) * size, size,
                       d if data is not None else None, sh, *a)
        res = tree.flatten_up_to(res)
        res = [lax.psum(r, sharding.AXIS) if k == "sum" else r for r, k in zip(res, kinds)]
        return tree.unflatten(res)

    spec = lambda k: PartitionSpec() if k == "sum" else PartitionSpec(sharding.AXIS)
    specs = (() if data is None else sharding.data_specs(data),
             jax.tree.map(lambda _: PartitionSpec(), shared),
             *(PartitionSpec(sharding.AXIS) for _ in args))
    return jax.shard_map(local, mesh=mesh, in_specs=specs, check_vma=False,
                         out_specs=tree.unflatten([spec(k) for k in kinds]))(
        () if data is None else data, shared, *args)


def _sum_rows(rows, values):
    """sum_c rows[c, g] * values[c, ...] -> [G, ...] float32 (a ``w @ V`` contraction, at
    full float32 precision: see ``aggregate``)."""
    return jax.tree.map(
        lambda v: jnp.tensordot(rows.T, v.astype(jnp.float32), axes=1,
                                precision=lax.Precision.HIGHEST), values)


def stream_clients(f: Callable, data, ids, *args, num_groups: int, chunk=None):
    """Walks clients ``ids`` and adds each one's upload into per-group sums.

    f(i, x, y, count, *args_i) -> (rows float[G], value pytree, aux pytree): client i's
    weight in each of the G groups (e.g. one-hot of its cluster times its weight), its
    upload (a model, a model delta or a gradient) and small per-client outputs (losses,
    assignments; or, for rules that keep them, per-client vectors). (x [n_max, ...],
    y [n_max], count) are client i's training data, read by id with
    ``data.train_client(i)`` inside the chunk (never a gather of all participants).
    ids: int32[M] client ids, or None for all N clients in order (full participation:
    with chunk=None the arrays are read in place, without any gather).
    args: pytrees with leading axis M (per-participant keys, per-client state).
    chunk: None (one vmap), an int c (a ``lax.scan`` over ceil(M / c) chunks; the last
    chunk is padded with masked slots that add nothing) or "auto" (``resolve_chunk``).

    Returns (sums [G, ...] float32 with value's structure, totals float32[G] = sum of
    rows, aux stacked [M, ...]). Live memory: G x P sums plus one chunk's work; an [M, P]
    array of uploads never exists. Sums differ across chunk sizes only by float32
    summation order.
    """
    m = data.num_clients if ids is None else ids.shape[0]
    chunk = resolve_chunk(chunk, m)
    read = lambda i, *a: f(i, *data.train_client(i), *a)

    if chunk is None:
        if ids is None:   # full participation: the client arrays in place
            rows, values, aux = jax.vmap(f)(jnp.arange(m, dtype=jnp.int32), data.x, data.y,
                                            data.count, *args)
        else:
            rows, values, aux = jax.vmap(read)(ids, *args)
        rows = rows.astype(jnp.float32)
        return _sum_rows(rows, values), rows.sum(axis=0), aux

    shapes = jax.eval_shape(read, jnp.zeros((), jnp.int32),
                            *jax.tree.map(lambda a: a[0], args))
    rows_shape, value_shape, aux_shape = shapes
    if rows_shape.shape != (num_groups,):
        raise ValueError(f"f must return rows of shape ({num_groups},), got {rows_shape.shape}")

    def walk(first, mm, d, _, *args):
        """Clients first .. first + mm - 1 (their data in ``d`` at 0 .. mm - 1)."""
        num_chunks = math.ceil(mm / chunk)
        sums0 = jax.tree.map(lambda s: jnp.zeros((num_groups,) + s.shape, jnp.float32),
                             value_shape)
        aux0 = jax.tree.map(lambda s: jnp.zeros((mm,) + s.shape, s.dtype), aux_shape)

        def body(carry, c):
            sums, totals, aux_all = carry
            pos = c * chunk + jnp.arange(chunk)
            valid = pos < mm
            safe = jnp.minimum(pos, mm - 1)
            a = jax.tree.map(lambda x: x[safe], args)
            if ids is None:   # this block's data, read in place
                rows, values, aux = jax.vmap(lambda j, *b: f(first + j, *d.train_client(j), *b))(
                    safe.astype(jnp.int32), *a)
            else:
                rows, values, aux = jax.vmap(read)(ids[safe], *a)
            rows = jnp.where(valid[:, None], rows.astype(jnp.float32), 0.0)
            sums = jax.tree.map(jnp.add, sums, _sum_rows(rows, values))
            aux_all = jax.tree.map(lambda buf, v: buf.at[pos].set(v, mode="drop"), aux_all, aux)
            return (sums, totals + rows.sum(axis=0), aux_all), None

        return lax.scan(body, (sums0, jnp.zeros((num_groups,), jnp.float32), aux0),
                        jnp.arange(num_chunks))[0]

    if ids is not None:   # participants drawn anywhere: one walk
        return walk(0, m, None, None, *args)
    return _on_devices(walk, m, chunk, data, args, ("sum", "sum", P_CLIENTS))


def map_client_data(f: Callable, data, ids, *args, chunk=None, test: bool = False):
    """``f(i, x, y, count, *args_i)`` for every client of ``ids`` (None: all N), stacked
    [M, ...]; the client's data read by id inside the chunk (``data.train_client``, or
    ``data.test_client`` when ``test``). Layout as ``stream_clients``."""
    reader = data.test_client if test else data.train_client
    m = data.num_clients if ids is None else ids.shape[0]
    chunk = resolve_chunk(chunk, m)
    if chunk is None and ids is None:
        arrays = (data.x_test, data.y_test, data.count_test) if test else (data.x, data.y, data.count)
        return jax.vmap(f)(jnp.arange(m, dtype=jnp.int32), *arrays, *args)
    if ids is not None:
        return map_clients(lambda i, *a: f(i, *reader(i), *a), ids, *args, chunk=chunk)
    read = (lambda d: d.test_client) if test else (lambda d: d.train_client)
    walk = lambda first, size, d, _, *a: lax.map(
        lambda b: f(first + b[0], *read(d)(b[0]), *b[1:]),
        (jnp.arange(size, dtype=jnp.int32), *a), batch_size=chunk)
    return _on_devices(walk, m, chunk, data, args, P_CLIENTS)


def map_client_train_test(f: Callable, data, *args, chunk=None):
    """``f(i, x, y, count, x_test, y_test, count_test, *args_i)`` for every client i of
    ``data``, stacked [N, ...]: one pass over the clients reading each one's training and
    test data by id inside the chunk (``data.train_client``, ``data.test_client``), where
    two ``map_client_data`` calls would walk the clients twice. Layout as ``map_clients``."""
    n = data.num_clients
    chunk = resolve_chunk(chunk, n)
    ids = jnp.arange(n, dtype=jnp.int32)
    if chunk is None:
        return jax.vmap(f)(ids, data.x, data.y, data.count, data.x_test, data.y_test,
                           data.count_test, *args)
    walk = lambda first, size, d, _, *a: lax.map(
        lambda b: f(first + b[0], *d.train_client(b[0]), *d.test_client(b[0]), *b[1:]),
        (jnp.arange(size, dtype=jnp.int32), *a), batch_size=chunk)
    return _on_devices(walk, n, chunk, data, args, P_CLIENTS)


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
