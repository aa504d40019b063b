"""Clients split over 8 forced host CPU devices: data and per-client state carry the
``clients`` sharding, everything else is replicated, and results equal one device.

The device count must be fixed before JAX starts, so the runs happen in one subprocess
(tests/core/sharded_runs.py), which also runs ``run_experiment`` with devices=8."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from fedclust_jax.core.sharding import client_mesh, shard_state, state_shardings

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def sharded():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(HERE, "sharded_runs.py")], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_data_split_on_client_axis(sharded):
    assert sharded["devices"] == 8
    specs = sharded["data_specs"]
    for name in ("x", "y", "count", "x_test", "y_test", "count_test", "cluster"):
        assert specs[name] == ["clients"], name
    assert specs["true_params"] == []


def test_state_split_after_restart_axis(sharded):
    assert sharded["state_specs"] == {"per_client": [None, "clients"], "assign": [None, "clients"],
                                      "clusters": [], "round": []}


def test_indivisible_clients_is_one_clear_error(sharded):
    assert "12 clients cannot be split evenly over 8 devices" in sharded["indivisible_error"]


@pytest.mark.parametrize("name", ["ifca", "local", "fedavg"])
def test_round_keeps_shardings_and_equals_one_device(sharded, name):
    run = sharded["runs"][name]
    for path, spec in run["specs"].items():
        per_client = len(run["shapes"][path]) > 1 and run["shapes"][path][1] == 16
        assert spec == ([None, "clients"] if per_client else []), (path, spec)
    if name == "local":
        assert all(s == [None, "clients"] for p, s in run["specs"].items() if "params" in p)
    if name == "ifca":
        assert run["specs"][".assign"] == [None, "clients"] and run["specs"][".params['theta']"] == []
    np.testing.assert_allclose(run["loss_many"], run["loss_one"], rtol=1e-5, atol=1e-6)
    assert run["max_state_diff"] < 1e-5


def test_run_experiment_on_8_devices_equals_one_device(sharded):
    """``run_experiment(devices=8)`` (IFCA, gaussian mixture): same per-round training loss
    and misclustering as one device (run in the same subprocess as the runs above)."""
    run = sharded["experiment"]
    assert len(run["loss_one"]) == 3
    np.testing.assert_allclose(run["loss_many"], run["loss_one"], rtol=1e-5)
    assert run["misclustering_many"] == run["misclustering_one"]


def test_state_shardings_without_restart_axis():
    """In-process (one device is enough to build the shardings)."""
    mesh = client_mesh(jax.devices()[:1])
    tree = {"models": jax.ShapeDtypeStruct((6, 3), np.float32),
            "clusters": jax.ShapeDtypeStruct((2, 3), np.float32)}
    specs = {k: s.spec for k, s in state_shardings(tree, mesh, 6, restarts=False).items()}
    assert specs == {"models": PartitionSpec("clients"), "clusters": PartitionSpec()}
    placed = shard_state({"a": np.zeros((2, 6))}, mesh, 6)
    assert placed["a"].sharding.spec == PartitionSpec(None, "clients")


SPLIT_RUNS = r"""
import json, jax, numpy as np
from fedclust_jax.core.clients import map_clients
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.hostdevices import split_over_host_devices
double = lambda x: map_clients(lambda a: a * 2, x, chunk=1)
lower = lambda n: jax.jit(lambda x: double(x)).lower(np.ones((n, 3))).as_text()  # a new trace
out = {"devices": jax.device_count(), "one": lower(12)}
with split_over_host_devices() as mesh:
    out["split"], out["odd"] = lower(12), lower(11)   # 11 clients: one walk
uifca = dict(num_clusters=2, cluster_rounds=2, comm_rounds=2, local_steps=3, chunk=1)
from fedclust_jax.data.points import points_from_pools
rng = np.random.default_rng(0)
images = points_from_pools(jax.random.key(1), [rng.uniform(0.1, 0.9, (60, 4, 4)).astype(np.float32)
                                               * (0.5 + c) / 2 for c in range(2)],
                           num_clients=4, points_per_client=24, heterogeneity=1.0)
for name, params, dataset, model, data in [
        ("ifca", dict(num_clusters=2, chunk=1, participation=0.5), "rotated-digits", None, None),
        ("fedavg", dict(chunk=3), "rotated-digits", None, None),
        ("uifca", uifca, "uifca-gaussian", "affine-flow", None),
        ("uifca", uifca, "uifca-gaussian", "real-nvp", images)]:
    cfg = ExperimentConfig(dataset=dataset, algorithm=name, rounds=2, params=params, model=model,
                           data=dict(num_clients=12) if model is None else
                           dict(num_clients=4, num_clusters=2, points_per_client=40, dim=4),
                           model_args={} if model != "real-nvp" else dict(depth=2, hidden=4))
    runs = [run_experiment(cfg, data=data, progress=False)]
    with split_over_host_devices():
        runs.append(run_experiment(cfg, data=data, progress=False))
    per_round, final = ("objective", "purity") if name == "uifca" else ("train_loss", "test_loss")
    out[f"{name} {model} {params}"] = [r["history"][per_round] + [r["metrics"][final]]
                                       for r in runs]
print(json.dumps(out))
"""


def on_two_host_devices(script: str):
    """The JSON of the last line ``script`` prints, run in a process with 2 host devices."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               + " --xla_force_host_platform_device_count=2")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_walks_split_over_host_devices_equal_one_device():
    """``hostdevices.split_over_host_devices`` with 2 forced host devices (as the command line
    sets them up on a CPU): chunked client walks run under ``shard_map``, and IFCA (half
    participation: a streamed walk), FedAvg (chunks of 3) and UIFCA with an affine flow and
    a RealNVP flow of convolutional couplings on 4x4 images (their models enter the walk as
    shared arguments) give one device's losses."""
    out = on_two_host_devices(SPLIT_RUNS)
    assert out.pop("devices") == 2
    texts = {k: out.pop(k) for k in ("one", "split", "odd")}
    assert "manual_computation" in texts["split"] and "tensor<6x3xf32>" in texts["split"]
    assert "manual_computation" not in texts["one"] + texts["odd"]
    assert len(out) == 4
    for name, (one, split) in out.items():
        np.testing.assert_allclose(split, one, rtol=1e-5, err_msg=name)


def test_force_host_devices_sets_the_asked_count_before_jax_starts():
    from fedclust_jax.hostdevices import FLAG, cores, force_host_devices
    assert force_host_devices({"FEDCLUST_HOST_DEVICES": "2"}) is None   # JAX is imported here
    probe = ("from fedclust_jax.hostdevices import force_host_devices as f; n = f(); "
             "import jax; print(n, jax.device_count())")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "FEDCLUST_HOST_DEVICES")}
    run = lambda **extra: subprocess.run(
        [sys.executable, "-c", probe], env=dict(env, JAX_PLATFORMS="cpu", **extra),
        capture_output=True, text=True, timeout=120).stdout.split()
    assert run(FEDCLUST_HOST_DEVICES="3") == ["3", "3"]
    n = cores()                                                         # the default rule
    assert run() == ([str(n), str(n)] if n >= 2 else ["None", "1"])
    assert run(FEDCLUST_HOST_DEVICES="cores") == run()
    assert run(FEDCLUST_HOST_DEVICES="1") == ["None", "1"]              # off
    assert run(FEDCLUST_HOST_DEVICES="3", XLA_FLAGS=f"{FLAG}=1") == ["None", "1"]


@pytest.mark.parametrize("value", ["banana", "0", "-2", "2.5"])
def test_a_bad_host_device_count_stops_the_command_line_in_one_line(value):
    """Before any compute: exit code 2 and one line on stderr naming the accepted values."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", FEDCLUST_HOST_DEVICES=value)
    out = subprocess.run([sys.executable, "-m", "fedclust_jax", "run", "--algorithm", "fedavg",
                          "--rounds", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"fedclust-jax: error: FEDCLUST_HOST_DEVICES={value!r} is not understood; accepted: "
        "cores (the default: one host device per core the process may use) or a whole number "
        ">= 1 (1: one device, no split)"]
    from fedclust_jax.hostdevices import host_devices_asked
    with pytest.raises(ValueError, match="accepted: cores"):
        host_devices_asked({"FEDCLUST_HOST_DEVICES": value})


ONE_COMPILE = """
import json, jax
from jax import monitoring
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.hostdevices import split_over_host_devices
from fedclust_jax.sweep import run_sweep
compiles = []
monitoring.register_event_duration_secs_listener(
    lambda event, *a, **k: compiles.append(1) if event.endswith("backend_compile_duration") else None)
data = {"num_clients": 8, "samples_per_client": 10, "test_samples_per_client": 5, "dim": 4}
ifca = {"num_clusters": 2, "option": "gradient"}
cfg = lambda rounds: ExperimentConfig(dataset="synthetic-regression", data=data, algorithm="ifca",
                                      params=ifca, rounds=rounds, rounds_per_chunk=2)
study = lambda rounds: {"dataset": "synthetic-regression", "data": data, "rounds": rounds,
                        "rounds_per_chunk": 2, "algorithms": {"ifca": ifca},
                        "sweep": {"seed": [0, 1]}}
out = {}
with split_over_host_devices():
    for name, go in (("run", lambda r: run_experiment(cfg(r), progress=False)),
                     ("sweep", lambda r: run_sweep(study(r), progress=False))):
        go(6)                            # warm: the small programs every run shares
        counts = []
        for rounds in (2, 6):            # one chunk, then three (the later ones take the
            compiles.clear()             # first one's output)
            go(rounds)
            counts.append(len(compiles))
        out[name] = counts
print(json.dumps(out))
"""


def test_split_state_keeps_its_placement_so_later_chunks_do_not_compile():
    """Under the host-device split the state is placed on the split's mesh from init on:
    the second and third chunk of rounds reuse the first chunk's program, so a run of three
    chunks compiles as many programs as a run of one, in a run and in a sweep."""
    counts = on_two_host_devices(ONE_COMPILE)
    assert counts["run"][0] == counts["run"][1] and counts["sweep"][0] == counts["sweep"][1], counts
