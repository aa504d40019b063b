"""The memory pre-check refuses a run that cannot fit (before compiling) and passes one that
can; the layout used is recorded in the result."""

import jax
import pytest

from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, resolve_layout, run_experiment
from fedclust_jax.models.registry import build_model

SMALL = ExperimentConfig(
    dataset="gaussian-mixture",
    data=dict(num_clients=8, num_clusters=2, samples_per_client=10, dim=4, num_classes=3),
    algorithm="ifca", params=dict(num_clusters=2), rounds=1)


def test_precheck_refuses_a_run_that_cannot_fit_with_advice():
    with pytest.raises(ValueError, match="--chunk.*restarts.*bfloat16"):
        run_experiment(SMALL, progress=False, memory_limit=1000)


def test_precheck_passes_a_run_that_fits_and_records_the_layout():
    out = run_experiment(SMALL, progress=False, memory_limit=2**30)
    layout = out["layout"]
    assert layout["requested"] == "auto" and layout["backend"] == "cpu"
    assert layout["chunk"] == 1                       # "auto" on one CPU device
    assert 0 < layout["estimated_bytes"]["total"] <= 2**30


def test_one_vmap_needs_more_than_a_chunk_and_a_limit_between_them_refuses_it():
    data = build_dataset(SMALL.dataset, jax.random.key(0), **SMALL.data)
    model = build_model(None, data)
    layouts = {}
    for chunk in ("auto", None):
        alg = build_algorithm("ifca", model, dict(num_clusters=2, chunk=chunk), data)
        layouts[chunk] = resolve_layout(alg, data, memory_limit=2**30)[1]
    lo = layouts["auto"]["estimated_bytes"]["total"]
    hi = layouts[None]["estimated_bytes"]["total"]
    assert lo < hi
    alg = build_algorithm("ifca", model, dict(num_clusters=2, chunk=None), data)
    with pytest.raises(ValueError, match="available"):
        resolve_layout(alg, data, memory_limit=(lo + hi) // 2)
    alg = build_algorithm("ifca", model, dict(num_clusters=2), data)
    assert resolve_layout(alg, data, memory_limit=(lo + hi) // 2)[1]["chunk"] == 1


def test_srfca_one_shot_refused_before_compile_and_admitted_with_the_advised_chunk(monkeypatch):
    """SR-FCA's ONE_SHOT scores every client's data on all N local models: one vmap over the
    clients holds N x N forward passes. A limit between that and a chunked pass refuses the
    vmap before anything compiles, names a chunk that fits, and admits the run with it."""
    import re
    import fedclust_jax.experiment as experiment
    data = dict(num_clients=64, num_clusters=2, samples_per_client=50, dim=20, num_classes=5)
    cfg = lambda chunk: ExperimentConfig(
        dataset="gaussian-mixture", data=data, model="mlp", model_args=dict(hidden=[64]),
        algorithm="srfca", params=dict(chunk=chunk, steps=1, t=4), rounds=1)
    built = build_dataset("gaussian-mixture", jax.random.key(0), **data)
    alg = build_algorithm("srfca", build_model("mlp", built, hidden=[64]),
                          dict(chunk=None, steps=1, t=4), built)
    from fedclust_jax.core import memory
    whole = memory.estimate(alg, built, chunk=None)
    one = memory.estimate(alg, built, chunk=1)
    assert whole["chunk_work"] > 40 * one["chunk_work"]     # N models scored per client
    assert whole["pairwise"] >= 64 * 64 * 4 * 3
    limit = (whole["total"] + one["total"]) // 2
    called = []
    real = experiment.run_rounds
    monkeypatch.setattr(experiment, "run_rounds", lambda *a, **k: called.append(1) or real(*a, **k))
    with pytest.raises(ValueError, match=r"--chunk \d+ fits") as refused:
        run_experiment(cfg(None), progress=False, memory_limit=limit)
    assert not called                                        # refused before any round ran
    chunk = int(re.search(r"--chunk (\d+) fits", str(refused.value)).group(1))
    assert 1 <= chunk < 64
    out = run_experiment(cfg(chunk), progress=False, memory_limit=limit)
    assert called and out["layout"]["chunk"] == chunk
    assert out["layout"]["estimated_bytes"]["total"] <= limit
