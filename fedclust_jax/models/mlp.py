"""Multi-layer perceptron with ReLU (default 784-200-10, the IFCA / SR-FCA MNIST model)."""

from __future__ import annotations

from typing import Sequence

import jax
from flax import nnx

from fedclust_jax.models.base import DENSE_INITS, Model, dense_init_kwargs, from_nnx


class MLP(nnx.Module):
    """Dense layers ``layer0 .. layerL`` with ReLU between; inputs are flattened.

    Parameters: sum over layers of (d_in + 1) * d_out; 784-200-10 has 159,010.
    init: "flax" (LeCun-normal weights, zero biases) or "torch" (PyTorch's nn.Linear
    default, U(+-1/sqrt(fan_in)) weights and biases); see ``base.dense_init_kwargs``.
    """

    def __init__(self, sizes: Sequence[int], rngs: nnx.Rngs, init: str = "flax"):
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs, **dense_init_kwargs(init, a))
             for a, b in zip(sizes[:-1], sizes[1:])])

    def features(self, x):
        """The body: every layer but the last, each followed by ReLU -> [n, d_{L-1}]."""
        x = x.reshape(x.shape[0], -1)
        for i in range(len(self.layers) - 1):
            x = jax.nn.relu(self.layers[i](x))
        return x

    def from_features(self, h):
        """The head (the last layer) on the body's features."""
        return self.layers[len(self.layers) - 1](h)

    def __call__(self, x):
        return self.from_features(self.features(x))


def mlp(sizes: Sequence[int] = (784, 200, 10), *, task: str = "classification",
        init: str = "flax") -> Model:
    """MLP model; the last layer is the head for weight sharing.

    init: "flax" (default; the papers do not specify one) or "torch", the initialisation of
    the IFCA and SR-FCA authors' PyTorch code (``--model-arg init=torch``): uniform
    weights and biases, see ``fedclust_jax.models.base``.
    """
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"MLP sizes need >= 2 positive entries, got {sizes}")
    if init not in DENSE_INITS:
        raise ValueError(f"MLP init must be one of {DENSE_INITS}, got {init!r}")
    name = "mlp" + "-".join(map(str, sizes))
    return from_nnx(name, lambda rngs: MLP(sizes, rngs, init), task=task,
                    head=(f"layers/{len(sizes) - 2}",))
