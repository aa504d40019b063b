"""benchmarks/ifca_figure3.py: the vmapped trials x inits equal the library's run loop, the
Hungarian dist equals metrics.parameter_error, and the success rule on a toy point."""

import os
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))

import ifca_figure3 as fig3  # noqa: E402
from fedclust_jax import metrics  # noqa: E402
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig  # noqa: E402
from fedclust_jax.core.train import LocalTraining  # noqa: E402
from fedclust_jax.data.synthetic import mixed_linear_regression  # noqa: E402
from fedclust_jax.experiment import run_rounds  # noqa: E402
from fedclust_jax.models.linear import linear_regression  # noqa: E402

TOY = dict(k=2, m=8, n=40, d=6, R=3.0, sigma=0.1)


@pytest.mark.parametrize("k", [2, 4])
def test_hungarian_dist_matches_metrics(k):
    est, truth = np.random.default_rng(k).normal(size=(2, k, 5)).astype(np.float32)
    assert float(fig3.hungarian_dist(est, truth)) == pytest.approx(
        metrics.parameter_error(est, truth, "hungarian"), rel=1e-5)


@pytest.mark.parametrize("chunk", ["auto", None])
def test_trials_equal_run_rounds(chunk):
    dkey, ikey = jax.random.PRNGKey(3), jax.random.PRNGKey(4)
    # trial 0 of a vmapped batch of two trials (the second a different data key); the
    # library's run loop uses the default layout, so chunk=None also checks the layout
    dkeys = np.stack([dkey, jax.random.PRNGKey(5)])
    ikeys = np.stack([jax.random.split(ikey, 3), jax.random.split(jax.random.PRNGKey(6), 3)])
    got = np.asarray(fig3.trial_dists(dkeys, ikeys, gamma=0.1, rounds=20, record=10,
                                      chunk=chunk, **TOY))
    assert got.shape == (2, 3, 2)                                              # [T, inits, records]
    data = mixed_linear_regression(dkey, num_clients=8, num_clusters=2, samples_per_client=40,
                                   test_samples_per_client=1, dim=6, noise_std=0.1, separation=3.0)
    alg = IFCA(linear_regression(6), IFCAConfig(num_clusters=2, option="gradient",
                                                local=LocalTraining(steps=1, lr=0.1)))
    states, _ = run_rounds(alg, data, ikey, rounds=20, restarts=3, progress=False)
    want = [metrics.parameter_error(p, data.true_params) for p in np.asarray(states.params["theta"])]
    np.testing.assert_allclose(got[0, :, -1], want, rtol=1e-4)


def test_success_rule_on_toy_point():
    point = {key: TOY[key] for key in ("m", "n", "R", "sigma")}
    fig3.trial_program.cache_clear()
    res = fig3.run_point(point, k=2, d=6, trials=3, inits=2, rounds=40, record=20,
                         trial_batch=3, seed=0, scaling="norm")
    best = np.array(res["best_dist"])
    per_gamma = np.array(res["best_dist_per_gamma"])                           # [T, 3]
    np.testing.assert_allclose(best, per_gamma.min(axis=1))
    assert res["threshold"] == pytest.approx(0.6 * 0.1 + fig3.TOL)
    assert res["chunk"] == "auto" and res["trial_batch"] == 3
    assert res["success"] == pytest.approx(np.mean(best <= res["threshold"]))
    # the step sizes are traced: one compiled program serves the point's whole sweep
    assert fig3.trial_program.cache_info().misses == 1
    # 160 points per cluster in d = 6, separation 3 >> sigma: gamma = 1 (one-step, the
    # population map is theta - gamma * H (theta - theta*)) finds both models in every trial
    assert res["success"] == 1.0


def test_combine_keeps_the_later_line_and_lists_the_earlier(tmp_path, monkeypatch):
    import json
    base = dict(panel="a", m=100, n=100, R=1.0, sigma=0.1, k=2, trials=2, inits=1,
                gammas=[0.1], rounds=300, threshold=0.061, best_dist=[0.05, 0.5],
                first_success_round=[100, None], seconds=1.0,
                uptime_before="load average: 1.0, 1.0, 1.0")
    lines = [dict(base, success=0.5, command="old"), dict(base, success=1.0, command="new")]
    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "t.md"
    monkeypatch.setattr(fig3, "plot", lambda rows, path: None)
    fig3.combine(type("A", (), dict(combine=[str(src)], notes_file=None, out=str(out)))())
    text = out.read_text()
    table = [l for l in text.splitlines() if l.startswith("| a |")]
    assert len(table) == 1 and "| 1.00 |" in table[0]
    assert "success 0.50 (2 trials), by `old`" in text


def test_first_success_round_counts_only_trials_that_succeed_at_the_end(tmp_path, monkeypatch):
    """A trial that passed the threshold early (a diverging step size) and ended above it is
    not a success and gives no first-success round."""
    import json
    point = dict(panel="c", m=200, n=50, R=0.1, sigma=0.1, k=2, trials=3, inits=1,
                 gammas=[0.01, 0.1, 1.0], rounds=300, threshold=0.061, success=1 / 3,
                 best_dist=[0.05, 0.09, 0.5], first_success_round=[250, 25, None], seconds=1.0,
                 uptime_before="load average: 1.0, 1.0, 1.0", command="c")
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps(point) + "\n")
    out = tmp_path / "t.md"
    monkeypatch.setattr(fig3, "plot", lambda rows, path: None)
    fig3.combine(type("A", (), dict(combine=[str(src)], notes_file=None, out=str(out)))())
    row = [l for l in out.read_text().splitlines() if l.startswith("| c |")][0].split(" | ")
    assert row[10:13] == ["0.33", "0.09", "250"]
