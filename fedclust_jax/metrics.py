"""Metrics on a run's outcome (host-side numpy: computed once per evaluation, not per round).

Clustering metrics take ``found`` (int[N], -1 = unassigned) and ``true`` (int[N], -1 =
unknown; such clients are left out).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

PARAM_MATCHINGS = ("hungarian", "nearest")


def _known(found, true):
    found, true = np.asarray(found), np.asarray(true)
    keep = true >= 0
    return found[keep], true[keep]


def contingency(found, true) -> np.ndarray:
    """[found clusters (+1 row for unassigned), true clusters] counts."""
    found, true = _known(found, true)
    f_ids = np.unique(found)
    table = np.zeros((len(f_ids), int(true.max()) + 1 if len(true) else 0), np.int64)
    np.add.at(table, (np.searchsorted(f_ids, found), true), 1)
    return table


def misclustering(found, true) -> float:
    """Fraction of clients outside their true cluster under the best one-to-one matching of
    found clusters to true clusters (Hungarian). Found clusters may outnumber true ones:
    extra clusters match nothing, their clients count as errors; unassigned (-1) clients
    are always errors."""
    f, t = _known(found, true)
    if len(t) == 0:
        return float("nan")
    f = np.where(f < 0, -1, f)
    assigned = f >= 0
    if not assigned.any():
        return 1.0
    table = contingency(f[assigned], t[assigned])
    rows, cols = linear_sum_assignment(-table)
    return 1.0 - table[rows, cols].sum() / len(t)


def adjusted_rand_index(found, true) -> float:
    """Adjusted Rand index (Hubert and Arabie) between two labelings; unassigned clients
    form one group of their own. 1 = identical partitions, about 0 = chance."""
    f, t = _known(found, true)
    n = len(t)
    if n < 2:
        return 1.0
    _, f = np.unique(f, return_inverse=True)
    table = np.zeros((f.max() + 1, t.max() + 1), np.int64)
    np.add.at(table, (f, t), 1)
    comb = lambda a: (a * (a - 1) / 2.0).sum()
    index, a, b = comb(table), comb(table.sum(1)), comb(table.sum(0))
    expected = a * b / (n * (n - 1) / 2.0)
    top = (a + b) / 2.0
    if top == expected:
        return 1.0
    return float((index - expected) / (top - expected))


def _estimate_truth_distances(estimates, truth) -> np.ndarray:
    """[K, k] Euclidean distances between flattened estimates [K, ...] and truth [k, ...]."""
    est = np.asarray(estimates, np.float64).reshape(len(estimates), -1)
    tru = np.asarray(truth, np.float64).reshape(len(truth), -1)
    return np.linalg.norm(est[:, None, :] - tru[None, :, :], axis=-1)


def matched_distances(estimates, truth) -> np.ndarray:
    """||theta_hat_pi(j) - theta*_j|| for each truth j [k], under the one-to-one (Hungarian)
    matching pi of estimates [K, d] (K >= k) to truth [k, d] minimising their sum; NaN
    everywhere when an estimate is not finite."""
    if len(estimates) < len(truth):
        raise ValueError(f"{len(estimates)} estimates cannot be matched one-to-one to "
                         f"{len(truth)} truths")
    dist = _estimate_truth_distances(estimates, truth)
    if not np.isfinite(dist).all():
        return np.full(len(truth), np.nan)
    rows, cols = linear_sum_assignment(dist)
    return dist[rows, cols][np.argsort(cols)]


def parameter_error(estimates, truth, matching: str = "hungarian") -> float:
    """(1/k) sum_j ||theta_hat_pi(j) - theta*_j|| for estimates [K, d], truth [k, d].

    matching="hungarian": a one-to-one matching pi (K >= k) minimising the sum (default).
    matching="nearest": (1/K) sum over estimates of the distance to the nearest theta*, as
    the IFCA authors' code (may use one theta* twice).
    """
    if matching not in PARAM_MATCHINGS:
        raise ValueError(f"matching must be one of {PARAM_MATCHINGS}, got {matching!r}")
    if matching == "hungarian":
        return float(matched_distances(estimates, truth).mean())
    dist = _estimate_truth_distances(estimates, truth)
    return float(dist.min(axis=1).mean()) if np.isfinite(dist).all() else float("nan")


def client_mean(values, count=None) -> float:
    """Per-client average of a per-client metric, ignoring NaN and clients with no data."""
    v = np.asarray(values, np.float64)
    keep = ~np.isnan(v)
    if count is not None:
        keep &= np.asarray(count) > 0
    return float(v[keep].mean()) if keep.any() else float("nan")


def purity(found, true) -> float:
    """Cluster purity (1/m) sum_c max_y |S_c intersect S_y| ([T] 4.3's "cluster accuracy").

    found, true: int arrays of any (equal) shape, e.g. per-point [N, n_max]; entries with
    true < 0 (unknown, padding) are left out; found < 0 (unassigned) points count as wrong.
    1 for a perfect assignment, invariant to relabelling, and at least the largest true
    class's share when every point is assigned (K = 1 gives exactly that share).
    """
    f, t = np.asarray(found).ravel(), np.asarray(true).ravel()
    keep = t >= 0
    f, t = f[keep], t[keep]
    if len(t) == 0:
        return float("nan")
    assigned = f >= 0
    if not assigned.any():
        return 0.0
    table = contingency(f[assigned], t[assigned])
    return float(table.max(axis=1).sum() / len(t))
