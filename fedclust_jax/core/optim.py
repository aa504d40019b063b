"""The one optimizer factory: a name and a step size -> an optax transformation."""

from __future__ import annotations

import optax

OPTIMIZERS = ("sgd", "adam")


def check_optimizer(name: str):
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def make_optimizer(name: str, lr, *, momentum: float = 0.0, b1: float = 0.9,
                   b2: float = 0.999) -> optax.GradientTransformation:
    """"sgd" (heavy-ball ``momentum`` when > 0) or "adam" (``b1``, ``b2``; optax defaults
    0.9, 0.999) with step size ``lr`` (a float or a traced scalar); ``momentum`` may be traced."""
    check_optimizer(name)
    if name == "adam":
        return optax.adam(lr, b1=b1, b2=b2)
    plain = isinstance(momentum, (int, float)) and momentum == 0
    return optax.sgd(lr, momentum=None if plain else momentum)
