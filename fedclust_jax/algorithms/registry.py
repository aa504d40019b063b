"""Named algorithms: name -> builder(model, params, data) -> algorithm object.

``params`` is a flat dict: keys of ``LocalTraining`` (steps, lr, batch_size, optimizer,
momentum, weight_decay, lr_decay) go to the local training, the rest to the algorithm's
config dataclass. Unknown keys are errors that list the accepted ones.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.algorithms.oneshot_kmeans import OneShotConfig, OneShotKMeans
from fedclust_jax.algorithms.srfca import SRFCA, SRFCAConfig
from fedclust_jax.algorithms.cfl import CFL, CFLConfig
from fedclust_jax.algorithms.fedsoft import FedSoft, FedSoftConfig
from fedclust_jax.algorithms.local_kmeans import LocalKMeans, LocalKMeansConfig
from fedclust_jax.algorithms.oneshot_ifca import OneShotIFCA, OneShotIFCAConfig
from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig
from fedclust_jax.algorithms import clustergan
from fedclust_jax.algorithms.clustergan import ClusterGANConfig
from fedclust_jax.algorithms.kfed import KFed, KFedConfig
from fedclust_jax.algorithms.uifca import UIFCA, UIFCAConfig
from fedclust_jax.algorithms.ditto import Ditto, DittoConfig
from fedclust_jax.algorithms.knn_per import KNNPer, KNNPerConfig
from fedclust_jax.algorithms.three_stage import ThreeStage, ThreeStageConfig
from fedclust_jax.algorithms.fc import FCConfig, FederatedClustering
from fedclust_jax.algorithms.mc import MCConfig, MomentumClustering
from fedclust_jax.algorithms.myopic import Myopic, MyopicConfig
from fedclust_jax.core.train import LocalTraining

LOCAL_KEYS = tuple(f.name for f in dataclasses.fields(LocalTraining))


def config_keys(config_cls) -> list[str]:
    """Flat parameter names a config class accepts (its fields, with ``local`` expanded)."""
    names = [f.name for f in dataclasses.fields(config_cls)]
    if "local" in names:
        names = [n for n in names if n != "local"] + list(LOCAL_KEYS)
    return names


def make_config(config_cls, params: dict, algorithm: str):
    """Builds and validates ``config_cls`` from flat ``params``."""
    accepted = config_keys(config_cls)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"algorithm {algorithm!r} has no parameter(s) {unknown}; "
                         f"it takes {sorted(accepted)}")
    local = {k: v for k, v in params.items() if k in LOCAL_KEYS}
    rest = {k: v for k, v in params.items() if k not in LOCAL_KEYS}
    if "local" in [f.name for f in dataclasses.fields(config_cls)]:
        rest["local"] = LocalTraining(**local)
    return config_cls(**rest)


def _simple(cls, config_cls):
    def build(model, params, data):
        return cls(model, make_config(config_cls, params, cls.name))
    build.config_cls = config_cls
    return build


def _oracle(model, params, data):
    params = dict(params, assignment="oracle")
    params.setdefault("num_clusters", max(data.num_true_clusters, 1))
    return IFCA(model, make_config(IFCAConfig, params, "oracle"))


_oracle.config_cls = IFCAConfig


def _clustergan(model, params, data):
    return clustergan.build(model, make_config(ClusterGANConfig, params, "clustergan"), data)


_clustergan.config_cls = ClusterGANConfig

ALGORITHMS: dict[str, Callable] = {
    # IFCA paper: IFCA and its baselines
    "fedavg": _simple(FedAvg, FedAvgConfig),
    "local": _simple(Local, LocalConfig),
    "ifca": _simple(IFCA, IFCAConfig),
    "oracle": _oracle,
    "oneshot-kmeans": _simple(OneShotKMeans, OneShotConfig),
    # SR-FCA paper: SR-FCA and its baselines
    "srfca": _simple(SRFCA, SRFCAConfig),
    "cfl": _simple(CFL, CFLConfig),
    "local-kmeans": _simple(LocalKMeans, LocalKMeansConfig),
    "oneshot-ifca": _simple(OneShotIFCA, OneShotIFCAConfig),
    "fedsoft": _simple(FedSoft, FedSoftConfig),
    # Byzantine-robust and threshold-clustering papers
    "brifca": _simple(BRIFCA, BRIFCAConfig),
    "three-stage": _simple(ThreeStage, ThreeStageConfig),
    "fc": _simple(FederatedClustering, FCConfig),
    "mc": _simple(MomentumClustering, MCConfig),
    "myopic": _simple(Myopic, MyopicConfig),
    "ditto": _simple(Ditto, DittoConfig),
    "knn-per": _simple(KNNPer, KNNPerConfig),
    # UIFCA thesis chapter 4: points, not clients, carry clusters (point datasets)
    "uifca": _simple(UIFCA, UIFCAConfig),
    "kfed": _simple(KFed, KFedConfig),
    "clustergan": _clustergan,
}
ALGORITHM_HELP = {
    "fedavg": "FedAvg: one global model (IFCA paper's 'global' baseline)",
    "local": "Local: every client trains alone",
    "ifca": "IFCA (Ghosh et al.): option gradient (I) or model (II), restarts, weight sharing",
    "oracle": "per-cluster FedAvg with the true clusters (IFCA with frozen oracle assignment)",
    "oneshot-kmeans": "IFCA paper's one-shot baseline: local ERM, k-means once, per-cluster FedAvg",
    "srfca": "SR-FCA (Vardhan et al.): ONE_SHOT threshold-graph clustering, then REFINE steps (rounds)",
    "cfl": "CFL (Sattler et al.): recursive bipartition by cosine similarity of updates",
    "local-kmeans": "Local-KMeans: k-means on local models, centroid models",
    "oneshot-ifca": "ONE_SHOT-IFCA: IFCA started from SR-FCA's ONE_SHOT clusters (K from it)",
    "fedsoft": "FedSoft (Ruan and Joe-Wong): soft cluster importance weights, floored at sigma",
    "brifca": "BR-IFCA (Tao et al.): IFCA option I with robust per-cluster aggregation, attacks",
    "three-stage": "Three-Stage (Ghosh et al. 2019): local ERM, trimmed k-means, trimmed-mean GD",
    "fc": "Federated-Clustering: threshold clustering of all clients' gradients at each client's model",
    "mc": "Momentum-Clustering: threshold clustering of client momenta into K centers",
    "myopic": "Myopic-Clustering strawman: k-means of the current gradients",
    "ditto": "Ditto (Li et al.): FedAvg plus proximal personal models (lambda)",
    "knn-per": "kNN-Per (Marfoq et al.): FedAvg model mixed with a local kNN predictor (lam)",
    "uifca": "UIFCA: K flows cluster every client's points (--model affine-flow | real-nvp; point datasets)",
    "kfed": "k-FED (Dennis et al.): one-shot federated k-means of the clients' points (point datasets)",
    "clustergan": "ClusterGAN + FedAvg: points clustered by the encoder (point datasets of images)",
}


def accepted_params(name: str) -> list[str]:
    return config_keys(ALGORITHMS[name].config_cls)


def build_algorithm(name: str, model, params: dict, data):
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
    try:
        alg = ALGORITHMS[name](model, dict(params), data)
    except TypeError as e:
        raise ValueError(f"bad parameters for algorithm {name!r}: {e}") from None
    if hasattr(alg, "check_data"):
        alg.check_data(data)
    return alg
