"""Run by tests/core/test_sharding.py in a subprocess with 8 forced host CPU devices (the
flag must be set before JAX starts). Prints one JSON object: the shardings of data and
state leaves, the results of one-device and 8-device runs of IFCA, Local (softmax regression) and FedAvg,
and ``run_experiment`` with devices=8 against one device (tests/test_runner.py's check, in the same
process: each extra Python + JAX start costs seconds)."""

import json
import os
import sys

# appended: the flags the test run sets (tests/conftest.py's fast-compile level) stay
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), os.path.dirname(HERE)]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fedclust_jax.algorithms.registry import build_algorithm  # noqa: E402
from fedclust_jax.core.sharding import client_mesh, shard_clients, shard_state  # noqa: E402
from fedclust_jax.experiment import run_rounds  # noqa: E402
from fedclust_jax.models.registry import build_model  # noqa: E402
from helpers import small_classification, small_regression  # noqa: E402

N = 16
mesh = client_mesh()
spec = lambda a: [None if s is None else str(s) for s in a.sharding.spec]  # noqa: E731
out = {"devices": jax.device_count()}

# Data: every per-client field split, ground truth replicated.
reg = small_regression(num_clients=N)
sharded = shard_clients(reg, mesh)
out["data_specs"] = {name: spec(getattr(sharded, name)) for name in
                     ("x", "y", "count", "x_test", "y_test", "count_test", "cluster", "true_params")}

# shard_state on a hand-made tree: [R, N, ...] split, [R, K, ...] and [R] replicated.
tree = {"per_client": jnp.zeros((2, N, 3)), "clusters": jnp.zeros((2, 4, 3)), "round": jnp.zeros(2),
        "assign": jnp.zeros((2, N), jnp.int32)}
out["state_specs"] = {k: spec(v) for k, v in shard_state(tree, mesh, N).items()}
try:
    shard_clients(small_regression(num_clients=12), mesh)
    out["indivisible_error"] = None
except ValueError as e:
    out["indivisible_error"] = str(e)

RUNS = {
    "ifca": (small_regression(num_clients=N), dict(num_clusters=2, participation=0.5)),
    "local": (small_classification(num_clients=N), dict(batch_size=4)),
    "fedavg": (small_regression(num_clients=N), dict(participation=0.5)),
}
out["runs"] = {}
for name, (data, params) in RUNS.items():
    alg_name = "ifca" if name.startswith("ifca") else name
    alg = build_algorithm(alg_name, build_model("linear", data), params, data)
    key = jax.random.key(3)
    one, h_one = run_rounds(alg, data, key, rounds=3, restarts=2, progress=False)
    many, h_many = run_rounds(alg, shard_clients(data, mesh), key, rounds=3, restarts=2,
                              progress=False, mesh=mesh)
    leaves = lambda s: jax.tree_util.tree_flatten_with_path(s)[0]  # noqa: E731
    out["runs"][name] = {
        "specs": {jax.tree_util.keystr(p): spec(a) for p, a in leaves(many)},
        "shapes": {jax.tree_util.keystr(p): list(a.shape) for p, a in leaves(many)},
        "max_state_diff": max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                              for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(many))),
        "loss_one": np.asarray(h_one["train_loss"]).tolist(),
        "loss_many": np.asarray(h_many["train_loss"]).tolist(),
    }
# run_experiment end to end (data split, rounds, evaluation back on the host): 8 devices vs one.
from fedclust_jax.experiment import ExperimentConfig, run_experiment  # noqa: E402

cfg = ExperimentConfig(dataset="gaussian-mixture",
                       data=dict(num_clients=16, num_clusters=2, samples_per_client=10, dim=4,
                                 num_classes=3),
                       algorithm="ifca", params=dict(num_clusters=2, batch_size=4), rounds=3)
a = run_experiment(cfg, progress=False)
b = run_experiment(cfg, progress=False, devices=8)
out["experiment"] = {"loss_one": a["history"]["train_loss"], "loss_many": b["history"]["train_loss"],
                     "misclustering_one": a["metrics"]["misclustering"],
                     "misclustering_many": b["metrics"]["misclustering"]}
print(json.dumps(out))
