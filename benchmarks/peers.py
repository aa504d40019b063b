"""One federated workload in fedclust_jax and in the simulators people would otherwise use,
interleaved, from the same initial parameters, with the per-round training losses compared.

Workloads (``--workloads``):
  fedavg-femnist  FedAvg on FEMNIST: N writers (default 50), the FEMNIST CNN (6,603,710
                  parameters), 5 local SGD steps of batch 100 at lr 0.04, every client every
                  round, the equal-weight mean of the clients' models: the configuration of
                  ``fedclust-jax run --algorithm fedavg --dataset femnist``.
                  Frameworks: fedclust_jax, plain PyTorch (clients one after another), Flower
                  (a ClientApp and a ServerApp with the FedAvg strategy, ``run_simulation``),
                  pfl (its PyTorch simulation, ``FederatedAveraging``).
  ifca-mnist      IFCA option II on rotated MNIST (IFCA Table 1): m clients x n images, K = 4,
                  the MLP 784-200-10, tau = 10 full-batch steps at lr 0.1. Frameworks:
                  fedclust_jax and the IFCA authors' code (``--ifca-code DIR``: a folder with
                  their ``mnist/train_cluster_mnist.py`` and ``util.py``, set up as
                  ``shared/peers/ifca_mnist_round/README.md`` says; their code is never part
                  of this project: a small driver imports it from DIR and calls its
                  ``train`` and ``test`` methods, one call per round).

The same work: this process builds our data and our initial parameters (``loop.init_states``
from the run's key, as the runner does) and writes them, in each framework's layout, to a
scratch folder; for FedAvg it also writes the minibatches our local steps draw (indices and
masks of every round, client and step, from ``core.train.shuffled_order`` and ``minibatch``
with the round's client keys), and every framework trains on exactly those. Each framework
reports, per round, the training loss of the round's starting model(s): the mean over
clients of the client's loss on its training data (FedAvg: of the global model, which our
round computes as it starts; IFCA: of the client's best cluster model, which the authors'
code prints after each round). They must agree with ours within ``--tolerance`` (relative):
that is the check that the frameworks do the same work. Round 0 (the same model on the same
data) agrees to float32 rounding (1e-7); from there the frameworks' convolutions round
differently and SGD carries the differences on: 4e-4 after two FedAvg rounds on FEMNIST,
hence the default 5e-3 over 4 rounds (1e-4 for --quick, whose small rounds stay at 1e-7).
The IFCA authors' full-batch steps on the same data agree to 1e-7.

Timing: every framework runs in a child process per pass (``--repeats`` passes, the
frameworks in turn within each, so the machine's load falls on all of them alike);
start-up (process start to the first round: imports, data, model, Ray for Flower) is kept
apart from the rounds; the first round (ours: compilation) is reported alone; "s / round"
is the median of the later rounds (ours compiles its round once more in the second, when the
state comes back split over the host devices: a median of three later rounds leaves that
out), and the table gives the median over passes. The 1-minute
load before each run and every framework's thread count are recorded. Ours runs as the
command line does (one host device per core, client walks split over them:
``fedclust_jax.hostdevices``) through ``experiment.run_experiment`` with one round per
compiled chunk, so each round is timed. The PyTorch-based peers get ``--threads`` threads
(``torch.set_num_threads``; Flower: Ray's ``num_cpus`` per ClientApp, which sets torch's).

    python benchmarks/peers.py --data-dir DATA [--workloads fedavg-femnist ifca-mnist]
        [--ifca-code DIR] [--peer-python PY] [--repeats 3] [--rounds 4] [--threads 2]
        [--out benchmarks/results/peers_cpu.md] [--json benchmarks/results/peers_cpu.json]
    python benchmarks/peers.py --quick      # CI size, synthetic data of the real shapes

The peers come with the ``[peers]`` extra (``pip install -e ".[peers]"``: torch,
``flwr[simulation]``, pfl) or from another Python (``--peer-python``); when they are missing
the script says so in one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import output_file, printed_to  # noqa: E402

PEER_MODULES = {"torch": "torch", "flwr": "flwr[simulation]", "ray": "flwr[simulation]",
                "pfl": "pfl"}
WORKLOADS = {"fedavg-femnist": ("fedclust_jax", "pytorch", "flower", "pfl"),
             "ifca-mnist": ("fedclust_jax", "ifca-authors")}
PEERS_OF = {"pytorch": ("torch",), "flower": ("torch", "flwr", "ray"), "pfl": ("torch", "pfl"),
            "ifca-authors": ("torch",)}
# Full and --quick sizes. FedAvg: N writers; IFCA: m clients x n images.
SIZES = {"fedavg-femnist": (dict(clients=50, steps=5, batch=100, lr=0.04),
                            dict(clients=4, n=40, steps=3, batch=10, lr=0.04)),
         "ifca-mnist": (dict(clients=2400, n=100, clusters=4, steps=10, lr=0.1),
                        dict(clients=16, n=20, clusters=4, steps=3, lr=0.1))}


# ------------------------------------------------------------------ what is missing
def missing_peers(python: str, frameworks) -> list[str]:
    """The pip requirements of ``frameworks`` that ``python`` cannot import (one query)."""
    modules = sorted({m for f in frameworks for m in PEERS_OF.get(f, ())})
    if not modules:
        return []
    code = ("import importlib.util, json; print(json.dumps([m for m in %r "
            "if importlib.util.find_spec(m) is None]))" % (modules,))
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
        absent = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return [f"a working Python at {python}"]
    return sorted({PEER_MODULES[m] for m in absent})


def missing_line(python: str, missing: list[str]) -> str:
    return (f"peers.py: {python} lacks {', '.join(missing)}; install the extra "
            f"(pip install -e \".[peers]\") or name a Python that has them with --peer-python")


# ------------------------------------------------------------------ our side: export
def femnist_like(quick: bool, data_dir, clients: int, seed: int = 0):
    """Our FedAvg data: FEMNIST's first ``clients`` writers (the runner's data key), or for
    --quick a synthetic stand-in of its shapes with unequal counts."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax import loop
    if not quick:
        from fedclust_jax.data.registry import build_dataset
        return build_dataset("femnist", loop.data_key(seed), num_clients=clients,
                             data_dir=data_dir)
    from _common import synthetic_data
    s = SIZES["fedavg-femnist"][1]
    data = synthetic_data(clients, s["n"], (28, 28, 1), 62, seed=seed)
    count = jnp.asarray([s["n"] - (11 * i) % s["n"] for i in range(clients)], jnp.int32)
    return data.replace(count=count)         # unequal counts, one below the batch size


def rotated_mnist_like(quick: bool, data_dir, s: dict, seed: int = 0):
    """Our IFCA data: ``ifca-rotated-mnist`` as the runner builds it (views of one MNIST
    pool, m clients x n images), or for --quick synthetic 28x28 images whose clusters are
    the four rotations."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax import loop
    from fedclust_jax.data.registry import build_dataset
    if not quick:
        return build_dataset("ifca-rotated-mnist", loop.data_key(seed), num_clusters=s["clusters"],
                             num_clients=s["clients"], n=s["n"], data_dir=data_dir)
    from _common import synthetic_data
    base = synthetic_data(s["clients"], s["n"], (28, 28), 10, seed=seed)
    x = jnp.round(base.x * 255) / 255          # pixels on the 1/255 grid, as MNIST's
    k = jnp.arange(s["clients"]) % s["clusters"]
    x = jax.vmap(lambda im, k: jax.lax.switch(k, [lambda a, r=r: jnp.rot90(a, r, axes=(1, 2))
                                                  for r in range(4)], im))(x, k)
    return base.replace(x=x.reshape(s["clients"], s["n"], 784), cluster=k.astype(jnp.int32),
                        x_test=x[:, :1].reshape(s["clients"], 1, 784))


def our_setup(workload: str, quick: bool, data_dir, seed: int = 0):
    """(ExperimentConfig params, data, algorithm, initial params) of our run of
    ``workload``: the algorithm as the runner builds it, the initial params as
    ``loop.init_states`` makes them from the run key of ``seed`` (restart 0)."""
    import jax

    from fedclust_jax import loop
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.registry import build_model
    s = SIZES[workload][1 if quick else 0]
    if workload == "fedavg-femnist":
        data = femnist_like(quick, data_dir, s["clients"], seed)
        model = build_model("femnist-cnn", data)
        params = dict(lr=s["lr"], steps=s["steps"], batch_size=s["batch"])
        alg = build_algorithm("fedavg", model, params, data)
    else:
        data = rotated_mnist_like(quick, data_dir, s, seed)
        model = build_model("mlp", data, hidden=200)
        params = dict(num_clusters=s["clusters"], option="model", lr=s["lr"], steps=s["steps"])
        alg = build_algorithm("ifca", model, params, data)
    init_keys, _ = loop.restart_keys(loop.run_key(seed), 1)
    states = jax.jit(lambda k, d: loop.init_states(alg, k, d))(init_keys, data)
    return params, data, alg, jax.tree.map(lambda a: a[0], states.params)


def fedavg_batches(data, steps: int, batch: int, rounds: int, seed: int = 0):
    """(indices int32[T, N, S, B], mask bool[T, N, S, B]): the minibatches of our FedAvg
    round t for client i at local step s, drawn as ``core.train.local_train`` draws them
    (one shuffle of the client's real examples per round, from the client's key of the
    round: ``core.participation.participants`` of round key t)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fedclust_jax import loop
    from fedclust_jax.core.participation import participants
    from fedclust_jax.core.train import minibatch, shuffled_order
    _, round_keys = loop.restart_keys(loop.run_key(seed), 1)
    n, n_max = data.num_clients, data.x.shape[1]

    @jax.jit
    def one_round(t):
        ids, keys = participants(jax.random.fold_in(round_keys[0], t), n, 1.0)

        def client(i, key):
            order = shuffled_order(key, data.count[i], n_max)
            return jax.vmap(lambda s: minibatch(order, s, data.count[i], batch))(jnp.arange(steps))
        return jax.vmap(client)(ids, keys)
    idx, mask = zip(*(one_round(t) for t in range(rounds)))
    return np.stack(idx).astype(np.int32), np.stack(mask)


def torch_layout_cnn(params) -> dict:
    """Our FEMNIST CNN params as a ``torch.nn.Module`` state dict of numpy arrays
    (``TorchFemnistCNN``): conv kernels HWIO -> OIHW, dense kernels transposed, and fc1's
    input rows reordered from our (h, w, c) flattening to torch's (c, h, w)."""
    import numpy as np
    p = {k: {n: np.asarray(v) for n, v in d.items()} for k, d in params.items()}
    fc1 = p["fc1"]["kernel"]                                  # [(h, w, c), out]
    side = int(round((fc1.shape[0] // 64) ** 0.5))
    fc1 = fc1.reshape(side, side, 64, -1).transpose(3, 2, 0, 1).reshape(fc1.shape[1], -1)
    return {"conv1.weight": p["conv1"]["kernel"].transpose(3, 2, 0, 1), "conv1.bias": p["conv1"]["bias"],
            "conv2.weight": p["conv2"]["kernel"].transpose(3, 2, 0, 1), "conv2.bias": p["conv2"]["bias"],
            "fc1.weight": np.ascontiguousarray(fc1), "fc1.bias": p["fc1"]["bias"],
            "fc2.weight": p["fc2"]["kernel"].T.copy(), "fc2.bias": p["fc2"]["bias"]}


def torch_layout_mlp(params, k: int) -> dict:
    """Cluster model k of our MLP 784-200-10 ([K, ...] params) as the IFCA authors'
    ``SimpleLinear`` state dict (fc1, fc2) of numpy arrays."""
    import numpy as np
    layer = lambda i, name: np.asarray(params["layers"][i][name][k])
    return {"fc1.weight": layer(0, "kernel").T.copy(), "fc1.bias": layer(0, "bias"),
            "fc2.weight": layer(1, "kernel").T.copy(), "fc2.bias": layer(1, "bias")}


def export(workload: str, quick: bool, data_dir, rounds: int, folder: str) -> dict:
    """Writes the workload's data, initial params and (FedAvg) minibatches to ``folder``
    for the peers; returns the spec (also written as spec.json)."""
    import numpy as np
    params, data, alg, init = our_setup(workload, quick, data_dir)
    s = SIZES[workload][1 if quick else 0]
    spec = dict(s, workload=workload, quick=quick, rounds=rounds, data_dir=data_dir,
                clients=int(data.num_clients))
    if hasattr(data, "materialize"):         # views: every client's images, transformed
        data = data.materialize()
    count = np.asarray(data.count)
    save = lambda name, a: np.save(os.path.join(folder, f"{name}.npy"), a)  # noqa: E731
    save("y", np.asarray(data.y).astype(np.int64))
    save("count", count)
    if workload == "fedavg-femnist":
        x = np.asarray(data.x, np.float32)                    # [N, n_max, 28, 28, 1]
        idx, mask = fedavg_batches(data, s["steps"], s["batch"], rounds)
        save("x", np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)))   # NCHW
        save("idx", idx)
        save("mask", mask)
        np.savez(os.path.join(folder, "init.npz"), **torch_layout_cnn(init))
    else:
        x = np.asarray(data.x, np.float32).reshape(len(count), -1, 28, 28)
        byte = np.rint(x * 255)
        if np.abs(byte - x * 255).max() > 1e-3:
            raise SystemExit("peers.py: the MNIST pixels are not multiples of 1/255")
        save("x", byte.astype(np.uint8))
        np.savez(os.path.join(folder, "init.npz"),
                 **{f"{k}.{name}": v for k in range(s["clusters"])
                    for name, v in torch_layout_mlp(init, k).items()})
    spec["ours_params"] = params
    with open(os.path.join(folder, "spec.json"), "w") as f:
        json.dump(spec, f)
    return spec


# ------------------------------------------------------------------ children
def child_ours(spec: dict, folder: str) -> dict:
    """Our run of the workload as the command line runs it (its host devices,
    ``hostdevices.force_host_devices`` before JAX starts, and its client walks split over
    them) through ``experiment.run_experiment`` with one round per compiled chunk, on the
    data the parent exported from (rebuilt from the same seed)."""
    t_start = time.perf_counter()
    from fedclust_jax.hostdevices import force_host_devices, split_over_host_devices
    force_host_devices()
    import jax

    from fedclust_jax import experiment
    from fedclust_jax.core.clients import resolve_chunk
    quick, s, workload = spec["quick"], spec, spec["workload"]
    marks: list[float] = []

    class Timer(experiment.Progress):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            marks.append(time.perf_counter())

        def update(self, done, extra=""):
            marks.append(time.perf_counter())

    experiment.Progress = Timer
    if workload == "fedavg-femnist":
        data = femnist_like(quick, spec["data_dir"], s["clients"])
        cfg = experiment.ExperimentConfig(dataset="femnist", model="femnist-cnn", algorithm="fedavg",
                                          params=spec["ours_params"], rounds=spec["rounds"],
                                          rounds_per_chunk=1)
    else:
        data = rotated_mnist_like(quick, spec["data_dir"], s)
        cfg = experiment.ExperimentConfig(dataset="ifca-rotated-mnist", model="mlp",
                                          model_args=dict(hidden=200), algorithm="ifca",
                                          params=spec["ours_params"], rounds=spec["rounds"],
                                          rounds_per_chunk=1)
    with split_over_host_devices() as mesh:
        out = experiment.run_experiment(cfg, data=data, progress=False)
    rounds = [b - a for a, b in zip(marks, marks[1:])]
    split = mesh is not None and data.num_clients % mesh.devices.size == 0
    return dict(startup_s=marks[0] - t_start, round_s=rounds,
                loss=out["history"]["train_loss"],
                threads=f"XLA CPU, {os.cpu_count()} cores, {jax.device_count()} host device(s)",
                layout=f"chunk {resolve_chunk('auto', data.num_clients)}"
                       + (f", walks split over {mesh.devices.size} host devices" if split else ""),
                version=f"fedclust_jax, jax {jax.__version__}")


def _torch_femnist():
    """The FEMNIST CNN as a ``torch.nn.Module`` (NCHW), with the ``loss`` and ``metrics``
    methods pfl asks of a module."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TorchFemnistCNN(nn.Module):
        def __init__(self, classes=62):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
            self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
            self.fc1 = nn.Linear(7 * 7 * 64, 2048)
            self.fc2 = nn.Linear(2048, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

        def loss(self, x, y, eval=False):
            self.eval() if eval else self.train()
            return F.cross_entropy(self(x), y)

        def metrics(self, x, y, eval=False):
            from pfl.metrics import Weighted
            self.eval() if eval else self.train()
            with torch.no_grad():
                loss = F.cross_entropy(self(x), y, reduction="sum").item()
            return {"loss": Weighted(loss, len(y))}

    return TorchFemnistCNN


def _arrays(folder) -> dict:
    """The exported arrays, memory-mapped (x, y, count; FedAvg: idx, mask)."""
    import numpy as np
    return {name[:-4]: np.load(os.path.join(folder, name), mmap_mode="r")
            for name in os.listdir(folder) if name.endswith(".npy")}


def _load(folder):
    import numpy as np
    import torch
    d = _arrays(folder)
    init = {k: torch.from_numpy(v) for k, v in np.load(os.path.join(folder, "init.npz")).items()}
    return d, init


def _client_tensors(d):
    """Per client (x [count, 1, 28, 28], y [count]) as torch tensors."""
    import torch
    import numpy as np
    return [(torch.from_numpy(np.array(d["x"][i, :c])), torch.from_numpy(np.array(d["y"][i, :c])))
            for i, c in enumerate(d["count"])]


def _train_steps(net, x, y, idx, mask, lr):
    """The client's local steps: SGD on the exported minibatches (real rows only)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for s in range(idx.shape[0]):
        rows = torch.from_numpy(np.asarray(idx[s])[np.asarray(mask[s])])
        opt.zero_grad()
        F.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()


def child_pytorch(spec: dict, folder: str) -> dict:
    """Plain PyTorch, clients one after another: per client the global model's loss on its
    data (the round's training loss), a copy of the global model trained on its minibatches,
    added into the sum; the mean becomes the next global model."""
    t_start = time.perf_counter()
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(spec["threads"])
    d, init = _load(folder)
    clients = _client_tensors(d)
    net = _torch_femnist()()
    net.load_state_dict(init)
    marks, losses = [time.perf_counter()], []
    for t in range(spec["rounds"]):
        start = {k: v.clone() for k, v in net.state_dict().items()}
        total = {k: torch.zeros_like(v) for k, v in start.items()}
        round_loss = []
        for i, (x, y) in enumerate(clients):
            net.load_state_dict(start)
            with torch.no_grad():
                round_loss.append(F.cross_entropy(net(x), y).item())
            _train_steps(net, x, y, d["idx"][t, i], d["mask"][t, i], spec["lr"])
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    total[k] += v
        net.load_state_dict({k: v / len(clients) for k, v in total.items()})
        losses.append(statistics.fmean(round_loss))
        marks.append(time.perf_counter())
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=losses, threads=f"torch {torch.get_num_threads()} threads",
                layout="clients one after another", version=f"torch {torch.__version__}")


def child_flower(spec: dict, folder: str) -> dict:
    """Flower: a ClientApp whose train function reports the received model's loss on the
    client's data and trains it on the client's minibatches; a ServerApp running the FedAvg
    strategy (every node trains every round; no federated evaluation; the mean weighted by
    a per-client weight of 1, the equal mean); ``run_simulation`` on the Ray backend with one
    node per client. Rounds are timed by the strategy's ``evaluate_fn`` (called before the
    first round and after each)."""
    t_start = time.perf_counter()
    import numpy as np
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    import flwr

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context):
        import torch
        import torch.nn.functional as F
        cfg = msg.content["config"]
        where, t = cfg["folder"], int(cfg["server-round"]) - 1
        d = _arrays(where)                      # memory-mapped: cheap in every call
        i = int(context.node_config["partition-id"])
        c = int(d["count"][i])
        x = torch.from_numpy(np.array(d["x"][i, :c]))
        y = torch.from_numpy(np.array(d["y"][i, :c]))
        net = _torch_femnist()()
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        with torch.no_grad():
            loss = F.cross_entropy(net(x), y).item()
        _train_steps(net, x, y, d["idx"][t, i], d["mask"][t, i], float(cfg["lr"]))
        metrics = MetricRecord({"train_loss": loss, "weight": 1.0,
                                "threads": float(torch.get_num_threads())})
        return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}),
                       reply_to=msg)

    def equal_mean(records, _key):
        values = [r["metrics"] for r in records]
        return MetricRecord({"train_loss": statistics.fmean(v["train_loss"] for v in values),
                             "threads": max(v["threads"] for v in values)})

    n = spec["clients"]
    d, init = _load(folder)
    marks: list[float] = []
    out: dict = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context):
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n,
                          min_available_nodes=n, weighted_by_key="weight",
                          train_metrics_aggr_fn=equal_mean)
        stamp = lambda rnd, arrays: marks.append(time.perf_counter()) or None   # noqa: E731
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init),
                                num_rounds=spec["rounds"], evaluate_fn=stamp,
                                train_config=ConfigRecord({"folder": folder, "lr": spec["lr"]}))
        out["metrics"] = {r: dict(m) for r, m in result.train_metrics_clientapp.items()}

    threads = spec["threads"]
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": threads, "num_gpus": 0.0}})
    metrics = out["metrics"]
    rounds = sorted(metrics)
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=[metrics[r]["train_loss"] for r in rounds],
                threads=f"Ray client_resources num_cpus {threads}; torch "
                        f"{int(max(metrics[r]['threads'] for r in rounds))} threads in the ClientApp",
                layout="Ray simulation, one node per client",
                version=f"flwr {flwr.__version__}, torch {torch.__version__}")


def child_pfl(spec: dict, folder: str) -> dict:
    """pfl: a ``PyTorchModel`` (local SGD; the central optimizer SGD at lr 1 applies the mean
    model difference), ``FederatedAveraging`` over a ``FederatedDataset`` whose user
    datasets yield the round's minibatches, on the ``SimulatedBackend``; every user in every
    cohort. A callback evaluates the central model on every user's data as each round starts
    (the round's training loss) and times the rounds."""
    t_start = time.perf_counter()
    import numpy as np
    import pfl
    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel
    torch.set_num_threads(spec["threads"])
    d, init = _load(folder)
    clients = _client_tensors(d)
    state = {"round": 0}

    class RoundBatches(Dataset):
        """A user's data for one round: training iterates the round's minibatches; an
        evaluation (no batch size) gets the whole of the user's data."""

        def iter(self, batch_size):  # noqa: A003
            x, y = self.raw_data
            if batch_size is None:
                yield [x, y]
                return
            i, t = self.user_id, state["round"]
            for s in range(d["idx"].shape[2]):
                rows = torch.from_numpy(np.asarray(d["idx"][t, i, s])[np.asarray(d["mask"][t, i, s])])
                yield [x[rows], y[rows]]

    net = _torch_femnist()()
    net.load_state_dict(init)
    model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    users = list(range(len(clients)))
    data = FederatedDataset(lambda u: RoundBatches(list(clients[u]), user_id=u),
                            get_user_sampler("minimize_reuse", users))
    marks, losses = [], []

    def round_loss():
        with torch.no_grad():
            return statistics.fmean(F.cross_entropy(net(x), y).item() for x, y in clients)

    class RoundClock(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            losses.append(round_loss())
            marks.append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            state["round"] = central_iteration + 1
            if central_iteration + 1 < spec["rounds"]:
                losses.append(round_loss())
            marks.append(time.perf_counter())
            return False, Metrics()

    rounds = spec["rounds"]
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=rounds,
                                           evaluation_frequency=rounds + 1,
                                           train_cohort_size=len(users), val_cohort_size=0),
        backend=SimulatedBackend(training_data=data, val_data=None),
        model=model,
        model_train_params=NNTrainHyperParams(local_num_epochs=None,
                                              local_num_steps=int(d["idx"].shape[2]),
                                              local_learning_rate=spec["lr"],
                                              local_batch_size=spec["batch"]),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
        callbacks=[RoundClock()])
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=losses, threads=f"torch {torch.get_num_threads()} threads",
                layout="SimulatedBackend, users one after another",
                version=f"pfl {pfl.__version__}, torch {torch.__version__}")


def child_ifca_authors(spec: dict, folder: str) -> dict:
    """The IFCA authors' ``TrainMNISTCluster`` (imported from ``--ifca-code``), its training
    set replaced by ours (already rotated, so each client's rotation is 0 in their loader)
    and its K models by our initial ones; per round their ``train`` (tau full-batch steps per
    client, one after another, then the per-cluster means) and ``test(train=True)`` (every
    model's loss on every client: the next round's clusters and the loss they print)."""
    t_start = time.perf_counter()
    import numpy as np
    import torch
    sys.path.insert(0, spec["ifca_code"])
    sys.argv = sys.argv[:1]
    import train_cluster_mnist as authors
    torch.set_num_threads(spec["threads"])
    d = _arrays(folder)
    init = dict(np.load(os.path.join(folder, "init.npz")))
    m, n, k = d["x"].shape[0], d["x"].shape[1], spec["clusters"]
    config = dict(m=m, m_test=m, p=k, n=n, h1=200, num_epochs=spec["rounds"], batch_size=n,
                  tau=spec["steps"], lr=spec["lr"], data_seed=0, train_seed=0,
                  project_dir=os.path.join(folder, "authors_out"))
    exp = authors.TrainMNISTCluster(config)
    x = torch.from_numpy(np.array(d["x"]).reshape(m * n, 28, 28)).float() / 255.0
    train = dict(X=x, y=torch.from_numpy(np.array(d["y"]).reshape(m * n)),
                 data_indices=np.arange(m * n).reshape(m, n),
                 cluster_assign=np.zeros(m, dtype=np.int64))
    exp.dataset = {"train": train, "test": train}
    exp.setup_models()
    for j, model in enumerate(exp.models):
        model.load_state_dict({name: torch.from_numpy(init[f"{j}.{name}"])
                               for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")})
    exp.epoch, lr = -1, spec["lr"]
    res = exp.test(train=True)                         # their epoch -1: the first clusters
    marks, losses = [time.perf_counter()], [float(res["loss"])]
    for t in range(spec["rounds"]):
        exp.epoch = t
        exp.train(res["cluster_assign"], lr=lr)
        res = exp.test(train=True)
        marks.append(time.perf_counter())
        if t + 1 < spec["rounds"]:
            losses.append(float(res["loss"]))
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=losses, threads=f"torch {torch.get_num_threads()} threads",
                layout="clients one after another (their loop)",
                version=f"IFCA authors' code, torch {torch.__version__}")


CHILDREN = {"fedclust_jax": child_ours, "pytorch": child_pytorch, "flower": child_flower,
            "pfl": child_pfl, "ifca-authors": child_ifca_authors}


def run_child(args, framework: str, folder: str) -> dict:
    """One run of ``framework`` in a fresh process; its record (or the error's last line)."""
    python = sys.executable if framework == "fedclust_jax" else args.peer_python
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if framework != "fedclust_jax":
        env.setdefault("OMP_NUM_THREADS", str(args.threads))
    cmd = [python, os.path.abspath(__file__), "--child", framework, "--spec", folder]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder)
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{\"peers_record\""):
            return dict(json.loads(line)["peers_record"], wall_s=wall)
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return dict(error=f"exit {proc.returncode}: {tail[:300]}", wall_s=wall)


# ------------------------------------------------------------------ the table
def agreement(ours: list, theirs: list) -> float:
    """The largest relative difference of two per-round loss lists (over common rounds)."""
    pairs = list(zip(ours, theirs))
    return max(abs(a - b) / max(abs(a), 1e-12) for a, b in pairs) if pairs else float("nan")


def summarize(workload: str, runs: dict, tolerance: float) -> tuple[list[str], dict]:
    """Markdown lines and a summary dict of one workload's runs {framework: [record per pass]}."""
    lines = [f"| framework | s / round (median of passes) | per pass | first round s | "
             f"start-up s | threads | loss agreement with ours (max rel. diff) |",
             "|---|---:|---|---:|---:|---|---|"]
    summary = {}
    ours = next((r for r in runs.get("fedclust_jax", []) if "loss" in r), None)
    for fw, recs in runs.items():
        good = [r for r in recs if "round_s" in r]
        if not good:
            lines.append(f"| {fw} | not run | | | | | {recs[0].get('error', '') if recs else ''} |")
            summary[fw] = dict(error=recs[0].get("error") if recs else "not run")
            continue
        later = [statistics.median(r["round_s"][1:] or r["round_s"]) for r in good]
        med = statistics.median(later)
        agree = [agreement(ours["loss"], r["loss"]) for r in good] if ours else []
        worst = max(agree) if agree else float("nan")
        verdict = ("reference" if fw == "fedclust_jax" else
                   f"{worst:.1e} ({'within' if worst <= tolerance else 'OUTSIDE'} {tolerance:g})")
        lines.append(f"| {fw} | {med:.2f} | {', '.join(f'{v:.2f}' for v in later)} | "
                     f"{statistics.median(r['round_s'][0] for r in good):.2f} | "
                     f"{statistics.median(r['startup_s'] for r in good):.2f} | {good[0]['threads']} | "
                     f"{verdict} |")
        summary[fw] = dict(seconds_per_round=med, per_pass=later, agreement=worst,
                           version=good[0]["version"], layout=good[0]["layout"],
                           threads=good[0]["threads"], loss=good[0]["loss"])
    if "fedclust_jax" in summary and "seconds_per_round" in summary["fedclust_jax"]:
        base = summary["fedclust_jax"]["seconds_per_round"]
        ratios = [f"{fw} {s['seconds_per_round'] / base:.2f}x" for fw, s in summary.items()
                  if fw != "fedclust_jax" and "seconds_per_round" in s]
        if ratios:
            lines.append(f"\nTheir seconds per round over ours: {'; '.join(ratios)}.")
    losses = {fw: s["loss"] for fw, s in summary.items() if "loss" in s}
    if losses:
        lines.append("\nTraining loss at the start of each round (first pass):\n")
        lines.append("| round | " + " | ".join(losses) + " |")
        lines.append("|---:|" + "---:|" * len(losses))
        for t in range(max(len(v) for v in losses.values())):
            lines.append(f"| {t} | " + " | ".join(f"{v[t]:.6f}" if t < len(v) else ""
                                                   for v in losses.values()) + " |")
    return lines, summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CI size on synthetic data of the real shapes (no --data-dir needed)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--frameworks", nargs="+", default=None,
                   choices=sorted({f for fs in WORKLOADS.values() for f in fs}),
                   help="run only these (default: every framework of each workload)")
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding femnist-leaf/ and mnist/ (default $FEDCLUST_DATA)")
    p.add_argument("--ifca-code", metavar="DIR", default=None,
                   help="folder with the IFCA authors' train_cluster_mnist.py and util.py")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the Python with torch, flwr[simulation] and pfl (default this one)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved passes (default 3; --quick 1)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per run (default 4); the first is reported alone")
    p.add_argument("--threads", type=int, default=2, help="threads of the PyTorch-based peers")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest relative difference of a peer's per-round loss from ours "
                        "(default 5e-3; --quick 1e-4)")
    p.add_argument("--json", type=output_file, default=None, help="write the records here")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        with open(os.path.join(a.spec, "spec.json")) as f:
            spec = json.load(f)
        record = CHILDREN[a.child](spec, a.spec)
        print(json.dumps({"peers_record": record}, default=float), flush=True)
        return record
    if (a.repeats is not None and a.repeats < 1) or a.threads < 1 or (
            a.rounds is not None and a.rounds < 2):
        p.error("--repeats and --threads must be >= 1 and --rounds >= 2")
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.rounds = a.rounds or 4
    a.tolerance = a.tolerance if a.tolerance is not None else (1e-4 if a.quick else 5e-3)
    plan = {w: [f for f in WORKLOADS[w] if a.frameworks is None or f in a.frameworks]
            for w in a.workloads}
    missing = missing_peers(a.peer_python, [f for fs in plan.values() for f in fs])
    if missing:
        print(missing_line(a.peer_python, missing), file=sys.stderr)
        raise SystemExit(2)
    if not a.quick and (not a.data_dir or not os.path.isdir(a.data_dir)):
        p.error(f"needs --data-dir (a folder holding femnist-leaf/ and mnist/) or "
                f"$FEDCLUST_DATA; got {a.data_dir!r} (--quick runs without it)")
    if a.data_dir:
        a.data_dir = os.path.abspath(a.data_dir)
    with printed_to(a.out, __file__):
        return compare(a, plan)


def compare(a, plan: dict) -> dict:
    import jax
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; jax "
          f"{jax.__version__}; peers from {a.peer_python}; {a.repeats} interleaved passes of "
          f"{a.rounds} rounds; load at start {os.getloadavg()}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="peers_") as tmp:
        folders = {}
        for w, frameworks in plan.items():
            folders[w] = os.path.join(tmp, w)
            os.makedirs(folders[w])
            t0 = time.perf_counter()
            spec = export(w, a.quick, a.data_dir, a.rounds, folders[w])
            spec.update(threads=a.threads, ifca_code=os.path.abspath(a.ifca_code or "."))
            with open(os.path.join(folders[w], "spec.json"), "w") as f:
                json.dump(spec, f)
            if "ifca-authors" in frameworks and not _authors_present(a.ifca_code):
                frameworks.remove("ifca-authors")
                results.setdefault(w, {})["ifca-authors"] = [dict(
                    error="not run: no --ifca-code folder holding train_cluster_mnist.py")]
            print(f"# {w}: exported data, initial params{' and minibatches' * (w == 'fedavg-femnist')}"
                  f" in {time.perf_counter() - t0:.1f} s ({spec['clients']} clients)", flush=True)
        log = []
        for r in range(a.repeats):
            for w, frameworks in plan.items():
                for fw in frameworks:
                    load = os.getloadavg()
                    rec = run_child(a, fw, folders[w])
                    rec.update(workload=w, framework=fw, pass_=r + 1, load_before=load)
                    results.setdefault(w, {}).setdefault(fw, []).append(rec)
                    log.append(rec)
                    what = (f"{statistics.median(rec['round_s'][1:] or rec['round_s']):.2f} s / round, "
                            f"start-up {rec['startup_s']:.1f} s" if "round_s" in rec else rec["error"])
                    print(f"pass {r + 1} {w} {fw}: {what} (load before {load[0]:.2f})", flush=True)
    summaries = {}
    for w in plan:
        s = SIZES[w][1 if a.quick else 0]
        print(f"\n## {w}" + (" (--quick: synthetic data)" if a.quick else "")
              + f": {json.dumps(s)}\n")
        lines, summaries[w] = summarize(w, results.get(w, {}), a.tolerance)
        print("\n".join(lines))
    print(f"\nLoad at end: {os.getloadavg()}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(runs=log, summary=summaries, tolerance=a.tolerance, rounds=a.rounds,
                           repeats=a.repeats, cpus=os.cpu_count()), f, indent=1, default=float)
    return summaries


def _authors_present(folder) -> bool:
    return bool(folder) and all(os.path.isfile(os.path.join(folder, f))
                                for f in ("train_cluster_mnist.py", "util.py"))


if __name__ == "__main__":
    main()
