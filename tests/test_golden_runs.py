"""Every algorithm's fixed-seed run through the runner equals the values recorded in
``tests/golden_runs.json``: a change of the round loop, the key streams or the end of run
that alters any algorithm's results fails here.

Each case is a three-round run of two restarts on tiny data, with curves every round.
The recorded values are the chosen restart's final metrics, every restart's training
objective, the chosen restart's per-round history and its curves. Regenerate (only when a
change of results is intended, and say why in the commit):
``FEDCLUST_WRITE_GOLDEN=1 pytest -n 0 tests/test_golden_runs.py`` (under the suite's XLA flags,
``tests/conftest.py``).
"""

from __future__ import annotations

import json
import math
import os
import pathlib

import jax
import numpy as np
import pytest

from fedclust_jax.experiment import ExperimentConfig, run_experiment

GOLDEN = pathlib.Path(__file__).with_name("golden_runs.json")
REG = dict(num_clients=8, samples_per_client=12, test_samples_per_client=6, dim=5)
MIX = dict(num_clients=8, num_clusters=2, samples_per_client=12, test_samples_per_client=6,
           dim=6, num_classes=3)
BYZ = dict(num_clients=11, num_clusters=2, byz_frac=0.1, dim=5, samples_per_client=12,
           test_samples_per_client=6)
PTS = dict(num_clients=2, points_per_client=16, num_clusters=2, dim=2)
MLP = dict(model="mlp", model_args=dict(hidden=[4]))
FLOW = dict(comm_rounds=1, local_steps=2, batch_size=8, lr=1e-2)

# name: (dataset, data, extra config, algorithm parameters)
CASES = {
    "fedavg": ("synthetic-regression", REG, {}, dict(lr=0.05)),
    "local": ("synthetic-regression", REG, {}, dict(lr=0.05)),
    "ifca": ("synthetic-regression", REG, {}, dict(num_clusters=2, option="gradient", lr=0.1)),
    "ifca-model": ("gaussian-mixture", MIX, MLP, dict(algorithm="ifca", num_clusters=2,
                                                      option="model", lr=0.1, steps=2,
                                                      batch_size=4, participation=0.5)),
    "oracle": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, steps=2)),
    "oneshot-kmeans": ("synthetic-regression", REG, {}, dict(num_clusters=2, lr=0.05)),
    "srfca": ("synthetic-regression", REG, {}, dict(lr=0.05)),
    "cfl": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, steps=2)),
    "local-kmeans": ("synthetic-regression", REG, {}, dict(num_clusters=2, lr=0.05)),
    "oneshot-ifca": ("synthetic-regression", REG, {}, dict(lr=0.05)),
    "fedsoft": ("gaussian-mixture", MIX, MLP, dict(num_clusters=2, lr=0.1, steps=2)),
    "brifca": ("brifca-regression", BYZ, {}, dict(num_clusters=2, lr=0.05)),
    "three-stage": ("brifca-regression", BYZ, {}, dict(num_clusters=2, lr=0.05)),
    "fc": ("gaussian-mixture", MIX, MLP, dict(lr=0.1)),
    "mc": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, num_clusters=2)),
    "myopic": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, num_clusters=2)),
    "ditto": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, steps=2)),
    "knn-per": ("gaussian-mixture", MIX, MLP, dict(lr=0.1, steps=2)),
    "uifca": ("uifca-gaussian", PTS, {}, dict(num_clusters=2, **FLOW)),
    "kfed": ("uifca-gaussian", PTS, {}, dict(num_clusters=2)),
    "clustergan": ("stripes", {}, {}, dict(num_clusters=2, noise_dim=3, local_steps=2,
                                           batch_size=8, critic_steps=1, optimizer="adam",
                                           lr=5e-3, width=8, fc_width=16)),
}


def stripes():
    """Two 8x8 patterns (horizontal and vertical stripes, noisy), 2 clients of 16 points."""
    from fedclust_jax.data.points import points_from_pools
    rng = np.random.default_rng(0)
    horiz = np.broadcast_to((np.arange(8) % 2 == 0).astype(np.float32)[:, None], (8, 8))
    pools = [np.clip(p + 0.15 * rng.normal(size=(40, 8, 8)), 0, 1).astype(np.float32)
             for p in (horiz, horiz.T)]
    return points_from_pools(jax.random.key(2), pools, num_clients=2, points_per_client=16,
                             heterogeneity=0.5)


def run_case(name: str) -> dict:
    dataset, data, extra, params = CASES[name]
    params = dict(params)
    algorithm = params.pop("algorithm", name)
    given = stripes() if dataset == "stripes" else None
    cfg = ExperimentConfig(dataset="uifca-gaussian" if given is not None else dataset,
                           data=data, algorithm=algorithm, params=params, rounds=3,
                           restarts=2, eval_every=1, seed=3, **extra)
    out = run_experiment(cfg, data=given, progress=False)
    numbers = lambda d: {k: v for k, v in d.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)}
    curves = {k: v for k, v in (out.get("curves") or {}).items() if k != "cluster_sizes"}
    return {"metrics": numbers(out["metrics"]), "objective": out["restarts"]["objective"],
            "chosen": out["restarts"]["chosen"], "history": out["history"], "curves": curves}


def assert_close(got, want, where=""):
    if isinstance(want, dict):
        assert set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"{where}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        if want is None or (isinstance(want, float) and math.isnan(want)):
            assert got is None or math.isnan(got), f"{where}: {got} != {want}"
        else:
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6, err_msg=where)
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_seed_run_unchanged(name):
    got = json.loads(json.dumps(run_case(name)))
    if os.environ.get("FEDCLUST_WRITE_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[name] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        pytest.skip("written")
    assert_close(got, json.loads(GOLDEN.read_text())[name], name)
