"""Threshold-Clustering (TC, Alg. 3 of the threshold-clustering paper) over vectors, jit-able.

Used by Federated-Clustering (K = 1 per client, over its group's gradients) and
Momentum-Clustering (K centers over all clients' momenta).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from fedclust_jax.core.pairwise import exact_sq_distances
from fedclust_jax.core.traced import concrete


def check_radius(radius, quantile):
    """Raises unless exactly one of a fixed radius tau > 0 and a radius quantile in (0, 1]
    is set."""
    if (radius is None) == (quantile is None):
        raise ValueError("set exactly one of radius (fixed tau) and radius_quantile")
    if radius is not None and not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if quantile is not None and not 0 < quantile <= 1:
        raise ValueError(f"radius_quantile must be in (0, 1], got {quantile}")


TC_METHODS = ("points", "gram")


def threshold_clustering(points, centers, *, iters: int, radius=None, quantile=None,
                         mask=None, method: str = "points"):
    """Threshold-Clustering (Alg. 3 of the threshold-clustering paper).

    points z [N, P]; centers v [K, P] (initialisation); for l = 1..iters and every k:
      tau_{k,l} = ``radius`` (fixed, scalar or [K]) or the ``quantile`` of {||z_i - v_k||}_i,
      v_k <- (1/N) sum_i (z_i if ||z_i - v_k|| <= tau else v_k)
          =  v_k + (1/N) sum_{i inside} (z_i - v_k).
    ``radius`` and ``quantile`` may be traced scalars. Divides by N, not by the inside
    count (the paper's rule). ``mask`` bool[N] restricts
    the points (N is then the mask's count, e.g. a random subgroup; rows outside it must
    still be finite). Returns v [K, P].

    ``method`` (same result up to float32 rounding):
      "points": every iteration reads z twice (distances, update): iters x 2 passes over
        [N, P], memory-bound on a CPU.
      "gram": v_k = a_k v0_k + sum_i c_ki z_i stays in the span of its start and the points,
        so the iterations run on (a [K], c [K, N]) with distances from the Gram matrix of the
        mean-centred points: one [N, P] x [P, N] product, O(iters N^2 K) iterations, one
        [K, N] x [N, P] product at the end. Fewer passes over [N, P] when N is small
        against P (FC's subgroups).
        tests/core/test_threshold_clustering.py checks that the two agree.
    """
    if (radius is None) == (quantile is None):
        raise ValueError("threshold_clustering needs exactly one of radius or quantile")
    if quantile is not None and concrete(quantile) and not 0 <= quantile <= 1:
        raise ValueError(f"radius quantile must be in [0, 1], got {quantile}")
    if method not in TC_METHODS:
        raise ValueError(f"TC method must be one of {TC_METHODS}, got {method!r}")
    mask = jnp.ones(points.shape[0], bool) if mask is None else mask
    z = points.astype(jnp.float32)
    v0 = centers.astype(jnp.float32)
    n = jnp.maximum(mask.sum(), 1).astype(jnp.float32)

    def inside(d):                                                        # d [N, K] -> [K, N]
        if quantile is not None:
            tau = _masked_quantile(d, mask, quantile)                     # [K]
        else:
            tau = jnp.broadcast_to(jnp.asarray(radius, jnp.float32), (v0.shape[0],))
        return ((d <= tau[None, :]) & mask[:, None]).astype(jnp.float32).T

    if method == "points":
        def step(v, _):
            w = inside(jnp.sqrt(exact_sq_distances(z, v)))
            return v + (jnp.dot(w, z, precision=lax.Precision.HIGHEST) - w.sum(1, keepdims=True) * v) / n, None

        return lax.scan(step, v0, None, length=iters)[0]

    hi = lax.Precision.HIGHEST
    mu = jnp.dot(mask.astype(jnp.float32), z, precision=hi) / n           # centre: float32 keeps
    zc = jnp.where(mask[:, None], z - mu, 0.0)                            # its precision under a
    vc = v0 - mu                                                          # shared offset
    gram = jnp.dot(zc, zc.T, precision=hi)                                # [N, N]
    zv = jnp.dot(vc, zc.T, precision=hi)                                  # [K, N]
    vv = jnp.sum(vc * vc, axis=1)                                         # [K]

    def step_gram(carry, _):
        a, c = carry                                                      # [K], [K, N]
        gc = jnp.dot(c, gram, precision=hi)                               # [K, N]
        cgc = jnp.sum(c * gc, 1) + a * a * vv + 2 * a * jnp.sum(c * zv, 1)   # ||v_k - mu||^2
        d2 = jnp.diagonal(gram)[None, :] - 2 * (gc + a[:, None] * zv) + cgc[:, None]
        w = inside(jnp.sqrt(jnp.maximum(d2, 0.0)).T)
        keep = 1 - w.sum(1) / n
        return (a * keep, c * keep[:, None] + w / n), None

    k = v0.shape[0]
    a, c = lax.scan(step_gram, (jnp.ones(k), jnp.zeros((k, z.shape[0]))), None, length=iters)[0]
    # a + sum_i c_i = 1 at every step, so v = mu + a (v0 - mu) + sum_i c_i (z_i - mu)
    return mu + a[:, None] * vc + jnp.dot(c, zc, precision=hi)


def _masked_quantile(d, mask, q):
    """Per column of d [N, K]: the q-quantile (linear interpolation) over rows in mask."""
    s = jnp.sort(jnp.where(mask[:, None], d, jnp.inf), axis=0)
    c = mask.sum()
    pos = q * (c - 1).astype(jnp.float32)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(c - 1, 0))
    frac = pos - lo
    return s[lo] * (1 - frac) + jnp.where(frac > 0, s[hi], 0.0) * frac
