"""Named datasets a user can pick: name -> builder(key, **params) -> FederatedData."""

from __future__ import annotations

from typing import Callable

from fedclust_jax.data import points, synthetic
from fedclust_jax.data import robust_synthetic
from fedclust_jax.data.recipes import RECIPES

DATASETS: dict[str, Callable] = {
    "synthetic-regression": synthetic.mixed_linear_regression,
    "gaussian-mixture": synthetic.gaussian_mixture_classification,
    "uifca-gaussian": points.gaussian_clusters,
    "uifca-subspace": points.subspace_clusters,
    "uifca-mnist": points.mnist_points,
    "uifca-rotnet-mnist": points.rotnet_points,
    "brifca-regression": robust_synthetic.brifca_regression,
    "threshold-blobs": robust_synthetic.threshold_blobs,
}

DATASETS.update(RECIPES)  # the papers' real-data recipes (fedclust_jax.data.recipes)


def build_dataset(name: str, key, **params):
    """Builds dataset ``name`` with ``params``; unknown names or parameters are errors that
    list what is available."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(sorted(DATASETS))}")
    builder = DATASETS[name]
    import inspect
    accepted = [p for p in inspect.signature(builder).parameters if p != "key"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"dataset {name!r} has no parameter(s) {unknown}; it takes {accepted}")
    return builder(key, **params)

from fedclust_jax.data.leaf import shakespeare_windows, toy_text  # noqa: E402

DATASETS.update({"shakespeare-windows": shakespeare_windows, "toy-text": toy_text})
