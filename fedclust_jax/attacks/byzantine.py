"""Which clients are Byzantine: the last ``round(byz_frac * N)`` clients (a static set).

The rule lives with the generators that simulate Byzantine data
(``fedclust_jax.data.robust_synthetic``: Byzantine clients after the honest ones, true
cluster -1), the lowest layer that needs it; attacks read it from there.
"""

from __future__ import annotations

import jax.numpy as jnp

from fedclust_jax.data.robust_synthetic import num_byzantine

__all__ = ["byzantine_mask", "num_byzantine"]


def byzantine_mask(num_clients: int, byz_frac: float):
    """bool[N]: True for the last ``num_byzantine`` clients."""
    b = num_byzantine(num_clients, byz_frac)
    return jnp.arange(num_clients) >= num_clients - b
