"""The runner: checkpoint/resume equals an uninterrupted run. (``run_experiment`` over a
clients mesh of 8 devices equals one device: tests/core/test_sharding.py, which starts the one
8-device subprocess.)"""

import numpy as np
import pytest

from fedclust_jax.experiment import ExperimentConfig, chunk_length, run_experiment

SMALL = dict(dataset="gaussian-mixture",
             data=dict(num_clients=8, num_clusters=2, samples_per_client=10, dim=4, num_classes=3),
             algorithm="ifca", params=dict(num_clusters=2, batch_size=4, participation=0.5))


def test_chunk_length_divides_rounds():
    assert chunk_length(300, None) == 30 and chunk_length(7, None) == 1 and chunk_length(12, 5) in (4, 6)


def test_resumed_run_equals_uninterrupted(tmp_path):
    path = str(tmp_path / "ckpt.npz")
    full = run_experiment(ExperimentConfig(**SMALL, rounds=6, rounds_per_chunk=2), progress=False)
    run_experiment(ExperimentConfig(**SMALL, rounds=2, rounds_per_chunk=2), progress=False, checkpoint=path)
    resumed = run_experiment(ExperimentConfig(**SMALL, rounds=6, rounds_per_chunk=2), progress=False,
                             checkpoint=path)
    assert resumed["metrics"] == full["metrics"]
    np.testing.assert_allclose(resumed["history"]["train_loss"], full["history"]["train_loss"], rtol=1e-6)
    other = dict(SMALL, seed=1)
    with pytest.raises(ValueError, match="another configuration"):
        run_experiment(ExperimentConfig(**other, rounds=6), progress=False, checkpoint=path)
