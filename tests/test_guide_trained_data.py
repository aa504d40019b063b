"""A finished run's data, rebuilt: ``Trained.rebuild_data`` builds the dataset of the saved
config from the runner's key (``fedclust_jax.data_key``), so ``predict`` on its test
examples reproduces the stored per-client accuracy."""

import dataclasses

import jax
import numpy as np
import pytest

from fedclust_jax import data_key, load_trained
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, run_experiment

DATA = dict(num_clients=8, num_clusters=2, samples_per_client=20, test_samples_per_client=16)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cfg = ExperimentConfig(dataset="gaussian-mixture", data=DATA, algorithm="ifca",
                           params=dict(num_clusters=2, lr=0.1, steps=2), rounds=3, seed=3)
    path = str(tmp_path_factory.mktemp("run") / "run.npz")
    run_experiment(cfg, progress=False, keep_state=True)["trained"].save(path)
    return load_trained(path)


def accuracies(trained, data):
    out = []
    for i in range(data.num_clients):
        n = int(data.count_test[i])
        logits = np.asarray(trained.predict(data.x_test[i, :n], client=i))
        out.append(float((logits.argmax(-1) == np.asarray(data.y_test[i, :n])).mean()))
    return np.array(out)


def test_predict_on_the_rebuilt_data_reproduces_the_stored_accuracy(saved):
    data = saved.rebuild_data()
    assert data.num_clients == 8 and data.feature_shape == saved.data.feature_shape
    # predict(client=i) is the model client i is assigned to
    np.testing.assert_allclose(accuracies(saved, data), saved.metrics["assigned_test_acc"],
                               atol=1e-6)
    # the key is the runner's: key(seed) itself builds other data
    assert np.array_equal(np.asarray(build_dataset("gaussian-mixture", data_key(3), **DATA).x),
                          np.asarray(data.x))
    other = build_dataset("gaussian-mixture", jax.random.key(3), **DATA)
    assert not np.array_equal(np.asarray(other.x), np.asarray(data.x))


def test_the_rebuilt_data_keeps_the_runs_dtype_and_needs_its_dataset(saved):
    bf16 = dataclasses.replace(saved, config={**saved.config, "dtype": "bfloat16"})
    assert bf16.rebuild_data().x.dtype.name == "bfloat16"
    gone = dataclasses.replace(saved, config={**saved.config, "dataset": "not-registered"})
    with pytest.raises(ValueError, match="dataset 'not-registered' is not registered; import "
                                         "or --plugin"):
        gone.rebuild_data()
