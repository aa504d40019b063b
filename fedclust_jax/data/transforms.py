"""Cluster transforms of the papers' recipes, on numpy batches.

Images are ``[n, H, W, C]`` (channels last); labels int ``[n]``.
"""

from __future__ import annotations

import numpy as np


def rotate90(x: np.ndarray, k: int) -> np.ndarray:
    """Rotates every image of ``x`` [n, H, W, C] by k * 90 degrees (counter-clockwise, as
    ``np.rot90`` / ``torch.rot90`` on the spatial axes). k = 4 is the identity."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ValueError(f"rotate90 needs images [n, H, W, C], got shape {x.shape}")
    if k % 2 and x.shape[1] != x.shape[2]:
        raise ValueError(f"odd quarter turns need square images, got {x.shape[1:3]}")
    return np.ascontiguousarray(np.rot90(x, k % 4, axes=(1, 2)))


def invert(x: np.ndarray, max_value: float = 1.0) -> np.ndarray:
    """Pixel inversion ``max_value - x`` (1 - x on [0, 1] pixels; the SR-FCA code's 255 - x on
    raw 0..255 values with max_value = 255). An involution."""
    return (max_value - np.asarray(x)).astype(np.asarray(x).dtype)


def shift_labels(y: np.ndarray, shift: int, num_classes: int) -> np.ndarray:
    """Private label map y -> (y + shift) mod num_classes (a bijection of the classes)."""
    y = np.asarray(y)
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got {y.min()}..{y.max()}")
    return ((y + shift) % num_classes).astype(y.dtype)


def label_subset_mask(y: np.ndarray, classes) -> np.ndarray:
    """bool[n]: True where y is in ``classes``."""
    return np.isin(np.asarray(y), np.asarray(list(classes)))
