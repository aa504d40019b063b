"""Linear regression y = <x, theta> (no bias), the IFCA synthetic model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from fedclust_jax.models.base import Model, from_nnx, torch_uniform

LINEAR_INITS = ("zeros", "normal", "bernoulli", "torch")


class LinearRegression(nnx.Module):
    """theta: [d]; f(x) = x @ theta. Parameter count: d."""

    def __init__(self, dim: int, init: str, scale: float, rngs: nnx.Rngs):
        key = rngs.params()
        if init == "zeros":
            theta = jnp.zeros((dim,))
        elif init == "normal":
            theta = scale * jax.random.normal(key, (dim,)) / jnp.sqrt(dim)
        elif init == "torch":
            theta = scale * torch_uniform(dim)(key, (dim,))
        else:
            theta = scale * jax.random.bernoulli(key, 0.5, (dim,)).astype(jnp.float32)
        self.theta = nnx.Param(theta)

    def __call__(self, x):
        return x @ self.theta[...]


def linear_regression(dim: int, *, init: str = "bernoulli", init_scale: float = 1.0) -> Model:
    """Linear model over d features.

    init: "bernoulli" (Bernoulli(0.5)^d times ``init_scale``; the IFCA paper's random
    initialisation, unscaled as in the authors' code when init_scale = 1), "normal"
    (N(0, init_scale^2 / d) per coordinate), "torch" (PyTorch's ``nn.Linear(d, 1,
    bias=False)`` default, U(+-1/sqrt(d)) per coordinate, times ``init_scale``) or "zeros".
    """
    if init not in LINEAR_INITS:
        raise ValueError(f"linear init must be one of {LINEAR_INITS}, got {init!r}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return from_nnx(f"linear{dim}", lambda rngs: LinearRegression(dim, init, init_scale, rngs),
                    task="regression", head=("theta",))
