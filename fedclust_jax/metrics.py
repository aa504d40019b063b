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
    return misclustering_from_table(table_with_unassigned(found, true))


def adjusted_rand_index(found, true) -> float:
    """Adjusted Rand index (Hubert and Arabie) between two labelings; unassigned clients
    form one group of their own. 1 = identical partitions, about 0 = chance."""
    return ari_from_table(table_with_unassigned(found, true))


def table_with_unassigned(found, true) -> np.ndarray:
    """[found clusters + 1, true clusters] counts over the entries with true >= 0; the
    last row counts the unassigned (found < 0) ones."""
    f, t = _known(found, true)
    f = np.where(f < 0, -1, f)
    _, f = np.unique(np.concatenate([[-1], f]), return_inverse=True)
    f = f[1:] - 1                                  # -1 stays -1, found ids become 0..
    rows = int(f.max()) + 2 if len(f) else 1
    table = np.zeros((rows, int(t.max()) + 1 if len(t) else 0), np.int64)
    np.add.at(table, (np.where(f < 0, rows - 1, f), t), 1)
    return table


def misclustering_from_table(table) -> float:
    """``misclustering`` from a [found + 1, true] table whose last row is the unassigned
    (``table_with_unassigned``, or the per-round tables the runner records)."""
    table = np.asarray(table, np.int64)
    n = int(table.sum())
    if n == 0:
        return float("nan")
    assigned = table[:-1]
    assigned = assigned[assigned.sum(1) > 0]
    if len(assigned) == 0:
        return 1.0
    rows, cols = linear_sum_assignment(-assigned)
    return float(1.0 - assigned[rows, cols].sum() / n)


def ari_from_table(table) -> float:
    """``adjusted_rand_index`` from a [found (+ unassigned), true] contingency table."""
    table = np.asarray(table, np.float64)
    n = table.sum()
    if n < 2:
        return 1.0
    comb = lambda a: (a * (a - 1) / 2.0).sum()
    index, a, b = comb(table), comb(table.sum(1)), comb(table.sum(0))
    expected = a * b / (n * (n - 1) / 2.0)
    top = (a + b) / 2.0
    if top == expected:
        return 1.0
    return float((index - expected) / (top - expected))


def purity_from_table(table) -> float:
    """``purity`` from a [found + 1, true] table whose last row is the unassigned."""
    table = np.asarray(table, np.int64)
    n = int(table.sum())
    if n == 0:
        return float("nan")
    return float(table[:-1].max(axis=1, initial=0).sum() / n) if len(table) > 1 else 0.0


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
