"""One process of a multi-process IFCA run, started by tests/core/test_multiprocess.py:

    python multiprocess_run.py PORT NUM_PROCESSES PROCESS_ID OUT_JSON [ROUNDS]

Every process joins through ``jax.distributed.initialize`` (CPU collectives: gloo), builds the
same data from the same seed and runs ``run_experiment`` (``CONFIG``, ROUNDS rounds if given)
over all processes' devices; process 0 writes the result to OUT_JSON, and every process its
own shards of the run's checkpoint OUT_JSON.ckpt (``fedclust_jax.checkpoint``: files
OUT_JSON.ckpt.p<i>-of-2.<a|b>.npz). When those files exist, the run resumes from them."""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from fedclust_jax.core.sharding import initialize_processes  # noqa: E402

CONFIG = dict(dataset="synthetic-regression",
              data=dict(num_clients=16, num_clusters=2, samples_per_client=20, dim=5,
                        separation=3.0),
              algorithm="ifca", params=dict(num_clusters=2, participation=0.5),
              rounds=4, restarts=2, rounds_per_chunk=2)


def main():
    port, num_processes, process_id, out_path = sys.argv[1:5]
    config = dict(CONFIG, rounds=int(sys.argv[5])) if len(sys.argv) > 5 else CONFIG
    initialize_processes(f"127.0.0.1:{port}", int(num_processes), int(process_id), timeout_s=60)
    import jax

    from fedclust_jax.experiment import ExperimentConfig, run_experiment
    # the checkpoint: every process saves its own shards at the end of the run
    result = run_experiment(ExperimentConfig(**config), progress=False, devices=jax.device_count(),
                            checkpoint=out_path + ".ckpt.npz")
    result["process_count"] = jax.process_count()
    result["device_count"] = jax.device_count()
    if jax.process_index() == 0:
        with open(out_path, "w") as f:
            json.dump(result, f, default=float)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
