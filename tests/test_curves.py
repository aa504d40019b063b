"""Per-round evaluation curves (eval_every): recorded inside the scan, they leave the run
unchanged and their last point is the run's final evaluation."""

import jax
import numpy as np
import pytest

from fedclust_jax import metrics
from fedclust_jax.experiment import ExperimentConfig, run_experiment

TINY = {"num_clients": 12, "samples_per_client": 16, "test_samples_per_client": 16, "dim": 6}


def run(**kw):
    return run_experiment(ExperimentConfig(**kw), progress=False)


@pytest.fixture(scope="module")
def ifca_runs():
    base = dict(dataset="synthetic-regression", data=TINY, algorithm="ifca",
                params={"num_clusters": 2, "lr": 0.05, "option": "gradient"}, rounds=4,
                restarts=2, rounds_per_chunk=3)
    return run(**base, eval_every=2), run(**base)


def test_eval_every_leaves_the_run_unchanged(ifca_runs):
    with_curves, without = ifca_runs
    assert with_curves["history"] == without["history"]
    assert with_curves["metrics"] == without["metrics"]
    assert with_curves["restarts"]["objective"] == without["restarts"]["objective"]
    assert "curves" not in without


def test_eval_every_leaves_the_final_state_unchanged():
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.data.registry import build_dataset
    from fedclust_jax.experiment import run_rounds
    from fedclust_jax.models.registry import build_model
    data = build_dataset("synthetic-regression", jax.random.key(0), **TINY)
    alg = build_algorithm("ifca", build_model("linear", data), {"num_clusters": 2, "lr": 0.05}, data)
    runs = [run_rounds(alg, data, jax.random.key(1), rounds=3, progress=False, eval_every=e)
            for e in (None, 1)]
    for a, b in zip(jax.tree.leaves(runs[0][0]), jax.tree.leaves(runs[1][0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert set(runs[1][1]) - set(runs[0][1]) == {"eval.test_loss", "eval.assigned_test_loss",
                                                  "eval.cluster_sizes", "eval.table"}


def test_last_curve_point_is_the_final_evaluation(ifca_runs):
    curves, final = ifca_runs[0]["curves"], ifca_runs[0]["metrics"]
    assert curves["round"] == [2, 4]
    for key in ("test_loss", "assigned_test_loss", "misclustering", "ari"):
        assert len(curves[key]) == 2
        np.testing.assert_allclose(curves[key][-1], final[key], rtol=1e-6, atol=1e-7)
    assert curves["num_clusters_found"][-1] == final["num_clusters_found"]
    assert all(sum(s) == TINY["num_clients"] for s in curves["cluster_sizes"])
    assert all(len(s) == 2 for s in curves["cluster_sizes"])


def test_point_clustering_curves():
    """k-FED clusters points: purity, misclustering and ARI from the recorded tables."""
    r = run(dataset="uifca-gaussian", data={"num_clients": 6, "points_per_client": 12},
            algorithm="kfed", params={"num_clusters": 4}, rounds=2, eval_every=1)
    curves, final = r["curves"], r["metrics"]
    assert curves["round"] == [1, 2]
    for key in ("purity", "misclustering", "ari", "objective"):
        np.testing.assert_allclose(curves[key][-1], final[key], rtol=1e-6, atol=1e-7)
    assert curves["num_clusters_found"][-1] == final["num_clusters_found"]
    assert sum(curves["cluster_sizes"][-1]) == 6 * 12


def test_tables_give_the_direct_metrics():
    """Misclustering from a table equals a brute-force best matching; purity as direct."""
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 12))
        found, true = rng.integers(-1, 5, n), rng.integers(-1, 3, n)
        table = metrics.table_with_unassigned(found, true)
        keep = true >= 0
        f, t = found[keep], true[keep]
        if len(t):
            assigned = f >= 0
            expect = 1.0 - _matched(f[assigned], t[assigned]) / len(t)
            assert metrics.misclustering_from_table(table) == pytest.approx(expect)
        assert metrics.purity_from_table(table) == pytest.approx(metrics.purity(found, true), nan_ok=True)


def _matched(f, t):
    """Largest one-to-one matching of found to true labels, by brute force."""
    import itertools
    fs, ts = sorted(set(f)), sorted(set(t))
    best = 0
    if not fs:
        return 0
    for perm in itertools.permutations(fs, min(len(fs), len(ts))):
        best = max(best, sum(int(np.sum((f == a) & (t == b))) for a, b in zip(perm, ts)))
        if len(fs) < len(ts):
            for sub in itertools.permutations(ts, len(fs)):
                best = max(best, sum(int(np.sum((f == a) & (t == b))) for a, b in zip(fs, sub)))
    return best


def test_bad_eval_every_is_refused():
    with pytest.raises(ValueError, match="eval_every"):
        ExperimentConfig(eval_every=0)


def test_cli_flag_sets_eval_every():
    from fedclust_jax import cli
    from fedclust_jax.experiment import study_configs
    args = cli.make_parser().parse_args(["compare", "--eval-every", "5"])
    assert {cfg.eval_every for _, cfg in study_configs(cli.build_study(args, single=False))} == {5}
