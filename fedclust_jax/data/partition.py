"""Generic partitioners for a user's own studies: IID shards, Dirichlet label skew, natural
ids. Each returns a list (one entry per client) of int index arrays into the examples.
"""

from __future__ import annotations

import numpy as np


def iid_shards(num_examples: int, num_clients: int, rng: np.random.Generator,
               per_client: int | None = None) -> list[np.ndarray]:
    """Shuffles range(num_examples) and cuts disjoint shards of ``per_client`` examples
    (default num_examples // num_clients; the remainder is dropped)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    per = num_examples // num_clients if per_client is None else per_client
    if per < 1 or per * num_clients > num_examples:
        raise ValueError(f"cannot cut {num_clients} shards of {per} from {num_examples} examples")
    perm = rng.permutation(num_examples)[: per * num_clients]
    return list(perm.reshape(num_clients, per))


def dirichlet_proportions(num_clients: int, num_classes: int, alpha: float,
                          rng: np.random.Generator) -> np.ndarray:
    """[num_clients, num_classes]: for each class, its split over clients ~ Dir(alpha 1)
    (columns sum to 1). Small alpha = strong label skew."""
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    return rng.dirichlet(np.full(num_clients, alpha), size=num_classes).T


def split_by_proportions(labels: np.ndarray, proportions: np.ndarray,
                         rng: np.random.Generator) -> list[np.ndarray]:
    """Deals each class's examples (shuffled) to clients in ``proportions[:, class]``
    fractions. Every example goes to exactly one client."""
    labels = np.asarray(labels)
    n_clients, n_classes = proportions.shape
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in range(n_classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(proportions[:, c]) * len(idx)).round().astype(int)[:-1]
        for i, chunk in enumerate(np.split(idx, cuts)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.zeros(0, int) for p in parts]


def dirichlet_label_skew(labels: np.ndarray, num_clients: int, alpha: float,
                         rng: np.random.Generator, num_classes: int | None = None,
                         proportions: np.ndarray | None = None):
    """Dirichlet label-skew partition (Hsu et al. 2019). Returns (parts, proportions); pass
    the proportions back to split a test set with the same per-client label mix."""
    labels = np.asarray(labels)
    k = int(labels.max()) + 1 if num_classes is None else num_classes
    if proportions is None:
        proportions = dirichlet_proportions(num_clients, k, alpha, rng)
    return split_by_proportions(labels, proportions, rng), proportions


def natural_clients(ids) -> tuple[np.ndarray, list[np.ndarray]]:
    """Groups examples by a natural id (writer, speaker): returns (unique ids in order of
    first appearance, index arrays)."""
    ids = np.asarray(ids)
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    groups = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    parts = np.split(groups, bounds)
    return uniq[order], [parts[j] for j in order]
