"""k-FED ([T] Alg. 2; Dennis et al. 2021) as an algorithm of the experiment runner:
one-shot federated k-means of the clients' points (``core.kmeans.kfed``).

``init`` runs k-FED; a ``round`` changes nothing (the method is one-shot), so any number
of rounds gives the same result. ``evaluate`` returns the point assignment; ``objective``
is the k-means objective (mean squared distance of the real points to their server
centre), which picks among restarts without labels. k-FED + UIFCA:
``--algorithm uifca --set init_assign=kfed``.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from flax import struct

from fedclust_jax.algorithms.base import Algorithm, check_chunk
from fedclust_jax.core.kmeans import KFedResult, best_kmeans, kfed
from fedclust_jax.core.pairwise import sq_distances
from fedclust_jax.bounds import Size
from fedclust_jax.config_check import check_config

__all__ = ["KFed", "KFedConfig", "KFedResult", "KFedState", "best_kmeans", "kfed"]


@dataclasses.dataclass(frozen=True)
class KFedConfig:
    """num_clusters: K (server centres); local_k: k' centres per client (None = K); iters:
    Lloyd iterations per k-means run; restarts: k-means++ seedings per run (client and
    server), the lowest inertia kept; chunk: clients per vectorized chunk (None = all)."""

    num_clusters: Size = 4
    local_k: Size | None = None
    iters: Size = 50
    restarts: Size = 10
    chunk: Size | typing.Literal["auto"] | None = "auto"

    TRACED: typing.ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        check_config(self)
        check_chunk(self.chunk)


@struct.dataclass
class KFedState:
    """assign: int32[N, n_max] server cluster of every point (-1 on padding); centres:
    [K, P] server centres; round: int32 rounds run (they change nothing)."""

    assign: jax.Array
    centres: jax.Array
    round: jax.Array


class KFed(Algorithm):
    """k-FED (Dennis et al.): one-shot federated k-means of the clients' points (point datasets)."""

    name = "kfed"
    clusters_points = True

    def __init__(self, model=None, cfg: KFedConfig = KFedConfig()):
        self.model, self.cfg = model, cfg   # the model is not used: k-FED clusters the raw points

    def init(self, key, data) -> KFedState:
        c = self.cfg
        r = kfed(key, data.x, data.count, c.num_clusters, local_k=c.local_k, iters=c.iters,
                 restarts=c.restarts, chunk=c.chunk)
        return KFedState(assign=r.assign, centres=r.centres, round=jnp.zeros((), jnp.int32))

    def round(self, state: KFedState, key, data):
        return state.replace(round=state.round + 1), {}

    def objective(self, state: KFedState, data):
        """Mean over real points of the squared distance to their server centre."""
        n, n_max = data.x.shape[:2]
        pts = data.x.reshape(n * n_max, -1).astype(jnp.float32)
        d = sq_distances(pts, state.centres)
        a = state.assign.reshape(-1)
        own = jnp.take_along_axis(d, jnp.clip(a, 0)[:, None], 1)[:, 0]
        return jnp.sum(jnp.where(a >= 0, own, 0.0)) / jnp.maximum(jnp.sum(a >= 0), 1)

    def evaluate(self, state: KFedState, data) -> dict:
        """point_assign int32[N, n_max] and objective (jit-able)."""
        return dict(point_assign=state.assign, objective=self.objective(state, data))
