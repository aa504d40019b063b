"""FedAvgM as a user algorithm: a built-in (FedAvg) extended with a field of its own state.

FedAvgM ("Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", Hsu, Qi and Brown, 2019): the participants train from the global model
w^t exactly as in FedAvg; the server takes the difference between w^t and their mean
w-bar^{t+1} as a pseudo-gradient and steps with momentum beta,

    Delta^t = w^t - w-bar^{t+1},   v^{t+1} = beta v^t + Delta^t,   w^{t+1} = w^t - eta v^{t+1},

v^0 = 0. Hsu et al. step with eta = 1; a server step size eta (Reddi et al., "Adaptive
Federated Optimization", 2021) scales the step. At beta = 0 and eta = 1,
w^{t+1} = w-bar^{t+1}: FedAvg.

How it extends FedAvg (``fedclust_jax.algorithms.fedavg``):
- the state: ``MomentumState`` subclasses FedAvg's ``GlobalState`` and adds the field
  ``velocity`` (a pytree shaped like ``params``); ``init`` builds FedAvg's state and adds
  v^0 = 0.
- the round: ``super().round`` is FedAvg's whole round (participants, local steps, mean,
  BatchNorm statistics), whose params are w-bar^{t+1}; the server step replaces them with
  ``state.replace(...)``, which keeps every other field, the new one included.
- the config: ``FedAvgMConfig`` subclasses ``FedAvgConfig`` (every FedAvg parameter kept)
  and adds the two server parameters, both in ``TRACED`` (a sweep vmaps them).

    fedclust-jax --plugin examples/fedavgm.py run --algorithm fedavgm --set server_momentum=0.7
"""

from __future__ import annotations

import dataclasses
import typing

import jax
from flax import struct

from fedclust_jax import BelowOne, Positive, register_algorithm
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig, GlobalState


@dataclasses.dataclass(frozen=True)
class FedAvgMConfig(FedAvgConfig):
    """server_momentum: the server's momentum beta, in [0, 1) (0: no momentum);
    server_lr: the server's step size eta on the averaged update (1 with beta = 0 is
    FedAvg)."""

    server_momentum: BelowOne = 0.9
    server_lr: Positive = 1.0

    TRACED: typing.ClassVar[tuple[str, ...]] = ("server_momentum", "server_lr")


@struct.dataclass
class MomentumState(GlobalState):
    velocity: object = None     # v^t, shaped like params (float, as the params)


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al. 2019): FedAvg whose server steps with momentum on the averaged
    update."""

    name = "fedavgm"

    def init(self, key, data) -> MomentumState:
        s = super().init(key, data)
        return MomentumState(params=s.params, round=s.round, model_state=s.model_state,
                             velocity=jax.tree.map(lambda w: w * 0, s.params))

    def round(self, state: MomentumState, key, data):
        new, metrics = super().round(state, key, data)            # params: w-bar^{t+1}
        beta, eta = self.cfg.server_momentum, self.cfg.server_lr
        v = jax.tree.map(lambda v, w, m: (beta * v + (w - m)).astype(w.dtype),
                         state.velocity, state.params, new.params)
        params = jax.tree.map(lambda w, v: (w - eta * v).astype(w.dtype), state.params, v)
        return state.replace(params=params, round=new.round, model_state=new.model_state,
                             velocity=v), metrics


register_algorithm("fedavgm", FedAvgM, FedAvgMConfig, replace=True)
