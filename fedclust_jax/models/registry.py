"""Named models: name -> builder(data, **params) -> Model, shapes defaulted from the data.

Every model, built-in or a user's, is registered through ``register_model`` (the public
``fedclust_jax.register_model``);
its help and parameter meanings are its builder's docstring (``fedclust_jax.describe``).
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Sequence

from fedclust_jax.describe import Registry
from fedclust_jax.models.cnn import cifar_cnn_for, femnist_cnn_for
from fedclust_jax.models.flows import affine_flow, real_nvp
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.lstm import shakespeare_lstm_for
from fedclust_jax.models.mlp import mlp
from fedclust_jax.models.resnet9 import resnet9_for
from fedclust_jax.bounds import Count, Positive, Size

MODELS = Registry("model")
DEFAULT_MODEL = {"regression": "linear", "classification": "mlp"}


def register_model(name: str, builder: Callable, *, help: str = "", replace: bool = False):
    """Registers ``builder(data, **params) -> Model`` under ``name``; returns it.

    help: the one-line help (default: the first sentence of the builder's docstring);
    parameter meanings come from the builder's docstring (``fedclust_jax.describe``)."""
    MODELS.check_name(name, replace)
    if not callable(builder) or next(iter(inspect.signature(builder).parameters), None) != "data":
        raise ValueError(f"model {name!r}: the builder must be a function whose first "
                         "parameter is `data` (builder(data, **params) -> Model)")
    text = MODELS.help_for(name, help, builder)
    MODELS[name] = builder
    MODELS.help[name] = text
    return builder


def linear_for(data, init: str = "bernoulli", init_scale: float = 1.0):
    """Linear regression y = <x, theta> over the data's flattened features (IFCA's
    synthetic model, no bias).

    init: initial theta, "bernoulli" (IFCA's Bernoulli(0.5)^d), "normal", "torch"
    (PyTorch's nn.Linear default) or "zeros" (``models.linear``);
    init_scale: factor on the initial theta."""
    return linear_regression(math.prod(data.feature_shape), init=init, init_scale=init_scale)


def mlp_for(data, hidden: Sequence[Size] | Size = (200,), init: str = "flax"):
    """Multi-layer perceptron with ReLU from the flattened inputs to the data's classes (1
    output for regression); 784-200-10 is IFCA's and SR-FCA's MNIST model.

    hidden: hidden layer widths (the input and output sizes come from the data);
    init: "flax" (LeCun-normal weights) or "torch" (PyTorch's nn.Linear default, the
    authors' code)."""
    hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
    out = data.num_classes if data.task == "classification" else 1
    return mlp((math.prod(data.feature_shape), *hidden, out), task=data.task, init=init)


def affine_flow_for(data, structure: str = "triangular", init_scale: float = 1.0):
    """Affine flow (a learned Gaussian) on the points' flattened features, UIFCA's model
    for continuous points.

    structure: the linear map's form, "triangular" or "full";
    init_scale: scale of the initial map."""
    return affine_flow(math.prod(data.feature_shape), structure=structure, init_scale=init_scale)


def real_nvp_for(data, depth: Count = 8, hidden: Size | None = None, mask: str = "cyclic",
                 alpha: Positive = 0.05, dequantize: float = 1.0 / 256, coupling: str = "conv",
                 conv: str = "auto"):
    """RealNVP flow on the points' images (H, W), UIFCA's model for images.

    depth: number of affine couplings; hidden: width of each coupling network (None: 32
    channels for "conv", 128 units for "mlp"); mask: which pixels condition each coupling,
    "cyclic" (the thesis's setting) or "checkerboard"; alpha: the logit transform's
    logit(alpha + (1 - 2 alpha) x), in (0, 0.5); dequantize: width of the uniform noise
    added to the pixels; coupling: the coupling networks, "conv" (convolutions) or "mlp";
    conv: how convolutions run, "auto", "native" or "patches" (``models.layers``)."""
    return real_nvp(tuple(data.feature_shape[:2]), depth=depth, hidden=hidden, mask=mask,
                    alpha=alpha, dequantize=dequantize, coupling=coupling, conv=conv)


def build_model(name: str | None, data, **params):
    """Model ``name`` (default: linear for regression, MLP 784-200-10-style for
    classification, a flow for data whose points carry clusters) sized for ``data``.
    ``params`` are the builder's keywords, e.g. ``init="torch"`` (PyTorch's nn.Linear
    initialisation) for "mlp" and "linear" (``--model-arg init=torch``)."""
    if name is None and data.point_cluster is not None:   # points carry clusters: a flow
        name = "real-nvp" if len(data.feature_shape) == 2 else "affine-flow"
    name = name or DEFAULT_MODEL[data.task]
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(sorted(MODELS))}")
    try:
        return MODELS[name](data, **params)
    except TypeError as e:
        raise ValueError(f"bad parameters for model {name!r}: {e}") from None


def _register_builtins():
    for name, builder in (("linear", linear_for), ("mlp", mlp_for),
                          ("affine-flow", affine_flow_for), ("real-nvp", real_nvp_for),
                          ("femnist-cnn", femnist_cnn_for), ("cifar-cnn", cifar_cnn_for),
                          ("resnet9", resnet9_for), ("shakespeare-lstm", shakespeare_lstm_for)):
        register_model(name, builder)


_register_builtins()
