"""A memory pre-check from shapes: the biggest live arrays of a run, against what the
device (on a CPU: the machine's available RAM) has, before anything is compiled.

Estimate (bytes; R restarts, N clients, P parameters, M participants, layout chunk c):
  data        every array of the ``FederatedData`` pytree, stored once
  state       2 x R x the algorithm state (the round's input and output; donation lets XLA
              reuse the input, the factor 2 keeps a margin)
  chunk work  R x the larger of the training pass and the loss pass of one chunk:
              training  min(c, M) x (P + 2 P32 + one client's data + activations);
              loss pass min(c, N) x (one client's data + S x forward activations), S =
              ``alg.models_scored(N)`` models scored on each client's data (K for a loss
              matrix, N for SR-FCA's cross losses); c = all clients for one vmap.
              P: one model in its stored dtype (the client's start), P32: one model in
              float32 (local training's master copy and gradient, ``core.train.local_train``);
              activations = 2 x every intermediate of one forward pass (from its jaxpr, so
              in the data's and params' dtype; forward activations half of that)
  per-client  R x N x P x ``alg.client_vectors`` for rules that keep per-client vectors
              (BR-IFCA's gradients, SR-FCA's trained models, ...)
  pairwise    R x (N x P + 3 x N x N float32) where ``alg.pairwise_clients``: the N local
              models and the [N, N] loss / distance / graph matrices
Every term counts the arrays' own dtypes: with ``--dtype bfloat16`` the data (float pool or
arrays), the state and P take 2 bytes per value, P32 still 4.
Only shapes are traced (``jax.eval_shape``, ``jax.make_jaxpr``); nothing is compiled.
"""

from __future__ import annotations

import math

import jax
import numpy as np

ADVICE = ("pass a smaller --chunk (clients per chunk), fewer --restarts, --dtype bfloat16, "
          "or a view recipe (one shared example pool)")


class OutOfMemoryAtStart(Exception):
    """The device ran out of memory before the first compiled call of a run (or of a
    sweep's group) ended: nothing is lost by running again with a smaller layout. Its
    text is the first line of the XLA error."""


def out_of_memory_line(e: Exception) -> str | None:
    """The first line of an XLA out-of-memory error, else None."""
    text = str(e).strip()
    return text.splitlines()[0][:200] if "RESOURCE_EXHAUSTED" in text else None


def tree_bytes(tree) -> int:
    return int(sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize
                   for a in jax.tree.leaves(tree) if hasattr(a, "shape")))


def available_bytes(device=None) -> int | None:
    """Free memory of ``device`` (default: the first): accelerators, ``memory_stats()``
    bytes_limit - bytes_in_use; CPU: psutil's available RAM if installed, else
    MemAvailable from /proc/meminfo; None when unknown."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = getattr(device, "memory_stats", lambda: None)() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return None
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def activation_bytes(model, params, x_one) -> int:
    """2 x the bytes of every intermediate of one forward pass on one client's x (forward
    and backward), from the jaxpr's shapes."""
    jaxpr = jax.make_jaxpr(model.apply)(params, x_one)
    total = 0

    def walk(jp):
        nonlocal total
        for eqn in jp.eqns:
            for v in eqn.outvars:
                aval = getattr(v, "aval", None)
                if aval is not None and hasattr(aval, "shape"):
                    total += math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)
    walk(jaxpr.jaxpr)
    return 2 * total


def estimate(alg, data, *, restarts: int = 1, chunk=None) -> dict:
    """Bytes of the biggest live arrays of a run of ``alg`` (an ``algorithms.base.Algorithm``)
    on ``data`` (see module docstring). chunk: the resolved layout (None = one vmap)."""
    model = alg.model
    params = jax.eval_shape(model.init, jax.random.key(0))
    p_bytes = tree_bytes(params)
    n = data.num_clients
    m = alg.participants(n)
    one = jax.eval_shape(lambda d: d.train_client(0), data)    # never materialises views
    x_one = jax.ShapeDtypeStruct(one[0].shape, one[0].dtype)
    p32_bytes = 4 * sum(math.prod(a.shape) for a in jax.tree.leaves(params))
    activations = activation_bytes(model, params, x_one)
    train = min(m, chunk or m) * (p_bytes + 2 * p32_bytes + tree_bytes(one) + activations)
    scored = min(n, chunk or n) * (tree_bytes(one) + alg.models_scored(n) * activations // 2)
    state = tree_bytes(jax.eval_shape(alg.init, jax.random.key(0), data))
    out = {"data": tree_bytes(data), "state": 2 * restarts * state,
           "chunk_work": restarts * max(train, scored),
           "client_vectors": restarts * n * p_bytes * alg.client_vectors,
           "pairwise": restarts * (n * p_bytes + 3 * n * n * 4) if alg.pairwise_clients else 0}
    out["total"] = sum(out.values())
    return out


def check_fits(needed: dict, available: int | None, fits_chunk: int | None = None):
    """Raises ValueError (one line of advice) when ``needed["total"]`` exceeds ``available``;
    ``fits_chunk``: a client chunk with which the run would fit, named first in the advice."""
    if available is None or needed["total"] <= available:
        return
    gb = lambda b: f"{b / 2**30:.2f} GB"
    parts = ", ".join(f"{k} {gb(v)}" for k, v in needed.items() if k != "total" and v)
    advice = ADVICE if fits_chunk is None else f"--chunk {fits_chunk} fits; or {ADVICE}"
    raise ValueError(f"this run needs about {gb(needed['total'])} ({parts}) but only "
                     f"{gb(available)} is available; {advice}")


def fit_chunk(alg, data, *, restarts: int, available: int | None, chunk=None):
    """The layout to use: ``chunk`` unless it is None (one vmap) and that does not fit in
    ``available``; then the largest power-of-two chunk that fits (at least 1)."""
    if chunk is not None or available is None:
        return chunk
    if estimate(alg, data, restarts=restarts, chunk=None)["total"] <= available:
        return None
    return largest_fitting_chunk(alg, data, restarts=restarts, available=available) or 1


def largest_fitting_chunk(alg, data, *, restarts: int, available: int,
                          below: int | None = None) -> int | None:
    """The largest power-of-two client chunk (< ``below`` when given) whose estimate fits in
    ``available``; None when not even a chunk of one client does."""
    c = 1 << max(0, data.num_clients.bit_length() - 1)
    while below is not None and c >= below and c > 1:
        c //= 2
    while True:
        if estimate(alg, data, restarts=restarts, chunk=c)["total"] <= available:
            return c if below is None or c < below else None
        if c == 1:
            return None
        c //= 2


def check_state_dtypes(alg, data):
    """Raises ValueError (one line) when a round of ``alg`` returns a state leaf in another
    dtype than it was given (an algorithm whose own update arithmetic is not yet written
    for bf16 params promotes them to float32). Traced from shapes (``jax.eval_shape``),
    nothing compiled; run before a ``--dtype bfloat16`` run."""
    name = alg.name
    state = jax.eval_shape(alg.init, jax.random.key(0), data)
    try:
        new, _ = jax.eval_shape(alg.round, state, jax.random.key(1), data)
    except TypeError as e:   # a loop inside the round promotes its carry
        if "carry input and carry output must have equal types" not in str(e):
            raise
        raise ValueError(f"algorithm {name!r} does not keep its state in its stored dtype "
                         f"(a loop inside its round promotes it); run it with --dtype float32"
                         ) from None
    flat_in = jax.tree_util.tree_flatten_with_path(state)[0]
    flat_out = jax.tree.leaves(new)
    for (path, a), b in zip(flat_in, flat_out):
        if a.dtype != b.dtype:
            raise ValueError(
                f"algorithm {name!r} does not keep its state "
                f"in {a.dtype} (state{jax.tree_util.keystr(path)} becomes {b.dtype} after a "
                f"round); run it with --dtype float32")
