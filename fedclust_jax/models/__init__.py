"""Models: Flax modules wrapped as pure ``Model`` (init, apply, loss) over plain pytrees."""

from fedclust_jax.models.base import Model, from_nnx, num_params
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.mlp import mlp
from fedclust_jax.models.registry import MODELS, build_model

__all__ = ["MODELS", "Model", "build_model", "from_nnx", "linear_regression", "mlp", "num_params"]
