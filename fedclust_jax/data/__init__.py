"""Federated data: the padded ``FederatedData`` pytree, generators, recipes and loaders.

A dataset plugin builds its clients with ``from_client_lists`` from arrays that the
standard loaders return (``load_images``, ``load_digits_images``: ``data.sources``;
``load_leaf_clients``: ``data.leaf``), looking for files where ``resolve_data_dir`` points.
"""

from fedclust_jax.data.federated import FederatedData, example_mask, from_client_lists
from fedclust_jax.data.registry import DATASETS, build_dataset
from fedclust_jax.data.leaf import load_leaf_clients
from fedclust_jax.data.sources import (DataFormatError, DataNotFoundError, load_digits_images,
                                       load_images, resolve_data_dir)
from fedclust_jax.data.synthetic import gaussian_mixture_classification, mixed_linear_regression
from fedclust_jax.data.points import gaussian_clusters, subspace_clusters

__all__ = ["DATASETS", "DataFormatError", "DataNotFoundError",
           "FederatedData", "build_dataset", "example_mask", "from_client_lists",
           "gaussian_mixture_classification", "mixed_linear_regression"]
__all__ += ["gaussian_clusters", "subspace_clusters"]
__all__ += ["load_digits_images", "load_images", "load_leaf_clients", "resolve_data_dir"]
