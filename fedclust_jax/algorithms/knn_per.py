"""kNN-Per (Marfoq et al. 2022), the threshold-clustering paper's KNN baseline.

Training is FedAvg of one global model w. Client i predicts with the mixture
    p_i(y | x) = lam * p_kNN,i(y | x) + (1 - lam) * softmax(f_w(x))_y,
where p_kNN,i(y | x) is the share of label y among the ``neighbors`` nearest of client i's
own training points to x (Euclidean distance in the feature space). The threshold paper uses
lam = 0.5 (rotation) and 0.9 (private label) and gives neither k nor the feature space
(unstated choices here: k = 10, uniform votes). ``features="input"``: the flattened
inputs (for softmax regression the inputs are the model's embedding); ``"output"``: the
global model's outputs (logits). Marfoq et al. use the global model's penultimate layer.
Test loss: -log p_i(y | x), floored at log(1e-12) where the mixture gives y probability 0.
Classification only.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.pairwise import sq_distances
from fedclust_jax.data.federated import example_mask
from fedclust_jax.bounds import Probability, Size

FEATURES = ("input", "output")


@dataclasses.dataclass(frozen=True)
class KNNPerConfig(FedAvgConfig):
    """FedAvg's settings for the global model (``FedAvgConfig``'s fields).

    lam: weight of the kNN term, in [0, 1];
    neighbors: k of the kNN predictor; features: what the kNN compares, "input" or "output" (``FEATURES``);
    static: participation (the number of participants, a shape)."""

    lam: Probability = 0.5
    neighbors: Size = 10
    features: str = "input"

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lam",)

    def __post_init__(self):
        super().__post_init__()
        if self.features not in FEATURES:
            raise ValueError(f"features must be one of {FEATURES}, got {self.features!r}")


def knn_label_shares(train_f, train_y, train_mask, test_f, k: int, num_classes: int):
    """[n_test, C] share of each label among the k nearest real training points.

    train_f [n, F], train_y int[n], train_mask bool[n], test_f [t, F]. With fewer than k real
    points all of them vote.
    """
    sq = jnp.where(train_mask[None, :], sq_distances(test_f, train_f), jnp.inf)
    _, idx = jax.lax.top_k(-sq, min(k, train_f.shape[0]))
    votes = jax.nn.one_hot(train_y[idx], num_classes) * train_mask[idx][..., None]
    return votes.sum(1) / jnp.maximum(votes.sum((1, 2))[:, None], 1.0)


class KNNPer(FedAvg):
    """kNN-Per (Marfoq et al.): FedAvg model mixed with a local kNN predictor (lam)."""

    name = "knn-per"
    clusters_clients = False

    def __init__(self, model, cfg: KNNPerConfig = KNNPerConfig()):
        if model.task != "classification":
            raise ValueError(f"kNN-Per needs a classification model, got task {model.task!r}")
        super().__init__(model, cfg)

    def evaluate(self, state, data) -> dict:
        cfg, model, w = self.cfg, self.model, state.params
        num_classes = data.num_classes

        def feats(x):
            return x.reshape(x.shape[0], -1) if cfg.features == "input" else model.apply(w, x)

        def client(x, y, c, xt, yt, ct):
            shares = knn_label_shares(feats(x), y, example_mask(c, x.shape[0]), feats(xt),
                                      cfg.neighbors, num_classes)
            prob = cfg.lam * shares + (1 - cfg.lam) * jax.nn.softmax(model.apply(w, xt), -1)
            mask = example_mask(ct, xt.shape[0]).astype(jnp.float32)
            denom = jnp.maximum(mask.sum(), 1.0)
            p_true = jnp.take_along_axis(prob, yt[:, None], 1)[:, 0]
            loss = jnp.sum(-jnp.log(jnp.maximum(p_true, 1e-12)) * mask) / denom
            acc = jnp.sum((jnp.argmax(prob, -1) == yt) * mask) / denom
            return loss, acc

        loss, acc = map_clients(lambda i: client(*data.train_client(i), *data.test_client(i)),
                                jnp.arange(data.num_clients, dtype=jnp.int32), chunk=cfg.chunk)
        return dict(test_loss=loss, test_acc=acc, assigned_test_loss=loss, assigned_test_acc=acc,
                    assign=jnp.full((data.num_clients,), -1, jnp.int32))
