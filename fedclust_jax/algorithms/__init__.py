"""Algorithms: one module per family, each an object with init / round / evaluate."""

from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.local import Local, LocalConfig

__all__ = ["FedAvg", "FedAvgConfig", "IFCA", "IFCAConfig", "Local", "LocalConfig"]
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm  # noqa: E402

__all__ += ["ALGORITHMS", "build_algorithm"]
