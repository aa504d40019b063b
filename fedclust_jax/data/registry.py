"""Named datasets a user can pick: name -> builder(key, **params) -> FederatedData.

Every dataset, built-in or a user's, is registered through ``register_dataset`` (the
public ``fedclust_jax.register_dataset``); what describes it (help, parameter meanings, paper
defaults) lives beside its builder (its docstring, ``data.defaults.paper_defaults``).
"""

from __future__ import annotations

import inspect
from typing import Callable

from fedclust_jax.data.defaults import DatasetDefaults
from fedclust_jax.describe import Registry

DATASETS = Registry("dataset")


def register_dataset(name: str, builder: Callable, *, help: str = "", defaults=None,
                     replace: bool = False):
    """Registers ``builder(key, **params) -> FederatedData`` under ``name``; returns it.

    help: the one-line help (default: the first sentence of the builder's docstring);
    parameter meanings come from the builder's docstring (``fedclust_jax.describe``).
    defaults: a ``DatasetDefaults`` (what ``--dataset NAME`` runs; default: the one
    ``@paper_defaults`` declared on the builder, else the builder's own parameters with
    FedAvg and Local)."""
    DATASETS.check_name(name, replace)
    if not callable(builder) or next(iter(inspect.signature(builder).parameters), None) != "key":
        raise ValueError(f"dataset {name!r}: the builder must be a function whose first "
                         "parameter is `key` (builder(key, **params) -> FederatedData)")
    defaults = defaults if defaults is not None else getattr(builder, "paper_defaults", None)
    if defaults is not None and not isinstance(defaults, DatasetDefaults):
        raise ValueError(f"dataset {name!r}: defaults must be a "
                         f"fedclust_jax.DatasetDefaults, got {type(defaults).__name__}")
    text = DATASETS.help_for(name, help, builder)
    DATASETS[name] = builder
    DATASETS.help[name], DATASETS.defaults[name] = text, defaults
    return builder


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
