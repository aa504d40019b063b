"""Per-dataset defaults (the papers' settings) and named studies.

A study is a dict: dataset, data (builder parameters), model, model_args, rounds, seed,
and algorithms: {label: params}; params hold the algorithm's flat parameters, plus
optionally "algorithm" (the registered name, default: the label), "restarts" and "rounds".

``DATASET_DEFAULTS`` holds one entry per dataset: the model its paper trains, the round budget,
the local training every algorithm gets (``training``: applied to each chosen algorithm
that takes the key), per-algorithm settings from the paper, the algorithms ``compare``
runs by default, and where the numbers come from. ``dataset_study(name, algorithms)``
turns an entry into a study, so ``--dataset X`` never inherits another dataset's settings.
Settings the papers leave open are marked "unstated" in ``source`` with the choice made.
"""

from __future__ import annotations

import copy

# Keys of a DATASET_DEFAULTS entry: model (None = linear for regression, MLP for classification),
# model_args, data (builder parameters overriding its defaults), rounds, training,
# algorithms {name: params}, source; optional "unsupported" (why no registered algorithm
# runs on it).
DATASET_DEFAULTS: dict[str, dict] = {
    "synthetic-regression": {
        "model": "linear", "model_args": {}, "data": {}, "rounds": 300,
        # Local GD on n=100 < d=1000 points needs lr < 2 / lambda_max(2 X^T X / n) ~ 0.058.
        "training": {"lr": 0.01, "steps": 10},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 2, "option": "gradient", "lr": 0.1, "restarts": 10}},
        "source": "IFCA paper Sec. 3.1 / Fig. 3(a): k=2, m=100, n=100, d=1000, 300 rounds, "
                  "option I, gamma=0.1 from the sweep {0.01, 0.1, 1}, 10 random restarts",
    },
    "gaussian-mixture": {
        "model": "mlp", "model_args": {"hidden": [64]}, "data": {}, "rounds": 50,
        "training": {"lr": 0.1, "steps": 5},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 4, "option": "model", "restarts": 3}, "oracle": {}},
        "source": "this package's concept-shift mixture (no paper): MLP 20-64-10, option II",
    },
    "rotated-digits": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 50,
        "training": {"lr": 0.1, "steps": 10},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 4, "option": "model", "restarts": 3}, "oracle": {}},
        "source": "IFCA rotated-MNIST settings (MLP hidden 200, tau=10 full-batch steps, "
                  "gamma=0.1, option II) on sklearn's 8x8 digits; 50 rounds",
    },
    "ifca-rotated-mnist": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 300,
        "training": {"lr": 0.1, "steps": 10},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 4, "option": "model"}, "oracle": {}},
        "source": "IFCA paper Sec. 3.2: MLP 784-200-10, full participation, tau=10 full-batch "
                  "steps, gamma=0.1, option II; 300 rounds (authors' code)",
    },
    "ifca-rotated-cifar10": {
        "model": "cifar-cnn", "model_args": {}, "data": {}, "rounds": 600,
        "training": {"lr": 0.25, "lr_decay": 0.99, "steps": 50, "batch_size": 50,
                     "participation": 0.1},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
        "source": "IFCA paper Sec. 3.3: 10% participation, lr x0.99 per round, batch 50; the "
                  "authors' code: lr0=0.25, 5 local epochs (50 steps), 600 rounds. "
                  "Augmentation is not applied",
    },
    "femnist": {
        "model": "femnist-cnn", "model_args": {}, "data": {"num_clients": 50}, "rounds": 200,
        "training": {"lr": 0.04, "steps": 5, "batch_size": 100},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 4, "option": "model"},
                       "srfca": {"beta": 0.2092, "one_shot_steps": 1000, "rounds_per_refine": 200,
                                 "rounds": 2}},
        "source": "SR-FCA paper and code: 50 writers, CNN, SGD lr 0.04, batch 100, 200 rounds "
                  "x 5 local steps, IFCA K=4, SR-FCA beta 0.2092, ONE_SHOT 1000 steps, 2 REFINE "
                  "steps (lambda: tune it, --set srfca.lam=...)",
    },
    "shakespeare": {
        "model": "shakespeare-lstm", "model_args": {}, "data": {"num_clients": 50}, "rounds": 6,
        "training": {"lr": 0.8, "steps": 400, "batch_size": 10},
        "algorithms": {"fedavg": {}, "local": {},
                       "ifca": {"num_clusters": 3, "option": "model"},
                       "srfca": {"beta": 0.15, "lam_quantile": 0.25, "one_shot_steps": 2400,
                                 "rounds_per_refine": 6, "rounds": 2}},
        "source": "SR-FCA paper and code: 50 speakers, 2-layer LSTM(256), SGD lr 0.8, batch 10, "
                  "6 rounds x 400 local steps, IFCA K=3, SR-FCA beta 0.15, lambda the 25th "
                  "percentile of ONE_SHOT distances, ONE_SHOT 2400 steps, 2 REFINE steps",
    },
    "srfca-rotated-mnist": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 50,
        "training": {"optimizer": "adam", "lr": 2e-4, "steps": 5, "batch_size": 50},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 4, "option": "model"},
                       "oracle": {},
                       "srfca": {"beta": 0.15, "one_shot_steps": 250, "rounds_per_refine": 42,
                                 "rounds": 2}},
        "source": "SR-FCA paper and code: MLP 784-200-10, Adam 2e-4, batch 50, 50 rounds x 5 "
                  "local steps, IFCA K=4, SR-FCA beta 0.15, ONE_SHOT 250 steps, 2 REFINE steps "
                  "of 42 rounds (lambda: tune it)",
    },
    "srfca-inverted-mnist": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 50,
        "training": {"optimizer": "adam", "lr": 2e-4, "steps": 5, "batch_size": 50},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"},
                       "oracle": {},
                       "srfca": {"beta": 0.15, "one_shot_steps": 280, "rounds_per_refine": 56,
                                 "rounds": 2}},
        "source": "SR-FCA paper and code: MLP 784-200-10, Adam 2e-4, batch 50, 50 rounds x 5 "
                  "local steps, IFCA K=2, SR-FCA beta 0.15, ONE_SHOT 280 steps, 2 REFINE steps "
                  "of 56 rounds (lambda: tune it)",
    },
    "srfca-rotated-cifar10": {
        "model": "resnet9", "model_args": {}, "data": {}, "rounds": 2400,
        "training": {"lr": 0.5, "momentum": 0.9, "weight_decay": 5e-4, "steps": 1,
                     "batch_size": 100},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
        "source": "SR-FCA paper and code: ResNet9, SGD lr 0.5, momentum 0.9, wd 5e-4, batch 100, "
                  "2400 one-step rounds (the code's one-cycle schedule, label smoothing and "
                  "augmentation are not applied)",
    },
    "srfca-label-cifar10": {
        "model": "resnet9", "model_args": {}, "data": {}, "rounds": 2400,
        "training": {"lr": 0.5, "momentum": 0.9, "weight_decay": 5e-4, "steps": 1,
                     "batch_size": 100},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
        "source": "as srfca-rotated-cifar10 (SR-FCA paper and code)",
    },
    "personalized-mnist": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 100,
        "training": {"lr": 0.1, "steps": 1},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 4, "option": "model"},
                       "fc": {"num_groups": 16}, "oracle": {}},
        "source": "'Provably personalized' paper Table 1: K=4 x 75 clients, FC with 16 "
                  "subgroups and the 20th-percentile radius, one gradient step per round; the "
                  "model (IFCA's MLP), lr, rounds and batch size are unstated (choices here)",
    },
    "brifca-regression": {
        "model": "linear", "model_args": {}, "data": {}, "rounds": 300,
        "training": {"lr": 0.01, "steps": 1},
        "algorithms": {"brifca": {"num_clusters": 5}, "ifca": {"num_clusters": 5, "option": "gradient"},
                       "three-stage": {"num_clusters": 5}},
        "source": "BR-IFCA paper Fig. 1: k=5, m=200, d=50, 300 iterations, lr 0.01 (code)",
    },
    "iid-partition": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 50,
        "training": {"lr": 0.1, "steps": 10},
        "algorithms": {"fedavg": {}, "local": {}},
        "source": "generic partition (no paper): MLP hidden 200, 10 full-batch steps, lr 0.1",
    },
    "dirichlet-partition": {
        "model": "mlp", "model_args": {"hidden": [200]}, "data": {}, "rounds": 50,
        "training": {"lr": 0.1, "steps": 10},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
        "source": "generic partition (no paper): MLP hidden 200, 10 full-batch steps, lr 0.1",
    },
    "threshold-blobs": {
        "unsupported": "it is the threshold-clustering paper's point set (Fig. 4, one point per "
                       "client); use fedclust_jax.core.threshold_clustering.threshold_clustering on it",
    },
    "uifca-gaussian": {
        "model": None, "model_args": {}, "data": {}, "rounds": 20,
        "training": {},
        "algorithms": {"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
        "source": "Chung's thesis, Table 4.1 synthetic runs: T = 20 cluster rounds (the runner's "
                  "rounds), tau = 100 communication rounds of M = 100 local steps (UIFCA's "
                  "defaults; a GPU-scale job: lower comm_rounds / local_steps on a CPU); "
                  "the model is the affine flow, the default for data whose points carry clusters",
    },
    "uifca-subspace": {
        "model": None, "model_args": {}, "data": {}, "rounds": 20,
        "training": {},
        "algorithms": {"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
        "source": "as uifca-gaussian (Chung's thesis, Table 4.1)",
    },
    "uifca-mnist": {
        "model": "real-nvp", "model_args": {}, "data": {}, "rounds": 20,
        "training": {},
        "algorithms": {"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
        "source": "Chung's thesis, Tables 4.2 / 4.3: rotated digit 2, K = 4 rotations, n = K "
                  "clients; benchmarks/uifca/ holds each table's settings",
    },
    "uifca-rotnet-mnist": {
        "model": None, "model_args": {}, "data": {"pca": 32}, "rounds": 20,
        "training": {},
        "algorithms": {"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
        "source": "Chung's thesis, Table 4.3 'MNIST Representations': RotNet features, K = 4 "
                  "rotations, projected on 32 principal components (Table 4.1's dimension)",
    },
    "shakespeare-windows": {
        "model": "shakespeare-lstm", "model_args": {}, "data": {}, "rounds": 6,
        "training": {"lr": 0.8, "steps": 400, "batch_size": 10},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 3, "option": "model"}},
        "source": "as shakespeare (SR-FCA paper and code), the speakers' windows cut or pooled",
    },
    "toy-text": {
        "model": "shakespeare-lstm", "model_args": {"embed": 8, "hidden": 16, "layers": 1},
        "data": {}, "rounds": 10,
        "training": {"lr": 0.5, "steps": 5, "batch_size": 10},
        "algorithms": {"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
        "source": "this project's CI text task: two Markov-chain writers, a small LSTM",
    },
}

# Named studies: a dataset's defaults, under a short name.
PRESET_DATASETS = {"ifca-synthetic": "synthetic-regression",
                   "mixture-classification": "gaussian-mixture",
                   "rotated-digits": "rotated-digits"}
DEFAULT_PRESET = "ifca-synthetic"


def default_model(dataset: str) -> str | None:
    """The model the dataset's paper trains (None: linear for regression, MLP otherwise)."""
    return DATASET_DEFAULTS.get(dataset, {}).get("model")


def algorithm_defaults(dataset: str, algorithm: str, accepted) -> dict:
    """Parameters ``algorithm`` gets on ``dataset``: the dataset's ``training`` keys it
    accepts, then the paper's settings for it (which may add "restarts" and "rounds")."""
    entry = DATASET_DEFAULTS.get(dataset, {})
    params = {k: v for k, v in entry.get("training", {}).items() if k in accepted}
    own = entry.get("algorithms", {}).get(algorithm, {})
    params.update({k: v for k, v in own.items() if k in accepted or k in ("restarts", "rounds")})
    return params


def dataset_study(dataset: str, algorithms: list[str] | None = None) -> dict:
    """The study for ``dataset`` with its defaults; ``algorithms`` None = the dataset's list."""
    from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params
    from fedclust_jax.data.registry import DATASETS as BUILDERS
    if dataset not in BUILDERS:
        raise ValueError(f"unknown dataset {dataset!r}; available: {', '.join(sorted(BUILDERS))}")
    entry = DATASET_DEFAULTS.get(dataset)
    if entry is None:
        raise ValueError(f"dataset {dataset!r} has no defaults in fedclust_jax/presets.py; "
                         "write a study file (--config) for it")
    if "unsupported" in entry:
        raise ValueError(f"dataset {dataset!r} does not run with `run` / `compare`: "
                         f"{entry['unsupported']}")
    names = list(entry["algorithms"]) if algorithms is None else list(algorithms)
    study = {"dataset": dataset, "data": copy.deepcopy(entry["data"]), "model": entry["model"],
             "model_args": copy.deepcopy(entry["model_args"]), "rounds": entry["rounds"],
             "algorithms": {}}
    for name in names:
        if name not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
        study["algorithms"][name] = algorithm_defaults(dataset, name, accepted_params(name))
    return study


def preset(name: str) -> dict:
    if name not in PRESET_DATASETS:
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESET_DATASETS))}")
    return dataset_study(PRESET_DATASETS[name])


PRESETS = PRESET_DATASETS  # preset name -> its dataset (the study: ``preset(name)``)
