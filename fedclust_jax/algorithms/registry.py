"""Named algorithms: name -> builder(model, params, data) -> algorithm object.

``params`` is a flat dict: keys of ``LocalTraining`` (steps, lr, batch_size, optimizer,
momentum, weight_decay, lr_decay) go to the local training, the rest to the algorithm's
config dataclass. Unknown keys are errors that list the accepted ones.
"""

from __future__ import annotations

import dataclasses
import re
import typing
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


def _field_default(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def param_fields(config_cls) -> dict:
    """{flat parameter name: (annotation, default)} of a config class, with ``local``
    expanded into the ``LocalTraining`` fields at the config's own ``local`` default
    (e.g. BR-IFCA's steps=1, lr=0.01)."""
    hints = typing.get_type_hints(config_cls)
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.name == "local":
            local = _field_default(f)
            local_hints = typing.get_type_hints(LocalTraining)
            for lf in dataclasses.fields(LocalTraining):
                out[lf.name] = (local_hints[lf.name], getattr(local, lf.name))
        else:
            out[f.name] = (hints[f.name], _field_default(f))
    return out


def config_keys(config_cls) -> list[str]:
    """Flat parameter names a config class accepts (its fields, with ``local`` expanded)."""
    return list(param_fields(config_cls))


def make_config(config_cls, params: dict, algorithm: str):
    """Builds and validates ``config_cls`` from flat ``params`` (type-checked and converted
    by ``config_check``; local-training keys replace fields of the config's default
    ``local``)."""
    from fedclust_jax.config_check import check_fields
    fields = param_fields(config_cls)
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ValueError(f"algorithm {algorithm!r} has no parameter(s) {unknown}; "
                         f"it takes {sorted(fields)}")
    params = check_fields(params, fields, f"{algorithm}: ", "parameter")
    names = [f.name for f in dataclasses.fields(config_cls)]
    split = "local" in names   # else lr, batch_size, optimizer are the config's own fields
    local = {k: v for k, v in params.items() if split and k in LOCAL_KEYS}
    rest = {k: v for k, v in params.items() if k not in local}
    if split:
        default = _field_default(next(f for f in dataclasses.fields(config_cls) if f.name == "local"))
        rest["local"] = dataclasses.replace(default, **local)
    return config_cls(**rest)


def effective_params(name: str, params: dict, data=None) -> dict:
    """Every flat parameter of algorithm ``name`` as it will run on ``data``: ``params``
    over the defaults (JSON-able values)."""
    params = dict(params)
    if name == "oracle" and data is not None:
        params.setdefault("num_clusters", max(data.num_true_clusters, 1))
    cfg = make_config(ALGORITHMS[name].config_cls, params, name)
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name == "local":
            out.update(dataclasses.asdict(v))
        else:
            out[f.name] = v
    if name == "oracle":
        out["assignment"] = "oracle"
    return out


def field_docs(config_cls) -> dict[str, str]:
    """{parameter: one-line meaning} read from the config class docstring (entries of the
    form ``name: meaning;`` / ``a / b: meaning``), with ``LocalTraining``'s for local keys
    and ``COMMON_HELP`` where the docstring says nothing."""
    names = [f.name for f in dataclasses.fields(config_cls)]
    out = dict(_docstring_entries(LocalTraining, list(LOCAL_KEYS))) if "local" in names else {}
    out.update(_docstring_entries(config_cls, names))
    out.pop("local", None)
    for k in config_keys(config_cls):
        if k not in out or out[k].lower().startswith("see ") or len(out[k]) < 3:
            out[k] = COMMON_HELP.get(k, out.get(k, ""))
    return out


COMMON_HELP = {
    "chunk": "clients per vectorized chunk (bounds memory; none = all at once)",
    "momentum": "SGD momentum in [0, 1)",
    "participation": "fraction of clients per round, in (0, 1]",
    "num_clusters": "number of cluster models K",
    "byz_frac": "fraction alpha of Byzantine clients",
    "attack": "Byzantine attack (fedclust_jax.attacks): none, outlier, sign_flip, ...",
    "attack_scale": "attack magnitude (scaling / outlier attacks)",
    "attack_std": "standard deviation of the Gaussian-noise attack",
    "attack_eps": "IPM attack epsilon",
    "attack_z": "ALIE attack z (none: from the number of clients)",
    "placement": "how Byzantine clients pick their cluster",
    "same_init": "every client starts from one model",
    "sequential": "participants train one after another on one shared model (authors' code)",
    "weighting": "mean of the participants' models: equal or samples (by sample count)",
    "local": "local training",
    "metric": "distance: cross_loss or l2",
    "graph": "threshold graph clustering: components (paper) or pivot (authors' code)",
    "refine_init": "cluster models at each REFINE: continue, common or fresh",
    "one_shot_init": "ONE_SHOT start: common w_0 or independent inits",
    "drop_small": "drop clusters smaller than t after RECLUSTER (authors' code)",
    "clients_per_cluster": "clients drawn per cluster per round (none: all members)",
    "max_participants": "cap on clients training per round (with clients_per_cluster)",
    "step": "server step rule (see fedclust_jax.algorithms.brifca)",
    "init": "initialisation of the cluster models (see fedclust_jax.algorithms.brifca)",
    "projection_radius": "radius of the projection after each step (none: no projection)",
}


def _docstring_entries(cls, names: list[str]) -> dict[str, str]:
    doc = " ".join((cls.__doc__ or "").split())
    name = r"[a-z_][a-z0-9_]*"
    head = re.compile(rf"(?:^|(?<=[;.]\s)|(?<=\.\s\s))({name}(?:\s*(?:,|/|and)\s*{name})*)"
                      rf"(\s*\([^)]*\))?\s*:\s")
    hits = [m for m in head.finditer(doc)
            if all(n.strip() in names for n in re.split(r"\s*(?:,|/|\band\b)\s*", m.group(1)))]
    out = {}
    for i, m in enumerate(hits):
        end = hits[i + 1].start() if i + 1 < len(hits) else len(doc)
        text = doc[m.end():end].strip()
        cut = re.search(r";\s[^;]{0,40}:\s", text)  # an entry whose head is not a field
        text = (text[:cut.start()] if cut else text).strip().rstrip(";.").strip()
        if m.group(2):
            text = f"{text} {m.group(2).strip()}"
        for n in re.split(r"\s*(?:,|/|\band\b)\s*", m.group(1)):
            out.setdefault(n.strip(), text)
    return out


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
