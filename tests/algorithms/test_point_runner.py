"""UIFCA, k-FED and ClusterGAN through the common runner and the registry: chunking,
checkpoint/resume, point-level metrics, the CLI."""

import functools

import jax
import numpy as np
import pytest

from fedclust_jax import cli, metrics
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm
from fedclust_jax.data.points import gaussian_clusters, true_points
from fedclust_jax.experiment import ExperimentConfig, run_experiment, run_rounds
from fedclust_jax.models.flows import FlowModel
from fedclust_jax.models.registry import build_model

UIFCA_PARAMS = dict(num_clusters=2, comm_rounds=1, local_steps=2, batch_size=8, lr=1e-2)


@functools.lru_cache(maxsize=None)
def points():
    return gaussian_clusters(jax.random.key(0), num_clients=3, points_per_client=20,
                             num_clusters=2, dim=2, separation=6.0, heterogeneity=0.5)


@functools.lru_cache(maxsize=None)
def uifca():
    data = points()
    return build_algorithm("uifca", build_model(None, data), UIFCA_PARAMS, data)


def test_registered_and_listed():
    for name in ("uifca", "kfed", "clustergan"):
        assert name in ALGORITHMS
        assert name in cli.list_everything()
    assert isinstance(build_model(None, points()), FlowModel)      # point data: a flow


def test_uifca_chunks_and_resume_give_the_uninterrupted_run(tmp_path):
    alg, data, key = uifca(), points(), jax.random.key(1)
    whole, hist = run_rounds(alg, data, key, rounds=3, restarts=2, rounds_per_chunk=3,
                             progress=False)
    path = str(tmp_path / "ck.npz")
    run_rounds(alg, data, key, rounds=2, restarts=2, rounds_per_chunk=1, progress=False,
               checkpoint=path)
    resumed, hist2 = run_rounds(alg, data, key, rounds=3, restarts=2, rounds_per_chunk=1,
                                progress=False, checkpoint=path)
    np.testing.assert_array_equal(whole.assign, resumed.assign)
    np.testing.assert_allclose(hist["objective"], hist2["objective"], rtol=1e-6)
    assert whole.assign.shape == (2,) + data.x.shape[:2] and hist["cluster_sizes"].shape == (2, 3, 2)


def test_experiment_reports_point_metrics_of_the_chosen_restart():
    data = points()
    cfg = ExperimentConfig(dataset="uifca-gaussian", algorithm="uifca", params=UIFCA_PARAMS,
                           rounds=2, restarts=2)
    out = run_experiment(cfg, data=data, progress=False)
    m = out["metrics"]
    assert out["restarts"]["chosen"] == int(np.argmin(out["restarts"]["objective"]))
    assert m["objective"] == pytest.approx(min(out["restarts"]["objective"]), rel=1e-5)
    assert 0.5 <= m["purity"] <= 1.0 and 0.0 <= m["misclustering"] <= 0.5
    assert len(out["restarts"]["misclustering"]) == 2


def test_kfed_through_the_cli_finds_separated_gaussians(capsys):
    code = cli.main(["run", "--algorithm", "kfed", "--dataset", "uifca-gaussian", "--data",
                     "num_clients=4", "--data", "points_per_client=30", "--data", "dim=4",
                     "--clusters", "4", "--rounds", "1", "--no-progress"])
    assert code == 0
    row = [l for l in capsys.readouterr().out.splitlines() if l.split()[:1] == ["kfed"]][0]
    assert row.split()[1:3] == ["1.0000", "0.0000"]                  # purity, misclustering


def test_kfed_objective_is_the_kmeans_objective():
    data = points()
    alg = build_algorithm("kfed", None, dict(num_clusters=2, iters=5, restarts=2), data)
    state = alg.init(jax.random.key(0), data)
    x = np.asarray(data.x).reshape(-1, 2)
    a = np.asarray(state.assign).ravel()
    want = np.mean(np.sum((x - np.asarray(state.centres)[a]) ** 2, 1))
    assert float(alg.objective(state, data)) == pytest.approx(want, rel=1e-5)
    assert metrics.purity(a, true_points(data).ravel()) == 1.0


def test_uifca_rejects_a_model_that_is_not_a_flow():
    data = points()
    with pytest.raises(ValueError, match="flow model"):
        build_algorithm("uifca", object(), UIFCA_PARAMS, data)
    with pytest.raises(ValueError, match="square images"):
        build_algorithm("clustergan", None, dict(num_clusters=2), data)


def test_uifca_init_assign_kfed_starts_from_kfed():
    data = points()
    alg = build_algorithm("uifca", build_model(None, data),
                          dict(UIFCA_PARAMS, init_assign="kfed"), data)
    key = jax.random.key(3)
    from fedclust_jax.core.kmeans import kfed
    want = kfed(jax.random.split(key)[1], data.x, data.count, 2).assign
    np.testing.assert_array_equal(alg.init(key, data).assign, want)
