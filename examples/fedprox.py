"""FedProx as a user algorithm: FedAvg with a proximal term, one hook and a registration.

FedProx ("Federated Optimization in Heterogeneous Networks", Li et al., MLSys 2020): in
round t every participant k approximately minimises, from the global model w^t,

    h_k(w; w^t) = F_k(w) + (mu/2) ||w - w^t||^2

(here: ``local.steps`` steps of ``local``'s optimizer on it), and the server averages the
results. mu = 0 is FedAvg; the paper tunes mu over {0.001, 0.01, 0.1, 1}. Everything else is
FedAvg's (``fedclust_jax.algorithms.fedavg``): participants drawn uniformly, their models
averaged with equal weights or by sample count (the paper draws devices with probability
p_k = n_k / n and averages them equally; both estimate the p_k-weighted mean), BatchNorm
statistics carried.
The paper's variable local work (stragglers doing fewer steps) is not modelled.

The local step is a composition (``fedclust_jax.core.train``): FedAvg asks its
``local_term(state)`` for a term term(w, w_start) added to every participant's local loss,
w_start being the model the participant received; ``proximal_term(mu)`` is that term.
mu is in ``TRACED``, so ``sweep = {"fedprox.mu": [0.0, 0.01, 0.1]}`` is one compiled
program. Run it with ``fedclust-jax --plugin examples/fedprox.py run --algorithm fedprox
--set mu=0.01 ...`` or, from Python, ``import examples.fedprox`` before ``run_experiment``.
"""

from __future__ import annotations

import dataclasses
import typing

from fedclust_jax import register_algorithm
from fedclust_jax import NonNegative
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.core.train import proximal_term


@dataclasses.dataclass(frozen=True)
class FedProxConfig(FedAvgConfig):
    """mu: the proximal coefficient (0 is FedAvg); local: the participants' local
    training (steps, lr, batch_size, optimizer, ...); participation: fraction of clients
    per round, in (0, 1]; weighting: "equal" or "samples" mean of their models; chunk:
    clients per vectorized chunk; sequential: the participants train one after another
    (FedAvg's SR-FCA-code variant); static: participation (a shape)."""

    mu: NonNegative = 0.01

    TRACED: typing.ClassVar[tuple[str, ...]] = ("mu",)


class FedProx(FedAvg):
    """FedProx: FedAvg whose participants add (mu/2) ||w - w^t||^2 to their local loss."""

    name = "fedprox"

    def local_term(self, state):
        """(mu/2) ||w - w_start||^2; None (no term, FedAvg's program) for a Python mu = 0."""
        return proximal_term(self.cfg.mu)


register_algorithm("fedprox", FedProx, FedProxConfig, replace=True,
                   help="FedProx (Li et al. 2020): FedAvg with a proximal term (mu/2)||w - w^t||^2")
