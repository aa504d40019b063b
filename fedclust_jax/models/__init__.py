"""Models: Flax modules wrapped as pure ``Model`` (init, apply, loss) over plain pytrees."""

from fedclust_jax.models.base import Model, from_nnx, num_params
from fedclust_jax.models.cnn import cifar_cnn, femnist_cnn
from fedclust_jax.models.flows import FlowModel, affine_flow, real_nvp
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.lstm import shakespeare_lstm
from fedclust_jax.models.mlp import mlp
from fedclust_jax.models.registry import MODELS, build_model
from fedclust_jax.models.resnet9 import StatefulModel, resnet9

__all__ = ["MODELS", "Model", "StatefulModel", "build_model", "cifar_cnn", "femnist_cnn",
           "resnet9", "shakespeare_lstm", "from_nnx", "linear_regression", "mlp", "num_params"]
__all__ += ["FlowModel", "affine_flow", "real_nvp"]
