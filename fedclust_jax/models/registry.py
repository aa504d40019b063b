"""Named models: name -> builder(data, **params) -> Model, shapes defaulted from the data."""

from __future__ import annotations

import math
from typing import Callable

from fedclust_jax.models.cnn import cifar_cnn_for, femnist_cnn_for
from fedclust_jax.models.flows import affine_flow, real_nvp
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.lstm import shakespeare_lstm_for
from fedclust_jax.models.mlp import mlp
from fedclust_jax.models.resnet9 import resnet9_for


def _linear(data, **params):
    return linear_regression(math.prod(data.feature_shape), **params)


def _mlp(data, hidden=(200,), **params):
    hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
    out = data.num_classes if data.task == "classification" else 1
    return mlp((math.prod(data.feature_shape), *hidden, out), task=data.task, **params)


def _affine_flow(data, structure="triangular", init_scale=1.0):
    return affine_flow(math.prod(data.feature_shape), structure=structure, init_scale=init_scale)


def _real_nvp(data, depth=8, hidden: int | None = None, mask="cyclic", alpha=0.05,
              dequantize=1.0 / 256, coupling="conv", conv="auto"):
    return real_nvp(tuple(data.feature_shape[:2]), depth=depth, hidden=hidden, mask=mask,
                    alpha=alpha, dequantize=dequantize, coupling=coupling, conv=conv)


MODELS: dict[str, Callable] = {"linear": _linear, "mlp": _mlp}
MODELS.update({"affine-flow": _affine_flow, "real-nvp": _real_nvp})  # point data (UIFCA)
MODELS.update({"femnist-cnn": femnist_cnn_for, "cifar-cnn": cifar_cnn_for,
               "resnet9": resnet9_for, "shakespeare-lstm": shakespeare_lstm_for})
DEFAULT_MODEL = {"regression": "linear", "classification": "mlp"}


def build_model(name: str | None, data, **params):
    """Model ``name`` (default: linear for regression, MLP 784-200-10-style for
    classification) sized for ``data``. ``params`` are the builder's keywords, e.g.
    ``init="torch"`` (PyTorch's nn.Linear initialisation) for "mlp" and "linear"
    (``--model-arg init=torch``)."""
    if name is None and data.point_cluster is not None:   # points carry clusters: a flow
        name = "real-nvp" if len(data.feature_shape) == 2 else "affine-flow"
    name = name or DEFAULT_MODEL[data.task]
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(sorted(MODELS))}")
    try:
        return MODELS[name](data, **params)
    except TypeError as e:
        raise ValueError(f"bad parameters for model {name!r}: {e}") from None
