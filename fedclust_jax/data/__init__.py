"""Federated data: the padded ``FederatedData`` pytree, generators, recipes and loaders."""

from fedclust_jax.data.federated import FederatedData, example_mask, from_client_lists
from fedclust_jax.data.registry import DATASETS, build_dataset
from fedclust_jax.data.sources import DataFormatError, DataNotFoundError
from fedclust_jax.data.synthetic import gaussian_mixture_classification, mixed_linear_regression
from fedclust_jax.data.points import gaussian_clusters, subspace_clusters

__all__ = ["DATASETS", "DataFormatError", "DataNotFoundError",
           "FederatedData", "build_dataset", "example_mask", "from_client_lists",
           "gaussian_mixture_classification", "mixed_linear_regression"]
__all__ += ["gaussian_clusters", "subspace_clusters"]
