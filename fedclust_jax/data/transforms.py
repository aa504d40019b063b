"""Cluster transforms of the papers' recipes, on numpy batches.

Images are ``[n, H, W, C]`` (channels last); labels int ``[n]``.
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class ClusterTransform:
    """One cluster's transform as data: rotation by ``rot`` x 90 degrees (counter-clockwise,
    as ``rotate90``), then inversion ``invert - x`` when ``invert`` is not None (the maximum
    pixel value: 1.0 on [0, 1] pixels, 255.0 on raw bytes), and labels y -> (y +
    ``label_shift``) mod ``num_classes``. Called on numpy batches ``(x [n, H, W, C], y [n])``
    it returns the transformed pair; ``FederatedViews`` applies the same table on read."""

    rot: int = 0
    invert: float | None = None
    label_shift: int = 0
    num_classes: int = 10

    def __call__(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.rot % 4:
            x = rotate90(x, self.rot)
        if self.invert is not None:
            x = invert(x, self.invert)
        if self.label_shift % self.num_classes:
            y = shift_labels(y, self.label_shift, self.num_classes)
        return x, y


def pixel_permutation(height: int, width: int, k: int) -> np.ndarray:
    """int32[height * width]: source pixel (row-major) of each pixel of the image rotated by
    k x 90 degrees, so ``img.reshape(H * W, C)[perm]`` equals ``rotate90`` of ``img``."""
    if k % 2 and height != width:
        raise ValueError(f"odd quarter turns need square images, got {height}x{width}")
    return np.rot90(np.arange(height * width).reshape(height, width), k % 4).reshape(-1) \
        .astype(np.int32)
