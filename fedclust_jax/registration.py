"""Adding your own algorithm, dataset or model: once registered, a name works everywhere a
built-in one does (``run``, ``compare``, ``sweep``, study files, ``list``, ``--dataset``,
restarts, curves, checkpoints, device meshes, plots). The built-ins go through the same
three calls.

    register_algorithm(name, algorithm_cls, config_cls, help="...", build=None)
        algorithm_cls subclasses ``fedclust_jax.algorithms.base.Algorithm`` and is built as
        ``algorithm_cls(model, config)``; config_cls is a frozen dataclass whose fields are
        the parameters (a field ``local: LocalTraining`` brings steps, lr, batch_size,
        optimizer, ...; ``TRACED``, a tuple of field names, lists those a sweep may vmap).
    register_dataset(name, builder, help="...", defaults=None)
        builder(key, **params) -> FederatedData; its keyword parameters (with defaults and
        annotations) become ``--data KEY=VALUE`` / ``[data]``; ``defaults`` (or
        ``@paper_defaults(...)`` on the builder) is what ``--dataset NAME`` runs.
    register_model(name, builder, help="...")
        builder(data, **params) -> ``models.base.Model`` (``models.base.from_nnx`` wraps a
        Flax NNX module); its keyword parameters become ``--model-arg`` / ``[model_args]``.

What describes a name lives beside it: the one-line help is ``help`` or the first sentence
of the builder's (algorithm class's) docstring, and each parameter's meaning is its entry
``name: meaning`` in the docstring of the builder or of the config class (the convention of
``fedclust_jax.describe``); ``fedclust-jax list NAME`` shows them.

A name already taken is refused (``replace=True`` replaces it). Registration lasts for the
Python process: the CLI takes ``--plugin FILE.py`` (or the ``FEDCLUST_PLUGINS`` variable,
paths separated by ``os.pathsep``) to import files that register before it parses
anything. ``examples/`` holds one complete case of each.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import re
import sys
from typing import Callable

NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def _check_name(kind: str, name, table: dict, replace: bool):
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{kind} name must be lower-case letters, digits, '-' or '_' "
                         f"(starting with a letter), got {name!r}")
    if name in table and not replace:
        raise ValueError(f"{kind} {name!r} is already registered; choose another name or pass "
                         f"replace=True")


def register_algorithm(name: str, algorithm_cls, config_cls, *, help: str = "",
                       build: Callable | None = None, replace: bool = False):
    """Registers ``algorithm_cls`` (an ``Algorithm`` subclass, built as
    ``algorithm_cls(model, config_cls(**params))``) under ``name``; returns ``algorithm_cls``.

    help: the one-line help (default: the first sentence of ``algorithm_cls``'s
    docstring); parameter meanings come from ``config_cls``'s
    docstring (``fedclust_jax.describe``). build: ``build(model, config, data) ->
    algorithm`` for an algorithm that needs the data to be made (default:
    ``algorithm_cls(model, config)``)."""
    from fedclust_jax.algorithms.base import Algorithm
    from fedclust_jax.algorithms.registry import ALGORITHMS, make_config
    _check_name("algorithm", name, ALGORITHMS, replace)
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

    def factory(model, params, data):
        cfg = make_config(config_cls, params, name)
        return algorithm_cls(model, cfg) if build is None else build(model, cfg, data)

    factory.config_cls, factory.algorithm_cls = config_cls, algorithm_cls
    ALGORITHMS[name] = factory
    ALGORITHMS.help[name] = _help("algorithm", name, help, algorithm_cls)
    return algorithm_cls


def register_dataset(name: str, builder: Callable, *, help: str = "", defaults=None,
                     replace: bool = False):
    """Registers ``builder(key, **params) -> FederatedData`` under ``name``; returns it.

    help: the one-line help (default: the first sentence of the builder's docstring);
    parameter meanings come from the builder's docstring (``fedclust_jax.describe``).
    defaults: a ``DatasetDefaults`` (what ``--dataset NAME`` runs; default: the one
    ``@paper_defaults`` declared on the builder, else the builder's own parameters with
    FedAvg and Local)."""
    from fedclust_jax.data.defaults import DatasetDefaults
    from fedclust_jax.data.registry import DATASETS
    _check_name("dataset", name, DATASETS, replace)
    if not callable(builder) or next(iter(inspect.signature(builder).parameters), None) != "key":
        raise ValueError(f"dataset {name!r}: the builder must be a function whose first "
                         "parameter is `key` (builder(key, **params) -> FederatedData)")
    defaults = defaults if defaults is not None else getattr(builder, "paper_defaults", None)
    if defaults is not None and not isinstance(defaults, DatasetDefaults):
        raise ValueError(f"dataset {name!r}: defaults must be a "
                         f"fedclust_jax.DatasetDefaults, got {type(defaults).__name__}")
    text = _help("dataset", name, help, builder)
    DATASETS[name] = builder
    DATASETS.help[name], DATASETS.defaults[name] = text, defaults
    return builder


def register_model(name: str, builder: Callable, *, help: str = "", replace: bool = False):
    """Registers ``builder(data, **params) -> Model`` under ``name``; returns it.

    help: the one-line help (default: the first sentence of the builder's docstring);
    parameter meanings come from the builder's docstring (``fedclust_jax.describe``)."""
    from fedclust_jax.models.registry import MODELS
    _check_name("model", name, MODELS, replace)
    if not callable(builder) or next(iter(inspect.signature(builder).parameters), None) != "data":
        raise ValueError(f"model {name!r}: the builder must be a function whose first "
                         "parameter is `data` (builder(data, **params) -> Model)")
    text = _help("model", name, help, builder)
    MODELS[name] = builder
    MODELS.help[name] = text
    return builder


def _help(kind: str, name: str, given: str, owner) -> str:
    """The one-line help: ``given``, else the first sentence of ``owner``'s docstring;
    ValueError when there is neither."""
    from fedclust_jax.describe import summary
    text = " ".join(str(given).split()) if given else summary(getattr(owner, "__doc__", None))
    if not text:
        raise ValueError(f"{kind} {name!r}: give help=\"one line\" or a docstring whose first "
                         f"sentence says what it is")
    return text


def load_plugins(paths) -> list[str]:
    """Imports each Python file of ``paths`` (its registrations take effect); returns the
    module names. ValueError (one line) for a missing file or one that fails to import."""
    names = []
    for path in paths:
        if not path:
            continue
        if not os.path.isfile(path):
            raise ValueError(f"plugin {path!r} does not exist; give the path of a .py file "
                             "that registers algorithms, datasets or models")
        name = "fedclust_plugin_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        if name in sys.modules:
            names.append(name)
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise ValueError(f"plugin {path!r} failed to import: {type(e).__name__}: {e}") from None
        names.append(name)
    return names


def env_plugins() -> list[str]:
    """The plugin paths of the ``FEDCLUST_PLUGINS`` environment variable."""
    return [p for p in os.environ.get("FEDCLUST_PLUGINS", "").split(os.pathsep) if p]
