"""Named datasets a user can pick: name -> builder(key, **params) -> FederatedData.

Every dataset, built-in or a user's, is registered through
``fedclust_jax.register_dataset``; what describes it (help, parameter meanings, paper
defaults) lives beside its builder (its docstring, ``data.defaults.paper_defaults``).
"""

from __future__ import annotations

import inspect

from fedclust_jax.describe import Registry

DATASETS = Registry("dataset")


def build_dataset(name: str, key, **params):
    """Builds dataset ``name`` with ``params``; unknown names or parameters are errors that
    list what is available."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(sorted(DATASETS))}")
    builder = DATASETS[name]
    accepted = [p for p in inspect.signature(builder).parameters if p != "key"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"dataset {name!r} has no parameter(s) {unknown}; it takes {accepted}")
    return builder(key, **params)


def _register_builtins():
    from fedclust_jax.data import leaf, points, recipes, robust_synthetic, synthetic
    from fedclust_jax.registration import register_dataset
    for name, builder in (
            ("synthetic-regression", synthetic.mixed_linear_regression),
            ("gaussian-mixture", synthetic.gaussian_mixture_classification),
            ("uifca-gaussian", points.gaussian_clusters),
            ("uifca-subspace", points.subspace_clusters),
            ("uifca-mnist", points.mnist_points),
            ("uifca-rotnet-mnist", points.rotnet_points),
            ("brifca-regression", robust_synthetic.brifca_regression),
            ("threshold-blobs", robust_synthetic.threshold_blobs),
            *recipes.RECIPES.items(),     # the papers' real-data recipes
            ("shakespeare-windows", leaf.shakespeare_windows),
            ("toy-text", leaf.toy_text)):
        register_dataset(name, builder)


_register_builtins()
