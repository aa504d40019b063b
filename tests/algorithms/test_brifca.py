"""BR-IFCA: equality with IFCA option I without Byzantines, robustness to the outlier attack,
config validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.robust_synthetic import brifca_regression
from fedclust_jax.metrics import parameter_error
from fedclust_jax.models.linear import linear_regression


def _run(alg, data, rounds, seed=0, params=None):
    state = alg.init(jax.random.key(seed), data, params)
    step = jax.jit(lambda s, k: alg.round(s, k, data)[0])
    for t in range(rounds):
        state = step(state, jax.random.fold_in(jax.random.key(1), t))
    return state


@pytest.fixture(scope="module")
def clean():
    return brifca_regression(jax.random.key(0), num_clients=40, num_clusters=2, byz_frac=0.0,
                             dim=10, samples_per_client=50, test_samples_per_client=10)


MODEL10, LOCAL1 = linear_regression(10), LocalTraining(steps=1, lr=0.1)
START = jax.vmap(MODEL10.init)(jax.random.split(jax.random.key(3), 2))


@pytest.fixture(scope="module")
def ifca_run(clean):
    """IFCA option I (gradient step), 15 rounds from START: run once, compared with both
    BR-IFCA variants below."""
    ifca = IFCA(MODEL10, IFCAConfig(num_clusters=2, option="gradient", local=LOCAL1))
    return _run(ifca, clean, 15, params=START)


@pytest.mark.parametrize("aggregator", ["trimmed_mean", "mean"])
def test_no_byzantine_equals_ifca_option_one(clean, ifca_run, aggregator):
    br = BRIFCA(MODEL10, BRIFCAConfig(num_clusters=2, aggregator=aggregator, trim_frac=0.0,
                                      byz_frac=0.0, local=LOCAL1, step="ifca"))
    a = _run(br, clean, 15, params=START)
    b = ifca_run
    np.testing.assert_allclose(a.params["theta"], b.params["theta"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a.assign, b.assign)


def test_robust_rules_beat_mean_under_outlier_attack():
    data = brifca_regression(jax.random.key(1), num_clients=80, num_clusters=2, byz_frac=0.05,
                             dim=20, samples_per_client=100, test_samples_per_client=10)
    model = linear_regression(20)
    init = jnp.asarray(data.true_params) + 0.1 * jax.random.normal(jax.random.key(5), (2, 20))
    errors = {}
    for agg in ("mean", "median", "trimmed_mean"):
        cfg = BRIFCAConfig(num_clusters=2, aggregator=agg, trim_frac=0.1, byz_frac=0.05,
                           attack="outlier", local=LocalTraining(steps=1, lr=0.1))
        s = _run(BRIFCA(model, cfg), data, 60, params={"theta": init})
        errors[agg] = parameter_error(s.params["theta"], data.true_params)
    assert errors["median"] < 0.25 and errors["trimmed_mean"] < 0.25
    assert errors["mean"] > 2 * max(errors["median"], errors["trimmed_mean"])


def test_config_validation():
    with pytest.raises(ValueError, match="trim_frac"):
        BRIFCAConfig(trim_frac=0.5)
    with pytest.raises(ValueError, match="aggregation rule"):
        BRIFCAConfig(aggregator="mode")
    data = brifca_regression(jax.random.key(0), num_clients=4, num_clusters=2, byz_frac=0.0,
                             dim=3, samples_per_client=5, test_samples_per_client=2)
    with pytest.raises(ValueError, match="clusters"):
        BRIFCA(linear_regression(3), BRIFCAConfig(num_clusters=5)).check_data(data)
    with pytest.raises(ValueError, match="honest"):
        BRIFCA(linear_regression(3), BRIFCAConfig(byz_frac=0.9)).check_data(data)


def test_registry_builds_and_validates():
    from fedclust_jax.algorithms.registry import build_algorithm
    data = brifca_regression(jax.random.key(0), num_clients=20, num_clusters=2, byz_frac=0.1,
                             dim=3, samples_per_client=5, test_samples_per_client=2)
    model = linear_regression(3)
    for name in ("brifca", "three-stage", "fc", "mc", "myopic", "ditto"):
        build_algorithm(name, model, {"lr": 0.1}, data)
    with pytest.raises(ValueError, match="trim_frac"):
        build_algorithm("brifca", model, {"trim_frac": 0.6}, data)
    with pytest.raises(ValueError, match="honest"):
        build_algorithm("fc", model, {"byz_frac": 0.99}, data)
    with pytest.raises(ValueError, match="clients"):
        build_algorithm("three-stage", model, {"num_clusters": 30}, data)


def test_near_truth_init_starts_each_model_init_radius_from_its_truth(clean):
    alg = BRIFCA(MODEL10, BRIFCAConfig(num_clusters=2, init="near_truth", init_radius=0.25))
    alg.check_data(clean)
    theta = alg.init(jax.random.key(5), clean).params["theta"]
    gaps = np.linalg.norm(np.asarray(theta - clean.true_params), axis=1)
    np.testing.assert_allclose(gaps, [0.25, 0.25], rtol=1e-5)
    other = alg.init(jax.random.key(6), clean).params["theta"]
    assert not np.allclose(theta, other)                     # the direction is drawn per key
    with pytest.raises(ValueError, match="near_truth"):
        alg.check_data(clean.replace(true_params=None))
    with pytest.raises(ValueError, match="init_radius"):
        BRIFCAConfig(init="near_truth", init_radius=-1.0)
