"""Byzantine behaviours: which clients are Byzantine, which cluster they join, what they send.

``Attack`` (a frozen config) bundles one behaviour; algorithms call, in a round:
  ``eval_params(params)``        where Byzantine clients evaluate losses/gradients
                                 (the outlier attack: at scale * theta_j, scale = 3)
  ``flip_labels(y, byz)``        label flip, applied to the Byzantine clients' data
  ``place(assign, byz, k)``      the cluster each Byzantine client claims
  ``corrupt(key, g, assign, byz, k)``  the uploads they send
Attacks (``ATTACKS``):
  none        honest behaviour
  outlier     BR-IFCA paper: own data from theta_b with ||theta_b|| = 3 (the data generator
              ``brifca_regression`` makes it), cluster chosen by loss and gradient taken at
              3 theta_j (as the authors' code)
  sign_flip   -scale * own gradient          scaling    scale * own gradient
  gaussian    N(0, std^2 I)                  label_flip y -> C-1-y (classes) or -y (regression)
  alie        mu - z sd of the honest members (Baruch et al. 2019; z from N and #Byzantine)
  ipm         -eps * honest mean (Xie et al. 2019)
Placements (``PLACEMENTS``): "loss" (self-selected by loss, the paper's experiment),
"spread" (Byzantine b claims cluster b mod k), "smallest" (all claim the cluster with the
fewest honest members this round: the worst case of the BR-IFCA theory).
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.attacks import gradient
from fedclust_jax.attacks.byzantine import byzantine_mask, num_byzantine
from fedclust_jax.core.traced import concrete
from fedclust_jax.bounds import BelowOne, NonNegative

ATTACKS = ("none", "outlier", "sign_flip", "scaling", "gaussian", "label_flip", "alie", "ipm")
PLACEMENTS = ("loss", "spread", "smallest")


@dataclasses.dataclass(frozen=True)
class Attack:
    """name: one of ATTACKS; scale: outlier evaluation scale c (3), sign-flip magnitude or
    scaling factor; std: Gaussian std; eps: IPM epsilon; z: ALIE z (None: Baruch's rule);
    placement: one of PLACEMENTS."""

    name: str = "none"
    scale: float = 3.0
    std: float = 1.0
    eps: float = 0.1
    z: float | None = None
    placement: str = "loss"

    def __post_init__(self):
        if self.name not in ATTACKS:
            raise ValueError(f"attack must be one of {ATTACKS}, got {self.name!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if concrete(self.std) and self.std < 0:
            raise ValueError(f"attack std must be >= 0, got {self.std}")

    def eval_params(self, params):
        """Params at which Byzantine clients compute losses and gradients."""
        if self.name == "outlier":
            return jax.tree.map(lambda p: self.scale * p, params)
        return params

    def flip_labels(self, y, byz, num_classes: int = 0):
        """y [M, n]: the Byzantine rows' labels flipped under ``label_flip``."""
        if self.name != "label_flip":
            return y
        flipped = (num_classes - 1 - y) if num_classes else -y
        return jnp.where(byz[:, None], flipped.astype(y.dtype), y)

    def place(self, assign, byz, k: int):
        """int32[M]: Byzantine rows' claimed clusters replaced by the placement rule."""
        if self.placement == "loss":
            return assign
        if self.placement == "spread":
            rank = jnp.cumsum(byz) - 1
            claim = (rank % k).astype(jnp.int32)
        else:
            honest = jax.nn.one_hot(assign, k, dtype=jnp.int32) * (~byz)[:, None]
            claim = jnp.full_like(assign, jnp.argmin(honest.sum(0)))
        return jnp.where(byz, claim, assign).astype(jnp.int32)

    def corrupt(self, key, g, assign, byz, k: int, num_byz: int | None = None):
        """Uploads g [M, ...] with the Byzantine rows replaced (``num_byz``: the Byzantine
        count, static or traced, for ALIE's default z)."""
        n = self.name
        if n == "sign_flip":
            return gradient.sign_flip(g, byz, self.scale)
        if n == "scaling":
            return gradient.scaling(g, byz, self.scale)
        if n == "gaussian":
            return gradient.gaussian(key, g, byz, self.std)
        if n == "alie":
            m = int(byz.shape[0])
            if self.z is None and num_byz is None:
                raise ValueError("ALIE's default z needs the Byzantine count num_byz (or set z)")
            z = self.z if self.z is not None else gradient.alie_z(m, num_byz)
            return gradient.alie(g, assign, byz, k, z)
        if n == "ipm":
            return gradient.ipm(g, assign, byz, k, self.eps)
        return g  # none, outlier, label_flip: the Byzantine rows were computed dishonestly


@dataclasses.dataclass(frozen=True)
class ByzantineSetting:
    """The Byzantine fields every robust algorithm's config shares.

    byz_frac: fraction alpha of Byzantine clients, in [0, 1);
    attack: what the Byzantine clients upload (``ATTACKS``: none, outlier, sign_flip, ...);
    attack_scale: the scaling and outlier attacks' magnitude;
    attack_std: standard deviation of the Gaussian-noise attack;
    attack_eps: the IPM attack's epsilon;
    attack_z: the ALIE attack's z (None: from the number of clients);
    placement: how a Byzantine client chooses its cluster (``PLACEMENTS``)."""

    byz_frac: BelowOne = 0.0
    attack: str = "none"
    attack_scale: float = 3.0
    attack_std: NonNegative = 1.0
    attack_eps: float = 0.1
    attack_z: float | None = None
    placement: str = "loss"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("attack_scale", "attack_std", "attack_eps",
                                                "attack_z")


def attack_from_config(cfg) -> Attack:
    """The ``Attack`` named by an algorithm config's flat fields (attack, attack_scale,
    attack_std, attack_eps, attack_z, placement)."""
    return Attack(name=cfg.attack, scale=cfg.attack_scale, std=cfg.attack_std,
                  eps=cfg.attack_eps, z=cfg.attack_z, placement=cfg.placement)


__all__ = ["ByzantineSetting", "attack_from_config", "ATTACKS", "PLACEMENTS", "Attack", "byzantine_mask", "gradient", "num_byzantine"]
