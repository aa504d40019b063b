"""Checks of data, model and algorithm parameters against the registries (typed by
``config_check``), run before any data is built."""

from __future__ import annotations

from fedclust_jax.bounds import Size
from fedclust_jax.config_check import ConfigError, check_fields, signature_fields


def check_data(dataset: str, params: dict) -> dict:
    from fedclust_jax.data.registry import DATASETS
    if not isinstance(dataset, str) or dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}; available: {', '.join(sorted(DATASETS))}")
    fields, _ = signature_fields(DATASETS[dataset])
    return check_fields(params, fields, f"dataset {dataset}: ", "parameter")


def model_fields(model: str) -> tuple[dict, bool]:
    """({name: (annotation, default)}, open-ended) of a registered model's parameters: its
    builder's keywords (open-ended when it also takes ``**params``)."""
    from fedclust_jax.models.registry import MODELS
    return signature_fields(MODELS[model])


def check_model_args(model: str | None, args: dict) -> dict:
    from fedclust_jax.models.registry import MODELS
    if model is None:  # the task's default (linear or MLP), known once the data is built
        return check_fields(args, {"hidden": (list[Size], (200,))}, "model: ", "parameter",
                            open_ended=True)
    if not isinstance(model, str) or model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; available: {', '.join(sorted(MODELS))}")
    fields, var_kw = model_fields(model)
    return check_fields(args, fields, f"model {model}: ", "parameter", open_ended=var_kw)


def check_algorithm(name: str, params: dict) -> dict:
    from fedclust_jax.algorithms.registry import ALGORITHMS, param_fields
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
    fields = param_fields(ALGORITHMS[name].config_cls)
    if not isinstance(params, dict):
        raise ConfigError(f"{name}: parameters must be a table {{key: value}}, got {params!r}")
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ConfigError(f"algorithm {name!r} has no parameter(s) {unknown}; "
                          f"it takes {sorted(fields)}")
    return check_fields(params, fields, f"{name}: ", "parameter")
