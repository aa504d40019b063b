"""Studies from what datasets declare: ``--dataset NAME`` and the named presets.

A study is a dict: dataset, data (builder parameters), model, model_args, rounds, seed,
and algorithms: {label: params}; params hold the algorithm's flat parameters, plus
optionally "algorithm" (the registered name, default: the label), "restarts" and "rounds".

``dataset_study(name, algorithms)`` turns a registered dataset's declared defaults (its
``DatasetDefaults``: the paper's model, rounds, local training and per-algorithm settings,
``data.defaults``) into a study, so ``--dataset X`` never inherits another dataset's
settings; a dataset that declares none runs its builder's own parameters with the task's
default model, FedAvg and Local.
"""

from __future__ import annotations

import copy

from fedclust_jax.data.defaults import DatasetDefaults

# Named studies: a dataset's defaults, under a short name.
PRESET_DATASETS = {"ifca-synthetic": "synthetic-regression",
                   "mixture-classification": "gaussian-mixture",
                   "rotated-digits": "rotated-digits"}
DEFAULT_PRESET = "ifca-synthetic"


def dataset_defaults(dataset: str) -> DatasetDefaults:
    """What ``dataset`` declared at registration (``DatasetDefaults()`` when nothing)."""
    from fedclust_jax.data.registry import DATASETS
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; available: {', '.join(sorted(DATASETS))}")
    return DATASETS.defaults.get(dataset) or DatasetDefaults()


def default_model(dataset: str) -> str | None:
    """The model the dataset's paper trains (None: linear for regression, MLP otherwise)."""
    from fedclust_jax.data.registry import DATASETS
    return dataset_defaults(dataset).model if dataset in DATASETS else None


def dataset_study(dataset: str, algorithms: list[str] | None = None) -> dict:
    """The study for ``dataset`` with its defaults; ``algorithms`` None = the dataset's list."""
    from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params
    entry = dataset_defaults(dataset)
    if entry.unsupported:
        raise ValueError(f"dataset {dataset!r} does not run with `run` / `compare`: "
                         f"{entry.unsupported}")
    names = list(entry.algorithms) if algorithms is None else list(algorithms)
    study = {"dataset": dataset, "data": copy.deepcopy(entry.data), "model": entry.model,
             "model_args": copy.deepcopy(entry.model_args), "rounds": entry.rounds,
             "algorithms": {}}
    for name in names:
        if name not in ALGORITHMS:
            whose = (f"dataset {dataset!r}'s declared defaults name algorithm {name!r}, which is "
                     "not registered (load the plugin that registers it, or pass --algorithms)"
                     if algorithms is None else f"unknown algorithm {name!r}")
            raise ValueError(f"{whose}; available: {', '.join(sorted(ALGORITHMS))}")
        study["algorithms"][name] = entry.params_for(name, accepted_params(name))
    return study


def preset(name: str) -> dict:
    if name not in PRESET_DATASETS:
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESET_DATASETS))}")
    return dataset_study(PRESET_DATASETS[name])


PRESETS = PRESET_DATASETS  # preset name -> its dataset (the study: ``preset(name)``)
