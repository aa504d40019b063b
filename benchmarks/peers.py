"""One federated workload in fedclust_jax and in the simulators people would otherwise use,
interleaved, from the same initial parameters, with the per-round training losses compared.

Workloads (``--workloads``):
  fedavg-femnist  FedAvg on FEMNIST: N writers (default 50), the FEMNIST CNN (6,603,710
                  parameters), 5 local SGD steps of batch 100 at lr 0.04, every client every
                  round, the equal-weight mean of the clients' models: the configuration of
                  ``fedclust-jax run --algorithm fedavg --dataset femnist``.
                  Frameworks: fedclust_jax, plain PyTorch (clients one after another), Flower
                  (a ClientApp and a ServerApp with the FedAvg strategy, ``run_simulation``),
                  pfl (its PyTorch simulation, ``FederatedAveraging``) and FedJAX
                  (``fedjax.algorithms.fed_avg`` with the same CNN in Haiku).
  fedavg-mnist    FedAvg with many clients: m clients (``--clients``, default 100, 1,000 and
                  10,000, one case ``fedavg-mnist-m<M>`` each) of n = 60 MNIST images, IID
                  (``ifca-rotated-mnist`` with one cluster: disjoint shards of the 60,000
                  training images up to m = 1,000; above that each client's 60 images are
                  drawn with replacement from the 60,000, so every image appears about
                  m * 60 / 60,000 times), the MLP 784-200-10, 5 local SGD steps of batch 10
                  at lr 0.05, every client every round. Frameworks: as fedavg-femnist (the
                  MLP in each). The plain PyTorch loop runs once per ``--torch-threads``
                  value, each its own row (``pytorch-<T>t``); the speed-up over the fastest
                  peer counts the fastest of them.
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
with the round's client keys), and every framework trains on exactly those. MNIST images
travel as bytes and every framework reads byte b as the float32 b / 255, as our views do.
Each framework reports, per round, the training loss of the round's starting model(s): the
mean over clients of the client's loss on its training data (FedAvg: of the global model,
which our round computes as it starts; IFCA: of the client's best cluster model, which the
authors' code prints after each round). They must agree with ours within ``--tolerance``
(relative): that is the check that the frameworks do the same work. Round 0 (the same model
on the same data) agrees to float32 rounding (1e-7); from there the frameworks' convolutions
round differently and SGD carries the differences on: 4e-4 after two FedAvg rounds on
FEMNIST, hence the default 5e-3 over 4 rounds (1e-4 for --quick, whose small rounds stay at
1e-7). The IFCA authors' full-batch steps on the same data agree to 1e-7.

FedJAX runs from its own Python (``--fedjax-python``): FedJAX 0.0.17 calls ``jax.tree_map``,
which JAX removed in 0.6, so it needs a JAX older than ours (benchmarks/README.md says how to
make that environment). Its FedAvg weights each client by ``len()`` of its client dataset;
the datasets handed to it here have length 1 (and yield the round's exported minibatches
from ``shuffle_repeat_batch``), so its mean is the equal mean ours takes. On a JAX without
``jax.tree_map`` (an accelerator image) the child supplies ``jax.tree_map`` and
``jax.tree_util.tree_multimap`` as ``jax.tree.map`` before importing FedJAX and says so in
the record's version.

Timing: every framework runs in a child process per pass (``--repeats`` passes, the
frameworks in turn within each, so the machine's load falls on all of them alike);
start-up (process start to the first round: imports, data, model, Ray for Flower) is kept
apart from the rounds; the first round (ours: compilation) is reported alone; "s / round"
is the median of the later rounds (ours compiles its round once more in the second, when the
state comes back split over the host devices: a median of three later rounds leaves that
out), and the table gives the median over passes. A child whose start-up takes more than
``--startup-limit`` seconds or one of whose rounds takes more than ``--round-limit`` seconds
is stopped (with every process it started) and recorded as ``"seconds_per_round": null,
"timeout_s": LIMIT``, printed "> LIMIT". The 1-minute load before each run and every
framework's thread count are recorded. Ours runs as the command line does (one host device
per core, client walks split over them: ``fedclust_jax.hostdevices``) through
``experiment.run_experiment`` with one round per compiled chunk, so each round is timed. The
PyTorch-based peers get ``--threads`` threads (``torch.set_num_threads``; Flower: Ray's
``num_cpus`` per ClientApp, which sets torch's); the plain PyTorch loop ``--torch-threads``.

    python benchmarks/peers.py --data-dir DATA [--workloads fedavg-femnist fedavg-mnist ifca-mnist]
        [--clients 100 1000 10000] [--writers 50] [--ifca-code DIR] [--peer-python PY]
        [--fedjax-python PY] [--repeats 3] [--rounds 4] [--threads 2] [--torch-threads 1 2] [--round-limit 120]
        [--out benchmarks/results/peers_cpu.md] [--json benchmarks/results/peers_cpu.json]
        [--plot benchmarks/results/peers_scale_cpu.png]
    python benchmarks/peers.py --quick      # CI size, synthetic data of the real shapes

The peers come with the ``[peers]`` extra (``pip install -e ".[peers]"``: torch,
``flwr[simulation]``, pfl) or from another Python (``--peer-python``), FedJAX from its own
(``--fedjax-python``); when one is missing the script says so in one line and exits with
code 2. ``--plot`` (seconds per round against m, log-log, one line per framework) needs
matplotlib (the ``[bench]`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import output_file, printed_to  # noqa: E402

PEER_MODULES = {"torch": "torch", "flwr": "flwr[simulation]", "ray": "flwr[simulation]",
                "pfl": "pfl", "fedjax": "fedjax", "haiku": "dm-haiku"}
FEDAVG_FRAMEWORKS = ("fedclust_jax", "pytorch", "flower", "pfl", "fedjax")
WORKLOADS = {"fedavg-femnist": FEDAVG_FRAMEWORKS, "fedavg-mnist": FEDAVG_FRAMEWORKS,
             "ifca-mnist": ("fedclust_jax", "ifca-authors")}
PEERS_OF = {"pytorch": ("torch",), "flower": ("torch", "flwr", "ray"), "pfl": ("torch", "pfl"),
            "ifca-authors": ("torch",), "fedjax": ("fedjax", "haiku")}
OWN_PYTHON = {"fedjax": "fedjax_python"}     # frameworks run from their own Python
# Full and --quick sizes. FedAvg: N writers / m clients of n images; IFCA: m clients x n.
SIZES = {"fedavg-femnist": (dict(clients=50, steps=5, batch=100, lr=0.04),
                            dict(clients=4, n=40, steps=3, batch=10, lr=0.04)),
         "fedavg-mnist": (dict(clients=(100, 1000, 10000), n=60, steps=5, batch=10, lr=0.05),
                          dict(clients=(8, 16), n=20, steps=3, batch=10, lr=0.05)),
         "ifca-mnist": (dict(clients=2400, n=100, clusters=4, steps=10, lr=0.1),
                        dict(clients=16, n=20, clusters=4, steps=3, lr=0.1))}
MNIST_TRAIN = 60000


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


def missing_line(python: str, missing: list[str], fedjax: tuple | None = None) -> str:
    """The one line naming what is missing: the peers' Python's extra, and (``fedjax``:
    (python, missing)) FedJAX's own Python."""
    parts = []
    if missing:
        parts.append(f"{python} lacks {', '.join(missing)}; install the extra "
                     f"(pip install -e \".[peers]\") or name a Python that has them with "
                     f"--peer-python")
    if fedjax and fedjax[1]:
        parts.append(f"{fedjax[0]} lacks {', '.join(fedjax[1])}; make FedJAX's own Python "
                     f"(benchmarks/README.md, \"Peers\") and name it with --fedjax-python")
    return "peers.py: " + "; ".join(parts)


def python_of(a, framework: str) -> str:
    """The Python that runs ``framework``'s child."""
    if framework == "fedclust_jax":
        return sys.executable
    return getattr(a, OWN_PYTHON.get(framework, "peer_python"))


# ------------------------------------------------------------------ the cases
def cases(workloads, quick: bool, clients=None, writers=None) -> list[tuple[str, str, dict]]:
    """(case name, workload, sizes) of every run: one per workload, fedavg-mnist one per m
    (``clients``, default the workload's), named ``fedavg-mnist-m<M>``; ``writers``: the
    FEMNIST writers of fedavg-femnist (default the workload's)."""
    out = []
    for w in workloads:
        s = SIZES[w][1 if quick else 0]
        if w == "fedavg-mnist":
            out += [(f"{w}-m{m}", w, dict(s, clients=int(m))) for m in (clients or s["clients"])]
        elif w == "fedavg-femnist" and writers:
            out.append((w, w, dict(s, clients=int(writers))))
        else:
            out.append((w, w, dict(s)))
    return out


# ------------------------------------------------------------------ our side: export
def femnist_like(quick: bool, data_dir, clients: int, s: dict | None = None, seed: int = 0):
    """Our FedAvg data: FEMNIST's first ``clients`` writers (the runner's data key), or for
    --quick a synthetic stand-in of its shapes with unequal counts."""
    import jax.numpy as jnp

    from fedclust_jax import loop
    if not quick:
        from fedclust_jax.data.registry import build_dataset
        return build_dataset("femnist", loop.data_key(seed), num_clients=clients,
                             data_dir=data_dir)
    from _common import synthetic_data
    s = s or SIZES["fedavg-femnist"][1]
    data = synthetic_data(clients, s["n"], (28, 28, 1), 62, seed=seed)
    count = jnp.asarray([s["n"] - (11 * i) % s["n"] for i in range(clients)], jnp.int32)
    return data.replace(count=count)         # unequal counts, one below the batch size


def mnist_shards(quick: bool, data_dir, s: dict, seed: int = 0):
    """Our many-clients FedAvg data: ``ifca-rotated-mnist`` with one cluster (the runner's
    data key), m = s["clients"] clients of n = s["n"] training images (views of the MNIST
    pool; drawn with replacement when m * n exceeds the 60,000) and 10 test images; for
    --quick synthetic 784-pixel images on the 1/255 grid."""
    import jax.numpy as jnp

    from fedclust_jax import loop
    m, n = s["clients"], s["n"]
    if not quick:
        from fedclust_jax.data.registry import build_dataset
        return build_dataset("ifca-rotated-mnist", loop.data_key(seed), num_clusters=1,
                             num_clients=m, n=n, n_test=10, replace=m * n > MNIST_TRAIN,
                             data_dir=data_dir)
    import numpy as np
    from _common import synthetic_data
    data = synthetic_data(m, n, (784,), 10, seed=seed)
    grid = lambda a: jnp.asarray(byte_values()[np.rint(np.asarray(a) * 255).astype(np.uint8)])  # noqa: E731
    return data.replace(x=grid(data.x), x_test=grid(data.x_test))


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


def workload_data(workload: str, quick: bool, data_dir, s: dict, seed: int = 0):
    """Our data of ``workload`` at sizes ``s``."""
    if workload == "fedavg-femnist":
        return femnist_like(quick, data_dir, s["clients"], s, seed)
    if workload == "fedavg-mnist":
        return mnist_shards(quick, data_dir, s, seed)
    return rotated_mnist_like(quick, data_dir, s, seed)


def our_config(workload: str, s: dict) -> dict:
    """(dataset, model, model_args, algorithm, params) of our run of ``workload``: what
    ``ExperimentConfig`` and ``build_algorithm`` take."""
    if workload == "fedavg-femnist":
        return dict(dataset="femnist", model="femnist-cnn", model_args={}, algorithm="fedavg",
                    params=dict(lr=s["lr"], steps=s["steps"], batch_size=s["batch"]))
    if workload == "fedavg-mnist":
        return dict(dataset="ifca-rotated-mnist", model="mlp", model_args=dict(hidden=200),
                    algorithm="fedavg",
                    params=dict(lr=s["lr"], steps=s["steps"], batch_size=s["batch"]))
    return dict(dataset="ifca-rotated-mnist", model="mlp", model_args=dict(hidden=200),
                algorithm="ifca", params=dict(num_clusters=s["clusters"], option="model",
                                              lr=s["lr"], steps=s["steps"]))


def our_setup(workload: str, quick: bool, data_dir, s: dict, seed: int = 0):
    """(algorithm params, data, algorithm, initial params) of our run of ``workload`` at
    sizes ``s``: the algorithm as the runner builds it, the initial params as
    ``loop.init_states`` makes them from the run key of ``seed`` (restart 0)."""
    import jax

    from fedclust_jax import loop
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.registry import build_model
    data = workload_data(workload, quick, data_dir, s, seed)
    c = our_config(workload, s)
    model = build_model(c["model"], data, **c["model_args"])
    alg = build_algorithm(c["algorithm"], model, c["params"], data)
    init_keys, _ = loop.restart_keys(loop.run_key(seed), 1)
    states = jax.jit(lambda k, d: loop.init_states(alg, k, d))(init_keys, data)
    return c["params"], data, alg, jax.tree.map(lambda a: a[0], states.params)


def slots(data) -> int:
    """n_max: the training slots of one client (without materialising views)."""
    import jax
    return int(jax.eval_shape(lambda d: d.train_client(0), data)[0].shape[0])


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
    n, n_max, count = data.num_clients, slots(data), data.count

    @jax.jit
    def one_round(t):
        ids, keys = participants(jax.random.fold_in(round_keys[0], t), n, 1.0)

        def client(i, key):
            order = shuffled_order(key, count[i], n_max)
            return jax.vmap(lambda s: minibatch(order, s, count[i], batch))(jnp.arange(steps))
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


def torch_layout_mlp(params, k: int | None) -> dict:
    """Cluster model k of our MLP 784-200-10 ([K, ...] params; k None: one model's params)
    as a state dict (fc1, fc2: the IFCA authors' ``SimpleLinear``, ``TorchMLP``) of numpy
    arrays."""
    import numpy as np
    pick = (lambda a: np.asarray(a)) if k is None else (lambda a: np.asarray(a[k]))
    layer = lambda i, name: pick(params["layers"][i][name])   # noqa: E731
    return {"fc1.weight": layer(0, "kernel").T.copy(), "fc1.bias": layer(0, "bias"),
            "fc2.weight": layer(1, "kernel").T.copy(), "fc2.bias": layer(1, "bias")}


def haiku_layout(params, workload: str) -> dict:
    """Our FedAvg model's params as the Haiku modules of ``child_fedjax``'s models
    ({"module/w" or "module/b": numpy array}): Haiku keeps our layouts (conv kernels HWIO,
    dense kernels [in, out], NHWC flattened as (h, w, c)), so only the names change."""
    import numpy as np
    if workload == "fedavg-femnist":
        layers = {name: params[name] for name in ("conv1", "conv2", "fc1", "fc2")}
    else:
        layers = {"fc1": params["layers"][0], "fc2": params["layers"][1]}
    return {f"{name}/{short}": np.asarray(layer[ours]) for name, layer in layers.items()
            for short, ours in (("w", "kernel"), ("b", "bias"))}


def mnist_bytes(data):
    """(x uint8 [N, n, 784], y int64 [N, n]) of our fedavg-mnist data: the pool rows of every
    client (views) or the 1/255-grid floats as bytes (--quick); checked against client 0's
    read."""
    import numpy as np
    if hasattr(data, "pool_x"):
        index = np.asarray(data.index)
        x = np.asarray(data.pool_x)[index].reshape(index.shape[0], index.shape[1], -1)
        y = np.asarray(data.pool_y)[index]
    else:
        f = np.asarray(data.x, np.float32)
        x = np.rint(f * 255).astype(np.uint8).reshape(f.shape[0], f.shape[1], -1)
        y = np.asarray(data.y)
    x0, y0, _ = data.train_client(0)
    table = byte_values()
    if not (np.array_equal(table[x[0]], np.asarray(x0, np.float32).reshape(x[0].shape))
            and np.array_equal(y[0], np.asarray(y0))):
        raise SystemExit("peers.py: the exported MNIST bytes do not read as our client 0")
    return x, y.astype(np.int64)


def byte_values():
    """float32[256]: byte b -> b / 255 (numpy's float32 division, as our views' table)."""
    import numpy as np
    return np.arange(256, dtype=np.float32) / np.float32(255)


def export(workload: str, quick: bool, data_dir, rounds: int, folder: str, s: dict,
           peers: bool = True) -> dict:
    """Writes the workload's data, initial params and (FedAvg) minibatches to ``folder``
    for the peers (``peers`` False: the spec alone, for a run of ours only); returns the
    spec (also written as spec.json)."""
    import numpy as np
    params, data, alg, init = our_setup(workload, quick, data_dir, s)
    spec = dict(s, workload=workload, quick=quick, rounds=rounds, data_dir=data_dir,
                clients=int(data.num_clients), ours_params=params)
    save = lambda name, a: np.save(os.path.join(folder, f"{name}.npy"), a)  # noqa: E731
    if peers and workload.startswith("fedavg"):
        idx, mask = fedavg_batches(data, s["steps"], s["batch"], rounds)
        save("idx", idx)
        save("mask", mask)
        save("count", np.asarray(data.count))
        if workload == "fedavg-femnist":
            x = np.asarray(data.x, np.float32)                    # [N, n_max, 28, 28, 1]
            save("x", np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)))   # NCHW
            save("y", np.asarray(data.y).astype(np.int64))
            np.savez(os.path.join(folder, "init.npz"), **torch_layout_cnn(init))
        else:
            x, y = mnist_bytes(data)
            save("x", x)
            save("y", y)
            np.savez(os.path.join(folder, "init.npz"), **torch_layout_mlp(init, None))
        np.savez(os.path.join(folder, "init_haiku.npz"), **haiku_layout(init, workload))
    elif peers:
        if hasattr(data, "materialize"):         # views: every client's images, transformed
            data = data.materialize()
        count = np.asarray(data.count)
        save("y", np.asarray(data.y).astype(np.int64))
        save("count", count)
        x = np.asarray(data.x, np.float32).reshape(len(count), -1, 28, 28)
        byte = np.rint(x * 255)
        if np.abs(byte - x * 255).max() > 1e-3:
            raise SystemExit("peers.py: the MNIST pixels are not multiples of 1/255")
        save("x", byte.astype(np.uint8))
        np.savez(os.path.join(folder, "init.npz"),
                 **{f"{k}.{name}": v for k in range(s["clusters"])
                    for name, v in torch_layout_mlp(init, k).items()})
    with open(os.path.join(folder, "spec.json"), "w") as f:
        json.dump(spec, f)
    return spec


# ------------------------------------------------------------------ children
def _mark(marks: list) -> None:
    """Appends the time to ``marks`` and tells the parent (one stdout line), which stops a
    child whose start-up or round runs past its limit."""
    marks.append(time.perf_counter())
    print(json.dumps({"peers_mark": len(marks)}), flush=True)


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
    workload = spec["workload"]
    marks: list[float] = []

    class Timer(experiment.Progress):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            _mark(marks)

        def update(self, done, extra=""):
            _mark(marks)

    experiment.Progress = Timer
    data = workload_data(workload, spec["quick"], spec["data_dir"], spec)
    c = our_config(workload, spec)
    cfg = experiment.ExperimentConfig(dataset=c["dataset"], model=c["model"],
                                      model_args=c["model_args"], algorithm=c["algorithm"],
                                      params=spec["ours_params"], rounds=spec["rounds"],
                                      rounds_per_chunk=1)
    with split_over_host_devices() as mesh:
        out = experiment.run_experiment(cfg, data=data, progress=False)
    rounds = [b - a for a, b in zip(marks, marks[1:])]
    split = mesh is not None and data.num_clients % mesh.devices.size == 0
    backend = jax.default_backend()
    where = (f"XLA CPU, {os.cpu_count()} cores, {jax.device_count()} host device(s)"
             if backend == "cpu" else f"{jax.devices()[0].device_kind}")
    return dict(startup_s=marks[0] - t_start, round_s=rounds,
                loss=out["history"]["train_loss"], threads=where,
                layout=f"chunk {out['layout']['chunk'] if backend != 'cpu' else resolve_chunk('auto', data.num_clients)}"
                       + (f", walks split over {mesh.devices.size} host devices" if split else ""),
                version=f"fedclust_jax, jax {jax.__version__}")


def _torch_net(workload: str):
    """The workload's model as a ``torch.nn.Module`` class (the FEMNIST CNN, NCHW; or the MLP
    784-200-10 on flat images), with the ``loss`` and ``metrics`` methods pfl asks of a
    module."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class PflMethods:
        def loss(self, x, y, eval=False):
            self.eval() if eval else self.train()
            return F.cross_entropy(self(x), y)

        def metrics(self, x, y, eval=False):
            from pfl.metrics import Weighted
            self.eval() if eval else self.train()
            with torch.no_grad():
                loss = F.cross_entropy(self(x), y, reduction="sum").item()
            return {"loss": Weighted(loss, len(y))}

    class TorchFemnistCNN(PflMethods, nn.Module):
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

    class TorchMLP(PflMethods, nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 200)
            self.fc2 = nn.Linear(200, 10)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    return TorchFemnistCNN if workload == "fedavg-femnist" else TorchMLP


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


def _features(d, i: int, c: int):
    """Client i's first c examples' features as float32 numpy (bytes read as b / 255)."""
    import numpy as np
    x = np.asarray(d["x"][i, :c])
    return byte_values()[x] if x.dtype == np.uint8 else np.array(x)


def _client_tensors(d):
    """Per client (x [count, ...], y [count]) as torch tensors."""
    import numpy as np
    import torch
    return [(torch.from_numpy(_features(d, i, c)), torch.from_numpy(np.array(d["y"][i, :c])))
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
    idx, mask = d["idx"], d["mask"]
    net = _torch_net(spec["workload"])()
    net.load_state_dict(init)
    marks, losses = [], []
    _mark(marks)
    for t in range(spec["rounds"]):
        start = {k: v.clone() for k, v in net.state_dict().items()}
        total = {k: torch.zeros_like(v) for k, v in start.items()}
        round_loss = []
        for i, (x, y) in enumerate(clients):
            net.load_state_dict(start)
            with torch.no_grad():
                round_loss.append(F.cross_entropy(net(x), y).item())
            _train_steps(net, x, y, idx[t, i], mask[t, i], spec["lr"])
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    total[k] += v
        net.load_state_dict({k: v / len(clients) for k, v in total.items()})
        losses.append(statistics.fmean(round_loss))
        _mark(marks)
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
        x = torch.from_numpy(_features(d, i, c))
        y = torch.from_numpy(np.array(d["y"][i, :c]))
        net = _torch_net(cfg["workload"])()
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
        stamp = lambda rnd, arrays: _mark(marks) or None   # noqa: E731
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init),
                                num_rounds=spec["rounds"], evaluate_fn=stamp,
                                train_config=ConfigRecord({"folder": folder, "lr": spec["lr"],
                                                           "workload": spec["workload"]}))
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

    net = _torch_net(spec["workload"])()
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
            _mark(marks)
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            state["round"] = central_iteration + 1
            if central_iteration + 1 < spec["rounds"]:
                losses.append(round_loss())
            _mark(marks)
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




class RoundBatches:
    """A client's data for one round as FedJAX's FedAvg reads a client dataset: ``len()``
    is its weight in the server's mean (1: the equal mean), ``shuffle_repeat_batch`` gives
    the round's exported minibatches (dicts x, y and FedJAX's example mask)."""

    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return 1

    def shuffle_repeat_batch(self, hparams):
        return self.batches


def _jax_for_fedjax():
    """JAX for FedJAX: on a JAX without ``jax.tree_map`` (removed in 0.6) it is supplied as
    ``jax.tree.map`` (and ``jax.tree_util.tree_multimap`` likewise); returns (jax, note)."""
    import jax
    note = ""
    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree.map
        note = " (jax.tree_map supplied as jax.tree.map)"
    if not hasattr(jax.tree_util, "tree_multimap"):
        jax.tree_util.tree_multimap = jax.tree.map
    return jax, note


def child_fedjax(spec: dict, folder: str) -> dict:
    """FedJAX: the workload's model in Haiku (``fedjax.create_model_from_haiku``, loaded
    from our initial params), ``fedjax.model_grad``, and ``fedjax.algorithms.fed_avg``'s
    ``federated_averaging`` (client SGD at the workload's lr, server SGD at lr 1 applying the
    mean delta); every client in every round, each client's round data a ``RoundBatches``
    of the exported minibatches. The round's training loss: the global model's masked mean
    loss on every client's data, one jitted call."""
    t_start = time.perf_counter()
    import importlib.metadata

    import numpy as np
    jax, note = _jax_for_fedjax()
    import haiku as hk
    import jax.numpy as jnp
    import fedjax
    from fedjax.algorithms import fed_avg
    from fedjax.core.client_datasets import EXAMPLE_MASK_KEY
    d = _arrays(folder)
    count = np.asarray(d["count"])
    n, n_max = len(count), d["x"].shape[1]
    cnn = spec["workload"] == "fedavg-femnist"
    x = np.asarray(d["x"])
    x = (np.ascontiguousarray(x.transpose(0, 1, 3, 4, 2)) if cnn     # NCHW -> NHWC
         else byte_values()[x])
    y = np.asarray(d["y"]).astype(np.int32)
    idx, mask = np.asarray(d["idx"]), np.asarray(d["mask"])

    def forward(batch):
        h = batch["x"]
        if cnn:
            pool = lambda a: hk.max_pool(a, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # noqa: E731
            h = pool(jax.nn.relu(hk.Conv2D(32, 5, padding="SAME", name="conv1")(h)))
            h = pool(jax.nn.relu(hk.Conv2D(64, 5, padding="SAME", name="conv2")(h)))
            h = jax.nn.relu(hk.Linear(2048, name="fc1")(hk.Flatten()(h)))
            return hk.Linear(62, name="fc2")(h)
        return hk.Linear(10, name="fc2")(jax.nn.relu(hk.Linear(200, name="fc1")(h)))

    transformed = hk.transform(forward)
    model = fedjax.create_model_from_haiku(
        transformed, {"x": x[0, :1], "y": y[0, :1]},
        lambda batch, preds: fedjax.metrics.unreduced_cross_entropy_loss(batch["y"], preds))
    saved = np.load(os.path.join(folder, "init_haiku.npz"))
    params = {}
    for key in saved.files:
        module, name = key.split("/")
        params.setdefault(module, {})[name] = jnp.asarray(saved[key])
    shapes = jax.tree_util.tree_map(jnp.shape, model.init(jax.random.PRNGKey(0)))
    if jax.tree_util.tree_map(jnp.shape, params) != shapes:
        raise SystemExit(f"peers.py: our params do not fit the Haiku model {shapes}")
    algorithm = fed_avg.federated_averaging(
        fedjax.model_grad(model), fedjax.optimizers.sgd(spec["lr"]), fedjax.optimizers.sgd(1.0),
        fedjax.ShuffleRepeatBatchHParams(batch_size=spec["batch"]))
    state = algorithm.init(params)
    rngs = np.asarray(jax.random.split(jax.random.PRNGKey(0), n))

    @jax.jit
    def round_loss(params, xa, ya, ca):
        def one(args):
            xi, yi, ci = args
            logp = jax.nn.log_softmax(transformed.apply(params, None, {"x": xi}))
            ce = -jnp.take_along_axis(logp, yi[:, None], axis=1)[:, 0]
            return jnp.sum(jnp.where(jnp.arange(n_max) < ci, ce, 0.0)) / jnp.maximum(ci, 1)
        if cnn:   # one client at a time (the CNN's activations of every client would not fit)
            return jnp.mean(jax.lax.map(one, (xa, ya, ca)))
        return jnp.mean(jax.vmap(lambda *a: one(a))(xa, ya, ca))

    xa, ya, ca = jnp.asarray(x), jnp.asarray(y), jnp.asarray(count)
    marks, losses = [], []
    _mark(marks)
    for t in range(spec["rounds"]):
        losses.append(float(round_loss(state.params, xa, ya, ca)))
        clients = [(i, RoundBatches([{"x": x[i][idx[t, i, s]], "y": y[i][idx[t, i, s]],
                                      EXAMPLE_MASK_KEY: mask[t, i, s]}
                                     for s in range(idx.shape[2])]), rngs[i])
                   for i in range(n)]
        state, _ = algorithm.apply(state, clients)
        jax.block_until_ready(state.params)
        _mark(marks)
    backend = jax.default_backend()
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=losses,
                threads=(f"XLA CPU, {os.cpu_count()} cores" if backend == "cpu"
                         else jax.devices()[0].device_kind),
                layout="fedjax.for_each_client, clients one after another",
                version=f"fedjax {importlib.metadata.version('fedjax')}, jax {jax.__version__}"
                        f"{note}, dm-haiku {importlib.metadata.version('dm-haiku')}")


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
    marks, losses = [], [float(res["loss"])]
    _mark(marks)
    for t in range(spec["rounds"]):
        exp.epoch = t
        exp.train(res["cluster_assign"], lr=lr)
        res = exp.test(train=True)
        _mark(marks)
        if t + 1 < spec["rounds"]:
            losses.append(float(res["loss"]))
    return dict(startup_s=marks[0] - t_start, round_s=[b - a for a, b in zip(marks, marks[1:])],
                loss=losses, threads=f"torch {torch.get_num_threads()} threads",
                layout="clients one after another (their loop)",
                version=f"IFCA authors' code, torch {torch.__version__}")




CHILDREN = {"fedclust_jax": child_ours, "pytorch": child_pytorch, "flower": child_flower,
            "pfl": child_pfl, "fedjax": child_fedjax, "ifca-authors": child_ifca_authors}


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children first found, deepest last."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def _stop(proc) -> None:
    """Kills the child and every process it started (Ray's included, which may leave the
    child's process group)."""
    for pid in [proc.pid] + _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def run_child(args, framework: str, folder: str, threads: int | None = None) -> dict:
    """One run of ``framework`` in a fresh process; its record (or the error's last line).
    The child reports every round as it ends; it is stopped when its start-up runs past
    ``args.startup_limit`` seconds or a round past ``args.round_limit`` (record:
    ``timeout_s``, ``rounds_done`` and the phase it was in)."""
    python = python_of(args, framework)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    threads = threads or args.threads
    if framework not in ("fedclust_jax", "fedjax"):
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [python, os.path.abspath(__file__), "--child", framework, "--spec", folder,
           "--child-threads", str(threads)]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                cwd=folder, start_new_session=True)
        lines: queue.Queue = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)],
                                  daemon=True)
        reader.start()
        record, marks = None, 0
        deadline, limit, phase = t0 + args.startup_limit, args.startup_limit, "start-up"
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                _stop(proc)
                if record is not None:        # done, but slow to exit: its record stands
                    break
                return dict(timeout_s=limit, rounds_done=max(0, marks - 1), phase=phase,
                            error=f"stopped: {phase} took more than {limit:g} s",
                            wall_s=time.perf_counter() - t0)
            if line is None:
                break
            if line.startswith("{\"peers_mark\""):
                marks += 1
                deadline, limit = time.perf_counter() + args.round_limit, args.round_limit
                phase = f"round {marks}"
            elif line.startswith("{\"peers_record\""):
                record = json.loads(line)["peers_record"]
        proc.wait()
        err.seek(0)
        tail = (err.read().strip().splitlines() or ["no output"])[-1]
    wall = time.perf_counter() - t0
    if record is not None:
        return dict(record, wall_s=wall)
    return dict(error=f"exit {proc.returncode}: {tail[:300]}", wall_s=wall)


# ------------------------------------------------------------------ the table
def agreement(ours: list, theirs: list) -> float:
    """The largest relative difference of two per-round loss lists (over common rounds)."""
    pairs = list(zip(ours, theirs))
    return max(abs(a - b) / max(abs(a), 1e-12) for a, b in pairs) if pairs else float("nan")


def seconds_text(entry: dict) -> str:
    """A summary entry's seconds per round, or "> LIMIT" for one stopped at its limit."""
    if entry.get("seconds_per_round") is not None:
        return f"{entry['seconds_per_round']:.2f}"
    if entry.get("timeout_s") is not None:
        return f"> {entry['timeout_s']:g}"
    return "not run"


def summarize(workload: str, runs: dict, tolerance: float) -> tuple[list[str], dict]:
    """Markdown lines and a summary dict of one case's runs {framework: [record per pass]}.
    A framework stopped at its time limit in any pass is reported as
    ``seconds_per_round: None, timeout_s: LIMIT``."""
    lines = [f"| framework | s / round (median of passes) | per pass | first round s | "
             f"start-up s | threads | loss agreement with ours (max rel. diff) |",
             "|---|---:|---|---:|---:|---|---|"]
    summary = {}
    ours = next((r for r in runs.get("fedclust_jax", []) if "loss" in r), None)
    for fw, recs in runs.items():
        good = [r for r in recs if "round_s" in r]
        stopped = [r for r in recs if r.get("timeout_s") is not None]
        if stopped:
            r = stopped[0]
            summary[fw] = dict(seconds_per_round=None, timeout_s=r["timeout_s"],
                               stopped_in=r["phase"], rounds_done=r["rounds_done"])
            lines.append(f"| {fw} | > {r['timeout_s']:g} | | | | | stopped in {r['phase']} "
                         f"({r['rounds_done']} round(s) done) |")
            continue
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
    if "fedclust_jax" in summary and summary["fedclust_jax"].get("seconds_per_round"):
        base = summary["fedclust_jax"]["seconds_per_round"]
        ratios = [f"{fw} {s['seconds_per_round'] / base:.2f}x" if s.get("seconds_per_round")
                  else f"{fw} > {s['timeout_s'] / base:.2f}x" for fw, s in summary.items()
                  if fw != "fedclust_jax" and (s.get("seconds_per_round") or s.get("timeout_s"))]
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


def speedup(summary: dict) -> tuple[float | None, str | None, bool]:
    """(the fastest peer's seconds per round over ours, that peer, whether it is a lower
    bound: every peer was stopped at its limit) of one case's summary; (None, None, False)
    without a time of ours or of any peer."""
    ours = summary.get("fedclust_jax", {}).get("seconds_per_round")
    timed = {fw: s["seconds_per_round"] for fw, s in summary.items()
             if fw != "fedclust_jax" and s.get("seconds_per_round")}
    limits = {fw: s["timeout_s"] for fw, s in summary.items()
              if fw != "fedclust_jax" and s.get("timeout_s")}
    if not ours or not (timed or limits):
        return None, None, False
    if timed:
        fw = min(timed, key=timed.get)
        return timed[fw] / ours, fw, False
    fw = min(limits, key=limits.get)
    return limits[fw] / ours, fw, True


def scale_table(summaries: dict, workload: str = "fedavg-mnist") -> list[str]:
    """Markdown lines: seconds per round of every framework against m over the cases of
    ``workload`` (``<workload>-m<M>``), then ours' speed-up over the fastest peer."""
    ms = sorted((int(c.rsplit("-m", 1)[1]), c) for c in summaries if c.startswith(workload + "-m"))
    if not ms:
        return []
    frameworks = list(dict.fromkeys(fw for _, c in ms for fw in summaries[c]))
    lines = [f"\n## {workload}: seconds per round against m\n",
             "| framework | " + " | ".join(f"m = {m:,}" for m, _ in ms) + " |",
             "|---|" + "---:|" * len(ms)]
    for fw in frameworks:
        lines.append(f"| {fw} | " + " | ".join(seconds_text(summaries[c].get(fw, {}))
                                               for _, c in ms) + " |")
    cells = []
    for m, c in ms:
        ratio, fw, bound = speedup(summaries[c])
        cells.append("" if ratio is None else f"{'>= ' if bound else ''}{ratio:.2f}x ({fw})")
    lines.append("| ours' speed-up over the fastest peer | " + " | ".join(cells) + " |")
    return lines


def scale_plot(summaries: dict, path: str, workload: str = "fedavg-mnist") -> None:
    """Seconds per round against m, log-log, one line per framework; a run stopped at its
    limit is an open triangle at the limit."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ms = sorted((int(c.rsplit("-m", 1)[1]), c) for c in summaries if c.startswith(workload + "-m"))
    frameworks = list(dict.fromkeys(fw for _, c in ms for fw in summaries[c]))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, fw in enumerate(frameworks):
        color = f"C{i}"
        pts = [(m, summaries[c][fw]["seconds_per_round"]) for m, c in ms
               if summaries[c].get(fw, {}).get("seconds_per_round")]
        cut = [(m, summaries[c][fw]["timeout_s"]) for m, c in ms
               if summaries[c].get(fw, {}).get("timeout_s")]
        if pts:
            ax.plot(*zip(*pts), "o-", color=color, label=fw, lw=2.2 if fw == "fedclust_jax" else 1.4)
        if cut:
            ax.plot(*zip(*cut), "^", color=color, mfc="none", ms=9,
                    label=f"{fw}: stopped at the limit" if not pts else None)
            if pts:
                ax.plot([pts[-1][0], cut[0][0]], [pts[-1][1], cut[0][1]], ":", color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("clients m (every client every round)")
    ax.set_ylabel("seconds per round")
    ax.set_title(f"{workload}: MLP 784-200-10, 5 steps of batch 10 per client")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def runs_of(a, workload: str, frameworks) -> list[tuple[str, str, int]]:
    """(row label, framework, threads) of every run of a case: the plain PyTorch loop once
    per ``--torch-threads`` value (``pytorch-<T>t`` when there are several)."""
    out = []
    for fw in frameworks:
        if fw == "pytorch" and len(a.torch_threads) > 1:
            out += [(f"pytorch-{t}t", fw, t) for t in a.torch_threads]
        else:
            out.append((fw, fw, a.torch_threads[0] if fw == "pytorch" else a.threads))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CI size on synthetic data of the real shapes (no --data-dir needed)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--frameworks", nargs="+", default=None,
                   choices=sorted({f for fs in WORKLOADS.values() for f in fs}),
                   help="run only these (default: every framework of each workload)")
    p.add_argument("--clients", nargs="+", type=int, default=None, metavar="M",
                   help="fedavg-mnist: the numbers of clients, one case each (default "
                        "100 1000 10000; --quick 8 16)")
    p.add_argument("--writers", type=int, default=None, metavar="N",
                   help="fedavg-femnist: the first N FEMNIST writers (default 50; --quick 4)")
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding femnist-leaf/ and mnist/ (default $FEDCLUST_DATA)")
    p.add_argument("--ifca-code", metavar="DIR", default=None,
                   help="folder with the IFCA authors' train_cluster_mnist.py and util.py")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the Python with torch, flwr[simulation] and pfl (default this one)")
    p.add_argument("--fedjax-python", default=sys.executable,
                   help="the Python with fedjax and dm-haiku (a JAX older than 0.6; default "
                        "this one)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved passes (default 3; --quick 1)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per run (default 4); the first is reported alone")
    p.add_argument("--threads", type=int, default=2,
                   help="threads of the PyTorch-based peers (Flower, pfl, the IFCA authors')")
    p.add_argument("--torch-threads", nargs="+", type=int, default=None, metavar="T",
                   help="threads of the plain PyTorch loop, one row each (default --threads)")
    p.add_argument("--round-limit", type=float, default=120.0, metavar="S",
                   help="a child one of whose rounds takes longer is stopped and recorded "
                        "as '> S' (default 120)")
    p.add_argument("--startup-limit", type=float, default=600.0, metavar="S",
                   help="likewise for a child's start-up (default 600)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest relative difference of a peer's per-round loss from ours "
                        "(default 5e-3; --quick 1e-4)")
    p.add_argument("--json", type=output_file, default=None, help="write the records here")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    p.add_argument("--plot", type=output_file, default=None,
                   help="fedavg-mnist: seconds per round against m, log-log (.png; needs "
                        "matplotlib, the [bench] extra)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        with open(os.path.join(a.spec, "spec.json")) as f:
            spec = json.load(f)
        if a.child_threads:
            spec["threads"] = a.child_threads
        record = CHILDREN[a.child](spec, a.spec)
        print(json.dumps({"peers_record": record}, default=float), flush=True)
        return record
    a.torch_threads = a.torch_threads or [a.threads]
    if ((a.repeats is not None and a.repeats < 1) or a.threads < 1 or min(a.torch_threads) < 1
            or (a.rounds is not None and a.rounds < 2)):
        p.error("--repeats, --threads and --torch-threads must be >= 1 and --rounds >= 2")
    if (a.clients is not None and min(a.clients) < 1) or (a.writers is not None and a.writers < 1):
        p.error("--clients and --writers must be whole numbers >= 1")
    if min(a.round_limit, a.startup_limit) <= 0:
        p.error("--round-limit and --startup-limit must be positive seconds")
    if a.plot and "fedavg-mnist" not in a.workloads:
        p.error("--plot draws the fedavg-mnist cases; add fedavg-mnist to --workloads")
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error("--plot needs matplotlib: pip install -e \".[bench]\"")
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.rounds = a.rounds or 4
    a.tolerance = a.tolerance if a.tolerance is not None else (1e-4 if a.quick else 5e-3)
    plan = [(case, w, s, runs_of(a, w, [f for f in WORKLOADS[w]
                                        if a.frameworks is None or f in a.frameworks]))
            for case, w, s in cases(a.workloads, a.quick, a.clients, a.writers)]
    used = {fw for *_, runs in plan for _, fw, _ in runs}
    missing = missing_peers(a.peer_python, used - set(OWN_PYTHON))
    fedjax = (a.fedjax_python, missing_peers(a.fedjax_python, used & {"fedjax"}))
    if missing or fedjax[1]:
        print(missing_line(a.peer_python, missing, fedjax), file=sys.stderr)
        raise SystemExit(2)
    if not a.quick and (not a.data_dir or not os.path.isdir(a.data_dir)):
        p.error(f"needs --data-dir (a folder holding femnist-leaf/ and mnist/) or "
                f"$FEDCLUST_DATA; got {a.data_dir!r} (--quick runs without it)")
    if a.data_dir:
        a.data_dir = os.path.abspath(a.data_dir)
    with printed_to(a.out, __file__):
        return compare(a, plan)


def compare(a, plan: list) -> dict:
    import jax
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; jax "
          f"{jax.__version__}; peers from {a.peer_python}, FedJAX from {a.fedjax_python}; "
          f"{a.repeats} interleaved passes of {a.rounds} rounds; limits: start-up "
          f"{a.startup_limit:g} s, a round {a.round_limit:g} s; load at start {os.getloadavg()}",
          flush=True)
    results, log, folders = {}, [], {}
    with tempfile.TemporaryDirectory(prefix="peers_") as tmp:
        for case, w, s, runs in plan:
            folders[case] = os.path.join(tmp, case)
            os.makedirs(folders[case])
            t0 = time.perf_counter()
            peers = any(fw != "fedclust_jax" for _, fw, _ in runs)
            spec = export(w, a.quick, a.data_dir, a.rounds, folders[case], s, peers=peers)
            spec.update(threads=a.threads, ifca_code=os.path.abspath(a.ifca_code or "."))
            with open(os.path.join(folders[case], "spec.json"), "w") as f:
                json.dump(spec, f)
            if any(fw == "ifca-authors" for _, fw, _ in runs) and not _authors_present(a.ifca_code):
                runs[:] = [r for r in runs if r[1] != "ifca-authors"]
                results.setdefault(case, {})["ifca-authors"] = [dict(
                    error="not run: no --ifca-code folder holding train_cluster_mnist.py")]
            print(f"# {case}: exported data, initial params"
                  f"{' and minibatches' * w.startswith('fedavg')} in "
                  f"{time.perf_counter() - t0:.1f} s ({spec['clients']} clients)", flush=True)
        for r in range(a.repeats):
            for case, w, s, runs in plan:
                for label, fw, threads in runs:
                    load = os.getloadavg()
                    rec = run_child(a, fw, folders[case], threads)
                    rec.update(workload=w, case=case, framework=label, pass_=r + 1,
                               load_before=load)
                    results.setdefault(case, {}).setdefault(label, []).append(rec)
                    log.append(rec)
                    what = (f"{statistics.median(rec['round_s'][1:] or rec['round_s']):.2f} s / round, "
                            f"start-up {rec['startup_s']:.1f} s" if "round_s" in rec else rec["error"])
                    print(f"pass {r + 1} {case} {label}: {what} (load before {load[0]:.2f})",
                          flush=True)
                    _write_json(a, log, results, plan)
    summaries = _write_json(a, log, results, plan)
    for case, w, s, _ in plan:
        print(f"\n## {case}" + (" (--quick: synthetic data)" if a.quick else "")
              + f": {json.dumps(s)}\n")
        print("\n".join(summarize(case, results.get(case, {}), a.tolerance)[0]))
    table = scale_table(summaries)
    if table:
        print("\n".join(table))
    if a.plot:
        scale_plot(summaries, a.plot)
        print(f"\nPlot: {a.plot}")
    print(f"\nLoad at end: {os.getloadavg()}")
    return summaries


def _write_json(a, log: list, results: dict, plan: list) -> dict:
    """The summaries of the runs so far; written to ``--json`` (after every run, so a run
    cut short keeps what it finished)."""
    summaries = {case: summarize(case, results.get(case, {}), a.tolerance)[1]
                 for case, *_ in plan if case in results}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(runs=log, summary=summaries, tolerance=a.tolerance, rounds=a.rounds,
                           repeats=a.repeats, cpus=os.cpu_count(), round_limit_s=a.round_limit,
                           startup_limit_s=a.startup_limit), f, indent=1, default=float)
    return summaries


def _authors_present(folder) -> bool:
    return bool(folder) and all(os.path.isfile(os.path.join(folder, f))
                                for f in ("train_cluster_mnist.py", "util.py"))


if __name__ == "__main__":
    main()
