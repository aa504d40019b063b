"""Robust per-cluster reductions of client uploads, with masks (no Python loop over clusters).

values: pytree [M, ...] (one row per client); assign: int32[M], -1 = in no cluster;
previous: pytree [K, ...], returned for clusters with no member (empty clusters keep it).

Coordinate-wise rules (Yin et al. 2018; BR-IFCA Defs. 4.1, 4.2):
  ``cluster_median``        median of each coordinate over a cluster's members
  ``cluster_trimmed_mean``  drop floor(beta * c_j) values per side, average the rest
Vector rules the papers compare with:
  ``cluster_geometric_median``  Weiszfeld iterations (smoothed, as RFA)
  ``cluster_krum``              (multi-)Krum inside every cluster
  ``cluster_centered_clipping`` Karimireddy et al. 2021 (soft weights min(1, tau/||z-v||))

Sorting backends for the coordinate-wise rules (``method``):
  "packed": ONE sort of uint64 keys per coordinate (cluster id in the high 32 bits, the
    float's order-preserving uint32 pattern in the low 32 bits, under a local
    ``jax.enable_x64``); after it, cluster j's members sit at rows [start_j, start_j + c_j)
    of every column, so trimmed means are one [K, M] @ [M, P] matmul and medians a gather.
  "masked": one float sort per cluster (non-members sent to +inf), ``lax.map`` over K.
  "numpy": numpy ``partition`` per cluster through ``jax.pure_callback`` (host; vmappable:
    the host walks the batch axes).
  "auto": "packed" on every backend: one sort for all clusters instead of K sorts, and it
    stays inside the compiled round (no host round trip, unlike "numpy").
All variants agree with float64 numpy up to float32 rounding (tests/core/test_robust.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedclust_jax.core.pairwise import exact_sq_distances, sq_distances
from fedclust_jax.core.pytree import flatten_stacked, unflatten_stacked
from fedclust_jax.core.traced import concrete

METHODS = ("auto", "packed", "masked", "numpy")
MEDIANS = ("mid", "lower")


# ----------------------------------------------------------------------------- helpers

def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "packed"
    return method


def _num_clusters(previous) -> int:
    return jax.tree.leaves(previous)[0].shape[0]


def _counts(assign, k):
    return jnp.sum(jax.nn.one_hot(assign, k, dtype=jnp.int32), axis=0)


def _keep_empty(out, prev, counts):
    has = (counts > 0).reshape((-1,) + (1,) * (prev.ndim - 1))
    return jnp.where(has, out.reshape(prev.shape).astype(prev.dtype), prev)


def _leafwise(fn, values, assign, previous):
    """Applies fn(flat [M, P] f32, assign, k) -> [K, P] to every leaf; keeps empty clusters."""
    k = _num_clusters(previous)
    counts = _counts(assign, k)

    def leaf(v, prev):
        flat = v.reshape(v.shape[0], -1).astype(jnp.float32)
        return _keep_empty(fn(flat, assign, k), prev, counts)

    return jax.tree.map(leaf, values, previous)


def _vectorwise(fn, values, assign, previous):
    """fn(flat [M, P], assign, prev_flat [K, P]) -> [K, P] over the concatenated leaves."""
    k = _num_clusters(previous)
    prev_flat = flatten_stacked(previous, jnp.float32)
    out = fn(flatten_stacked(values, jnp.float32), assign, prev_flat)
    out = jnp.where((_counts(assign, k) > 0)[:, None], out, prev_flat)
    return unflatten_stacked(out, previous)


# ------------------------------------------------------------- coordinate-wise: ranks

def _trim_counts(counts, beta):
    """t_j = floor(beta * c_j) per side (as the BR-IFCA code)."""
    return jnp.floor(beta * counts.astype(jnp.float32)).astype(jnp.int32)


def _median_ranks(counts, median):
    lo = jnp.maximum((counts - 1) // 2, 0)
    hi = lo if median == "lower" else jnp.maximum(counts // 2, 0)
    return lo, hi


def _float_key(v):
    """float32 -> uint32 with the same order (negative floats: all bits flipped)."""
    u = lax.bitcast_convert_type(v, jnp.uint32)
    return jnp.where(u >> 31 == 1, ~u, u | jnp.uint32(0x80000000))


def _key_float(u):
    u = jnp.where(u >> 31 == 1, u & jnp.uint32(0x7FFFFFFF), ~u)
    return lax.bitcast_convert_type(u, jnp.float32)


def packed_sort(flat, assign, k):
    """Sorts every column of flat [M, P] by (cluster, value) with one uint64 sort.

    Rows with assign -1 get cluster id k (sorted last). Returns the sorted values [M, P]
    and the first row of each cluster, start [K].
    """
    cid = jnp.where(assign < 0, k, assign).astype(jnp.uint32)
    low = _float_key(flat)
    with jax.enable_x64(True):
        key = (cid.astype(jnp.uint64)[:, None] << jnp.uint64(32)) | low.astype(jnp.uint64)
        key = jnp.sort(key, axis=0)
        low = (key & jnp.uint64(0xFFFFFFFF)).astype(jnp.uint32)
    counts = _counts(assign, k)
    start = jnp.cumsum(counts) - counts
    return _key_float(low), start


def _trmean_packed(flat, assign, k, beta):
    s, start = packed_sort(flat, assign, k)
    counts = _counts(assign, k)
    t = _trim_counts(counts, beta)
    rows = jnp.arange(flat.shape[0])[None, :]
    keep = (rows >= (start + t)[:, None]) & (rows < (start + counts - t)[:, None])
    w = keep / jnp.maximum(counts - 2 * t, 1)[:, None].astype(jnp.float32)
    return jnp.dot(w, s, precision=lax.Precision.HIGHEST)


def _median_packed(flat, assign, k, median):
    s, start = packed_sort(flat, assign, k)
    lo, hi = _median_ranks(_counts(assign, k), median)
    last = flat.shape[0] - 1
    return 0.5 * (s[jnp.minimum(start + lo, last)] + s[jnp.minimum(start + hi, last)])


def _masked_sorted(flat, member):
    return jnp.sort(jnp.where(member[:, None], flat, jnp.inf), axis=0)


def _trmean_masked(flat, assign, k, beta):
    def one(j):
        member = assign == j
        c = member.sum()
        s = _masked_sorted(flat, member)
        t = jnp.floor(beta * c).astype(jnp.int32)
        r = jnp.arange(flat.shape[0])[:, None]
        keep = (r >= t) & (r < c - t)
        return jnp.sum(jnp.where(keep, s, 0.0), axis=0) / jnp.maximum(c - 2 * t, 1)
    return lax.map(one, jnp.arange(k))


def _median_masked(flat, assign, k, median):
    def one(j):
        member = assign == j
        c = member.sum()
        s = _masked_sorted(flat, member)
        lo, hi = _median_ranks(c, median)
        return 0.5 * (s[lo] + s[hi])
    return lax.map(one, jnp.arange(k))


def _numpy_reduce(flat, assign, k, kind, beta=0.0, median="mid"):
    """Host-side per-cluster reduction with numpy ``partition`` (a ``pure_callback``).

    Under ``vmap`` the host receives every batch axis in front ([B..., M, P], [B..., M]) and
    walks them; each cluster of each batch element is one vectorized partition."""
    def one(f, a, out):
        for j in range(k):  # host loop over the few clusters, each a vectorized numpy call
            g = f[a == j]
            c = len(g)
            if c == 0:
                continue
            if kind == "median":
                lo = (c - 1) // 2
                hi = lo if median == "lower" else c // 2
                part = np.partition(g, sorted({lo, hi}), axis=0)
                out[j] = 0.5 * (part[lo] + part[hi])
            else:
                t = int(np.floor(beta * c))
                part = np.partition(g, [t, c - t - 1], axis=0) if t > 0 else g
                out[j] = part[t:c - t].mean(axis=0)

    def host(f, a):
        f, a = np.asarray(f), np.asarray(a)
        batch = a.shape[:-1]
        out = np.zeros(batch + (k, f.shape[-1]), np.float32)
        for b in np.ndindex(batch):
            one(f[b], a[b], out[b])
        return out
    shape = jax.ShapeDtypeStruct((k, flat.shape[1]), jnp.float32)
    return jax.pure_callback(host, shape, flat, assign, vmap_method="broadcast_all")


def cluster_trimmed_mean(values, assign, previous, beta: float, *, method: str = "auto"):
    """Coordinate-wise beta-trimmed mean per cluster.

    values: pytree [M, ...]; assign int32[M] (-1 = in no cluster); previous: pytree [K, ...].
    In a cluster of c_j members, floor(beta * c_j) values are dropped on each side of every
    coordinate and the rest averaged (BR-IFCA code's rounding; the paper leaves it open);
    beta = 0 is the mean. 0 <= beta < 0.5, a float or a traced scalar (the kept ranks are
    masks, no shape depends on it; not with method "numpy"). ``method``: sorting backend
    (module docstring).
    """
    if concrete(beta) and not 0 <= beta < 0.5:
        raise ValueError(f"trimming fraction beta must be in [0, 0.5), got {beta}")
    if not concrete(beta) and _check_method(method) == "numpy":
        raise ValueError("method=\"numpy\" takes a concrete trimming fraction beta; use "
                         "\"packed\" or \"masked\" to trace it")
    return _coordinatewise("trmean", beta, values, assign, previous, method)


def cluster_median(values, assign, previous, *, median: str = "mid", method: str = "auto"):
    """Coordinate-wise median per cluster.

    median="mid": the mean of the two middle values for even sizes (the paper's ordinary
    median, ``jnp.median``); "lower": the lower middle value (``torch.median``, the BR-IFCA
    code). ``method``: sorting backend (module docstring).
    """
    if median not in MEDIANS:
        raise ValueError(f"median must be one of {MEDIANS}, got {median!r}")
    return _coordinatewise("median", median, values, assign, previous, method)


_SORTED = {"trmean": {"packed": _trmean_packed, "masked": _trmean_masked},
           "median": {"packed": _median_packed, "masked": _median_masked}}


def _coordinatewise(kind, option, values, assign, previous, method):
    """A coordinate-wise rule ("trmean" with option beta, "median" with option the median
    kind) through the sorting backend ``method``, leaf by leaf."""
    method = _check_method(method)
    if method == "numpy":
        opts = dict(beta=option) if kind == "trmean" else dict(median=option)
        fn = lambda f, a, k: _numpy_reduce(f, a, k, kind, **opts)
    else:
        fn = lambda f, a, k: _SORTED[kind][method](f, a, k, option)
    return _leafwise(fn, values, assign, previous)


def cluster_plain_mean(values, assign, previous):
    """Per-cluster mean as a [K, M] @ [M, P] product (the non-robust reference)."""
    def fn(flat, assign, k):
        w = jax.nn.one_hot(assign, k, dtype=jnp.float32).T
        return jnp.dot(w / jnp.maximum(w.sum(1, keepdims=True), 1.0), flat,
                       precision=lax.Precision.HIGHEST)
    return _leafwise(fn, values, assign, previous)


# ------------------------------------------------------------------ vector rules

def _distances_from(flat, anchors):
    """A function v [K, P] -> ||z_i - v_k||^2 [M, K] costing one [M, P] x [P, K] matmul a call.

    Rows are first centred on their mean, then expanded around per-cluster anchors c_k
    [K, P]: ||z - v||^2 = ||z - c||^2 - 2 (z - c).(v - c) + ||v - c||^2, with ||z - c||^2
    computed exactly once (one pass per anchor), so float32 keeps its precision when all
    rows share a large offset.
    """
    mu = flat.mean(0, keepdims=True)
    z = flat - mu
    c = anchors - mu
    base = exact_sq_distances(z, c)                                               # [M, K]

    def dist(v):
        u = v - mu - c                                                     # [K, P]
        cross = jnp.dot(z, u.T, precision=lax.Precision.HIGHEST) - jnp.sum(c * u, 1)[None, :]
        return jnp.maximum(base - 2 * cross + jnp.sum(u * u, 1)[None, :], 0.0)
    return dist


def cluster_geometric_median(values, assign, previous, *, iters: int = 10, eps: float = 1e-6):
    """Geometric median per cluster, argmin_v sum_{i in S_j} ||z_i - v||, by ``iters``
    smoothed Weiszfeld steps v <- sum_i z_i / max(eps, d_i) / sum_i 1 / max(eps, d_i)
    (as RFA, Pillutla et al.), started from the cluster mean. Over all leaves jointly.

    Distances are taken exactly from each iterate (one [M, P] pass per cluster a step): an
    expansion around the starting means, which outliers pull far from the good members,
    loses float32 precision in exactly the distances the weights need."""
    def fn(flat, assign, prev):
        k = prev.shape[0]
        member = jax.nn.one_hot(assign, k, dtype=jnp.float32).T          # [K, M]
        v = jnp.dot(member / jnp.maximum(member.sum(1, keepdims=True), 1.0), flat,
                    precision=lax.Precision.HIGHEST)
        mu = flat.mean(0, keepdims=True)
        z = flat - mu

        def step(v, _):
            d = jnp.sqrt(exact_sq_distances(z, v - mu)).T                 # [K, M]
            w = member / jnp.maximum(d, eps)
            w = w / jnp.maximum(w.sum(1, keepdims=True), 1e-30)
            return jnp.dot(w, flat, precision=lax.Precision.HIGHEST), None

        return lax.scan(step, v, None, length=iters)[0]
    return _vectorwise(fn, values, assign, previous)


def cluster_krum(values, assign, previous, *, byz_frac: float = 0.1, multi: bool = False):
    """(Multi-)Krum per cluster (Blanchard et al. 2017).

    In cluster j with c_j members, f_j = floor(byz_frac * c_j) are assumed Byzantine; member
    i's score is the sum of squared distances to its c_j - f_j - 2 nearest fellow members
    (at least 1). Krum returns the lowest-score member; multi-Krum the mean of the
    c_j - f_j lowest-score members. Distances through a centred Gram matrix; [M, M] memory.
    """
    if concrete(byz_frac) and not 0 <= byz_frac < 0.5:
        raise ValueError(f"Krum's assumed Byzantine fraction must be in [0, 0.5), got {byz_frac}")

    def fn(flat, assign, prev):
        k, m = prev.shape[0], flat.shape[0]
        same = (assign[:, None] == assign[None, :]) & (assign[:, None] >= 0)
        same = same & ~jnp.eye(m, dtype=bool)
        d = jnp.where(same, sq_distances(flat, precision=lax.Precision.HIGHEST), jnp.inf)
        d = jnp.sort(d, axis=1)
        counts = _counts(assign, k)
        c_i = counts[jnp.clip(assign, 0, k - 1)]
        f_i = jnp.floor(byz_frac * c_i).astype(jnp.int32)
        near = jnp.maximum(c_i - f_i - 2, 1)
        take = jnp.arange(m)[None, :] < near[:, None]
        score = jnp.sum(jnp.where(take & jnp.isfinite(d), d, 0.0), axis=1)
        score = jnp.where(assign >= 0, score, jnp.inf)
        # rank of each member's score inside its cluster
        before = (score[None, :] < score[:, None]) | (
            (score[None, :] == score[:, None]) & (jnp.arange(m)[None, :] < jnp.arange(m)[:, None]))
        rank = jnp.sum(before & same, axis=1)
        keep_n = jnp.where(multi, c_i - f_i, 1)
        chosen = (rank < keep_n) & (assign >= 0)
        w = jax.nn.one_hot(assign, k, dtype=jnp.float32).T * chosen[None, :]
        return jnp.dot(w / jnp.maximum(w.sum(1, keepdims=True), 1.0), flat,
                       precision=lax.Precision.HIGHEST)
    return _vectorwise(fn, values, assign, previous)


def cluster_centered_clipping(values, assign, previous, *, tau: float, iters: int = 1,
                              init=None):
    """Centered clipping per cluster (Karimireddy et al. 2021):
    v <- v + (1/c_j) sum_{i in S_j} (z_i - v) min(1, tau / ||z_i - v||), ``iters`` times,
    from ``init`` [K, ...] (default ``previous``, e.g. last round's aggregate / momentum)."""
    if concrete(tau) and not tau > 0:
        raise ValueError(f"clipping radius tau must be > 0, got {tau}")
    start = flatten_stacked(previous if init is None else init, jnp.float32)

    def fn(flat, assign, prev):
        k = prev.shape[0]
        member = jax.nn.one_hot(assign, k, dtype=jnp.float32).T
        c = jnp.maximum(member.sum(1, keepdims=True), 1.0)
        dist = _distances_from(flat, start)

        def step(v, _):
            d = jnp.sqrt(dist(v)).T                                       # [K, M]
            w = member * jnp.minimum(1.0, tau / jnp.maximum(d, 1e-30)) / c
            return v + jnp.dot(w, flat, precision=lax.Precision.HIGHEST) - w.sum(1, keepdims=True) * v, None

        return lax.scan(step, start, None, length=iters)[0]
    return _vectorwise(fn, values, assign, previous)


# ---------------------------------------------------------------------- dispatch

RULES = ("mean", "median", "trimmed_mean", "geometric_median", "krum", "multi_krum",
         "centered_clipping")


def check_rule(rule: str):
    if rule not in RULES:
        raise ValueError(f"aggregation rule must be one of {RULES}, got {rule!r}")


def cluster_aggregate(rule: str, values, assign, previous, *, trim_frac: float = 0.0,
                      median: str = "mid", krum_frac: float = 0.1, clip_tau: float = 1.0,
                      clip_iters: int = 1, gm_iters: int = 10, method: str = "auto"):
    """Per-cluster aggregation by name (``RULES``); empty clusters return ``previous``."""
    check_rule(rule)
    if rule == "mean":
        return cluster_plain_mean(values, assign, previous)
    if rule == "median":
        return cluster_median(values, assign, previous, median=median, method=method)
    if rule == "trimmed_mean":
        return cluster_trimmed_mean(values, assign, previous, trim_frac, method=method)
    if rule == "geometric_median":
        return cluster_geometric_median(values, assign, previous, iters=gm_iters)
    if rule in ("krum", "multi_krum"):
        return cluster_krum(values, assign, previous, byz_frac=krum_frac, multi=rule == "multi_krum")
    return cluster_centered_clipping(values, assign, previous, tau=clip_tau, iters=clip_iters)
