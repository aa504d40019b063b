"""Which clients are Byzantine: the last ``round(byz_frac * N)`` clients (a static set).

Generators that simulate Byzantine data (``fedclust_jax.data.robust_synthetic``) append the
Byzantine clients after the honest ones, with true cluster -1, so this rule finds them.
"""

from __future__ import annotations

import math

import jax.numpy as jnp


def num_byzantine(num_clients: int, byz_frac: float) -> int:
    """m_b = round(byz_frac * N) (half up); errors if byz_frac is outside [0, 1) or no
    honest client would remain."""
    if not 0 <= byz_frac < 1:
        raise ValueError(f"byz_frac (Byzantine fraction) must be in [0, 1), got {byz_frac}")
    b = int(math.floor(byz_frac * num_clients + 0.5))
    if b >= num_clients:
        raise ValueError(f"byz_frac = {byz_frac} makes {b} of {num_clients} clients Byzantine; "
                         "at least one client must be honest")
    return b


def byzantine_mask(num_clients: int, byz_frac: float):
    """bool[N]: True for the last ``num_byzantine`` clients."""
    b = num_byzantine(num_clients, byz_frac)
    return jnp.arange(num_clients) >= num_clients - b
