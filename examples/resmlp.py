"""A user model written with Flax NNX: one file, one registration.

A residual MLP: an input layer, ``depth`` residual blocks h + relu(W h), and a linear head.
``from_nnx`` splits the module once into its graph and its params (a plain pytree), so the
package trains, averages and vmaps the params like any built-in model's. The methods
``features`` (the body) and ``from_features`` (the head) let IFCA's weight sharing share the
body across clusters.
"""

from __future__ import annotations

import math

import jax
from flax import nnx

from fedclust_jax import register_model
from fedclust_jax import Count, Size
from fedclust_jax.models.base import from_nnx


class ResMLP(nnx.Module):
    def __init__(self, d_in: int, width: int, depth: int, d_out: int, rngs: nnx.Rngs):
        self.inp = nnx.Linear(d_in, width, rngs=rngs)
        self.blocks = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])
        self.head = nnx.Linear(width, d_out, rngs=rngs)

    def features(self, x):
        h = jax.nn.relu(self.inp(x.reshape(x.shape[0], -1)))
        for block in self.blocks:
            h = h + jax.nn.relu(block(h))
        return h

    def from_features(self, h):
        return self.head(h)

    def __call__(self, x):
        return self.from_features(self.features(x))


def resmlp(data, width: Size = 32, depth: Count = 2):
    """A residual MLP sized for ``data``: inputs from its feature shape, outputs its
    classes (or 1 for regression).

    width: hidden units; depth: residual blocks."""
    if width < 1 or depth < 0:
        raise ValueError(f"resmlp needs width >= 1 and depth >= 0, got {width}, {depth}")
    d_in = math.prod(data.feature_shape)
    d_out = data.num_classes if data.task == "classification" else 1
    return from_nnx("resmlp", lambda rngs: ResMLP(d_in, width, depth, d_out, rngs),
                    task=data.task, head=("head",))


register_model("resmlp", resmlp, replace=True)
