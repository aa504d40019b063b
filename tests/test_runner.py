"""The runner: checkpoint/resume equals an uninterrupted run; sharding over a clients mesh
gives the same result as one device."""

import os
import subprocess
import sys
import textwrap

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


def test_sharded_run_equals_single_device():
    script = textwrap.dedent("""
        import json
        from fedclust_jax.experiment import ExperimentConfig, run_experiment
        cfg = ExperimentConfig(dataset="gaussian-mixture",
            data=dict(num_clients=16, num_clusters=2, samples_per_client=10, dim=4, num_classes=3),
            algorithm="ifca", params=dict(num_clusters=2, batch_size=4), rounds=3)
        a = run_experiment(cfg, progress=False)
        b = run_experiment(cfg, progress=False, devices=8)
        print(json.dumps([a["history"]["train_loss"], b["history"]["train_loss"],
                          a["metrics"]["misclustering"], b["metrics"]["misclustering"]]))
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    la, lb, ma, mb = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    assert ma == mb
