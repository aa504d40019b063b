"""Named studies: a dataset, a round budget and per-algorithm parameters that work for it.

A study is a dict: dataset, data (builder parameters), model, model_args, rounds, seed,
and algorithms: {label: params}; params hold the algorithm's flat parameters, plus
optionally "algorithm" (the registered name, default: the label) and "restarts".
"""

from __future__ import annotations

import copy

PRESETS: dict[str, dict] = {
    # IFCA paper, Figure 3(a) setting: k=2, m=100, n=100, d=1000, theta* rescaled to norm R.
    # Step sizes: gradient IFCA uses gamma=0.1 from the paper's sweep {0.01, 0.1, 1};
    # local GD on n=100 < d=1000 points needs lr < 2 / lambda_max(2 X^T X / n) ~ 0.058.
    "ifca-synthetic": {
        "dataset": "synthetic-regression",
        "data": {"num_clients": 100, "num_clusters": 2, "samples_per_client": 100,
                 "dim": 1000, "noise_std": 0.1, "separation": 1.0, "scaling": "norm"},
        "rounds": 300,
        "algorithms": {
            "fedavg": {"lr": 0.01, "steps": 10},
            "local": {"lr": 0.01, "steps": 10},
            "ifca": {"num_clusters": 2, "option": "gradient", "lr": 0.1, "restarts": 10},
        },
    },
    # Concept-shift Gaussian mixture (labels shifted per cluster), MLP, model averaging.
    "mixture-classification": {
        "dataset": "gaussian-mixture",
        "data": {"num_clients": 100, "num_clusters": 4, "samples_per_client": 100, "dim": 20},
        "model_args": {"hidden": [64]},
        "rounds": 50,
        "algorithms": {
            "fedavg": {"lr": 0.1, "steps": 5},
            "local": {"lr": 0.1, "steps": 5},
            "ifca": {"num_clusters": 4, "option": "model", "lr": 0.1, "steps": 5, "restarts": 3},
            "oracle": {"lr": 0.1, "steps": 5},
        },
    },
    # Real data without a download: scikit-learn's 8x8 digits rotated by k*90 degrees (k=4).
    "rotated-digits": {
        "dataset": "rotated-digits",
        "data": {"num_clusters": 4, "num_clients": 40, "n": 100, "n_test": 40},
        "model_args": {"hidden": [200]},
        "rounds": 50,
        "algorithms": {
            "fedavg": {"lr": 0.1, "steps": 10},
            "local": {"lr": 0.1, "steps": 10},
            "ifca": {"num_clusters": 4, "option": "model", "lr": 0.1, "steps": 10, "restarts": 3},
            "oracle": {"lr": 0.1, "steps": 10},
        },
    },
}
DEFAULT_PRESET = "ifca-synthetic"


def preset(name: str) -> dict:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESETS))}")
    return copy.deepcopy(PRESETS[name])
