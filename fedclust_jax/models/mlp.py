"""Multi-layer perceptron with ReLU (default 784-200-10, the IFCA / SR-FCA MNIST model)."""

from __future__ import annotations

from typing import Sequence

import jax
from flax import nnx

from fedclust_jax.models.base import Model, from_nnx


class MLP(nnx.Module):
    """Dense layers ``layer0 .. layerL`` with ReLU between; inputs are flattened.

    Parameters: sum over layers of (d_in + 1) * d_out; 784-200-10 has 159,010.
    Default initialisation: LeCun normal weights, zero biases (Flax defaults).
    """

    def __init__(self, sizes: Sequence[int], rngs: nnx.Rngs):
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = jax.nn.relu(x)
        return x


def mlp(sizes: Sequence[int] = (784, 200, 10), *, task: str = "classification") -> Model:
    """MLP model; the last layer is the head for weight sharing."""
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"MLP sizes need >= 2 positive entries, got {sizes}")
    name = "mlp" + "-".join(map(str, sizes))
    return from_nnx(name, lambda rngs: MLP(sizes, rngs), task=task,
                    head=(f"layers/{len(sizes) - 2}",))
