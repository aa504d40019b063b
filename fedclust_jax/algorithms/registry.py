"""Named algorithms: name -> factory(model, params, data) -> algorithm object.

Every algorithm, built-in or a user's, is registered through ``register_algorithm`` (the
public ``fedclust_jax.register_algorithm``); what describes it lives beside it (the algorithm
class's docstring, its config class's docstring for the parameters).

``params`` is a flat dict: keys of ``LocalTraining`` (steps, lr, batch_size, optimizer,
momentum, weight_decay, lr_decay) go to the local training, the rest to the algorithm's
config dataclass. Unknown keys are errors that list the accepted ones.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Callable

from fedclust_jax.core.train import LocalTraining
from fedclust_jax.describe import Registry, meanings

ALGORITHMS = Registry("algorithm")


def register_algorithm(name: str, algorithm_cls, config_cls, *, help: str = "",
                       build: Callable | None = None, replace: bool = False):
    """Registers ``algorithm_cls`` (an ``Algorithm`` subclass, built as
    ``algorithm_cls(model, config_cls(**params))``) under ``name``; returns ``algorithm_cls``.

    help: the one-line help (default: the first sentence of ``algorithm_cls``'s
    docstring); parameter meanings come from ``config_cls``'s docstring
    (``fedclust_jax.describe``). build: ``build(model, config, data) -> algorithm`` for an
    algorithm that needs the data to be made (default: ``algorithm_cls(model, config)``)."""
    from fedclust_jax.algorithms.base import Algorithm
    ALGORITHMS.check_name(name, replace)
    if not (inspect.isclass(algorithm_cls) and Algorithm in algorithm_cls.__mro__):
        raise ValueError(f"algorithm {name!r}: {algorithm_cls!r} must be a class that subclasses "
                         "fedclust_jax.algorithms.base.Algorithm")
    missing = [m for m in ("init", "round", "evaluate", "objective")
               if getattr(algorithm_cls, m) is getattr(Algorithm, m)]
    if missing:
        raise ValueError(f"algorithm {name!r}: {algorithm_cls.__name__} does not define "
                         f"{', '.join(missing)} (required by the Algorithm protocol)")
    if not (dataclasses.is_dataclass(config_cls) and inspect.isclass(config_cls)
            and config_cls.__dataclass_params__.frozen):
        raise ValueError(f"algorithm {name!r}: the config {config_cls!r} must be a frozen "
                         "dataclass (@dataclasses.dataclass(frozen=True))")
    if build is not None and not callable(build):
        raise ValueError(f"algorithm {name!r}: build must be a function "
                         "build(model, config, data) -> algorithm")
    text = ALGORITHMS.help_for(name, help, algorithm_cls)

    def factory(model, params, data):
        cfg = make_config(config_cls, params, name)
        return algorithm_cls(model, cfg) if build is None else build(model, cfg, data)

    factory.config_cls, factory.algorithm_cls = config_cls, algorithm_cls
    ALGORITHMS[name] = factory
    ALGORITHMS.help[name] = text
    return algorithm_cls
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
    hints = typing.get_type_hints(config_cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.name == "local":
            local = _field_default(f)
            local_hints = typing.get_type_hints(LocalTraining, include_extras=True)
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
    over the defaults (JSON-able values); a config with a ``for_data(data)`` method (e.g.
    the oracle's K from the data) is resolved with it."""
    cfg = make_config(ALGORITHMS[name].config_cls, dict(params), name)
    if data is not None and hasattr(cfg, "for_data"):
        cfg = cfg.for_data(data)
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name == "local":
            out.update(dataclasses.asdict(v))
        else:
            out[f.name] = v
    return out


def field_docs(config_cls) -> dict[str, str]:
    """{parameter: meaning} declared beside the config (``fedclust_jax.describe``): each
    field's entry in the docstring of the config class or of the class that declares it
    (a base such as ``ByzantineSetting``), the keys of ``local`` in ``LocalTraining``'s.
    A parameter whose docstring says nothing is absent."""
    names = [f.name for f in dataclasses.fields(config_cls)]
    out = dict(meanings(LocalTraining.__doc__, LOCAL_KEYS)) if "local" in names else {}
    for klass in reversed(config_cls.__mro__):      # the most derived class speaks last
        if dataclasses.is_dataclass(klass):
            out.update(meanings(klass.__doc__, [n for n in names if n != "local"]))
    return out


def _register_builtins():
    import importlib
    (brifca, cfl, clustergan, ditto, fc, fedavg, fedsoft, ifca, kfed, knn_per, local,
     local_kmeans, mc, myopic, oneshot_ifca, oneshot_kmeans, oracle, srfca, three_stage,
     uifca) = (importlib.import_module(f"fedclust_jax.algorithms.{m}") for m in (
        "brifca", "cfl", "clustergan", "ditto", "fc", "fedavg", "fedsoft", "ifca", "kfed",
        "knn_per", "local", "local_kmeans", "mc", "myopic", "oneshot_ifca", "oneshot_kmeans",
        "oracle", "srfca", "three_stage", "uifca"))
    for name, cls, config in (
            # IFCA paper: IFCA and its baselines
            ("fedavg", fedavg.FedAvg, fedavg.FedAvgConfig),
            ("local", local.Local, local.LocalConfig),
            ("ifca", ifca.IFCA, ifca.IFCAConfig),
            ("oneshot-kmeans", oneshot_kmeans.OneShotKMeans, oneshot_kmeans.OneShotConfig),
            # SR-FCA paper: SR-FCA and its baselines
            ("srfca", srfca.SRFCA, srfca.SRFCAConfig),
            ("cfl", cfl.CFL, cfl.CFLConfig),
            ("local-kmeans", local_kmeans.LocalKMeans, local_kmeans.LocalKMeansConfig),
            ("oneshot-ifca", oneshot_ifca.OneShotIFCA, oneshot_ifca.OneShotIFCAConfig),
            ("fedsoft", fedsoft.FedSoft, fedsoft.FedSoftConfig),
            # Byzantine-robust and threshold-clustering papers
            ("brifca", brifca.BRIFCA, brifca.BRIFCAConfig),
            ("three-stage", three_stage.ThreeStage, three_stage.ThreeStageConfig),
            ("fc", fc.FederatedClustering, fc.FCConfig),
            ("mc", mc.MomentumClustering, mc.MCConfig),
            ("myopic", myopic.Myopic, myopic.MyopicConfig),
            ("ditto", ditto.Ditto, ditto.DittoConfig),
            ("knn-per", knn_per.KNNPer, knn_per.KNNPerConfig),
            # UIFCA thesis chapter 4: points, not clients, carry clusters (point datasets)
            ("uifca", uifca.UIFCA, uifca.UIFCAConfig),
            ("kfed", kfed.KFed, kfed.KFedConfig)):
        register_algorithm(name, cls, config)
    register_algorithm("oracle", ifca.IFCA, oracle.OracleConfig, build=oracle.build_oracle,
                       help="per-cluster FedAvg with the true clusters (IFCA with frozen "
                            "oracle assignment)")
    register_algorithm("clustergan", clustergan.ClusterGAN, clustergan.ClusterGANConfig,
                       build=clustergan.build)


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
    alg.participants(data.num_clients)     # a participation that rounds to no client stops here
    return alg


_register_builtins()
