"""One IFCA MNIST round side by side with the IFCA authors' PyTorch code, interleaved.

On rotated MNIST (``ifca-rotated-mnist``, K = 4, MLP 784-200-10, option II, tau full-batch
local steps, lr 0.1, m clients x n images): our round is the runner's compiled chunk of one
round (``loop.run_chunk``), compiled first; then, --repeats times, ours and theirs are timed
in turn (theirs: one run of ``--peer-python train_cluster_mnist.py`` with one epoch, whose
train + re-cluster seconds of epoch 0 are the round, as their log prints them), each with
the load before it; medians and their ratios at the end. With ``--devices D`` this process
starts with D XLA host devices and ours is timed twice per pass: on one device, and with the
client walks split over the D devices as the command line runs on a CPU
(``fedclust_jax.hostdevices``).

--peer DIR holds their ``mnist/train_cluster_mnist.py``, ``util.py``, ``config.json``, MNIST
under ``data/MNIST/raw`` and a ``torchvision`` stand-in, as ``shared/peers/ifca_mnist_round``'s
README sets up; their code is never part of this project.

    python benchmarks/ifca_round.py --peer /tmp/peerifca/ifca_mnist --peer-python \
        /tmp/peerifca/venv/bin/python --sizes 2400:100 --devices 2 --repeats 4 --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import output_file, printed_to, runner_round  # noqa: E402


def peer_round(args, m: int, n: int) -> float:
    """Train + re-cluster seconds of epoch 0 of one run of the authors' code (1 epoch)."""
    override = json.dumps({"num_epochs": 1, "m": m, "n": n, "m_test": 4 * 10000 // n})
    out = subprocess.run([args.peer_python, "-u", "train_cluster_mnist.py", "--project-dir",
                          "/tmp/ifca_round_peer_out", "--config-override", override],
                         cwd=args.peer, capture_output=True, text=True)
    hit = re.search(r"Epoch 0 tr:.*?([\d.]+)sec\(train\) ([\d.]+)sec\(infer\)", out.stdout)
    if not hit:
        raise SystemExit(f"the authors' code printed no epoch-0 timing: {out.stderr[-800:]}")
    return float(hit.group(1)) + float(hit.group(2))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", required=True, metavar="DIR",
                   help="folder of the IFCA authors' MNIST code (see the module doc)")
    p.add_argument("--peer-python", default="python", help="the Python (with torch) for --peer")
    p.add_argument("--sizes", default="2400:100", metavar="M:N", help="m clients x n images")
    p.add_argument("--tau", type=int, default=10, help="local steps")
    p.add_argument("--repeats", type=int, default=4, help="interleaved passes")
    p.add_argument("--devices", type=int, default=0, metavar="D",
                   help="also time ours with the client walks split over D host devices")
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_DATA"),
                   help="folder holding mnist/ (default $FEDCLUST_DATA)")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.peer, "train_cluster_mnist.py")):
        p.error(f"--peer {args.peer} holds no train_cluster_mnist.py; set the folder up as "
                "shared/peers/ifca_mnist_round/README.md says")
    if not re.fullmatch(r"\d+:\d+", args.sizes):
        p.error(f"--sizes takes M:N (clients:images), got {args.sizes!r}")
    if args.devices == 1 or args.devices < 0 or args.repeats < 1:
        p.error("--devices must be 0 or >= 2 and --repeats >= 1")
    if args.devices:   # before JAX starts
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                                   f"platform_device_count={args.devices}")
    with printed_to(args.out, __file__):
        side_by_side(args, *(int(v) for v in args.sizes.split(":")))


def side_by_side(args, m: int, n: int):
    import jax

    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.core.clients import resolve_chunk
    from fedclust_jax.data.registry import build_dataset
    from fedclust_jax.hostdevices import split_over_host_devices
    from fedclust_jax.models.registry import build_model
    extra = {"data_dir": args.data_dir} if args.data_dir else {}
    data = build_dataset("ifca-rotated-mnist", jax.random.key(0), num_clusters=4,
                         num_clients=m, n=n, **extra)
    alg = build_algorithm("ifca", build_model("mlp", data, hidden=200),
                          dict(num_clusters=4, option="model", lr=0.1, steps=args.tau), data)
    fn, call = runner_round(alg, data)
    ours = {"fedclust_jax, 1 device": jax.jit(fn).lower(*call).compile()}
    if args.devices:
        with split_over_host_devices() as mesh:
            if mesh is None:
                raise SystemExit(f"--devices {args.devices}: JAX started with "
                                 f"{jax.device_count()} {jax.default_backend()} device(s)")
            split = jax.jit(lambda *a: fn(*a)).lower(*call).compile()   # a new trace, split
        ours[f"fedclust_jax, walks split over {args.devices} host devices"] = split
    for f in ours.values():
        jax.block_until_ready(f(*call))                  # warm up
    print(f"# jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; IFCA MNIST round, m = {m}, n = {n}, K = 4, tau = "
          f"{args.tau}, rotated MNIST; ours: the runner's compiled round, default layout "
          f"(chunk {resolve_chunk(alg.cfg.chunk, m, devices=1)}); theirs: {args.peer}")
    print("| pass | who | s / round | load before (1, 5, 15 min) |\n|---:|---|---:|---|")
    times = {who: [] for who in [*ours, "authors (train + re-cluster)"]}
    for r in range(args.repeats):
        for who in times:
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            if who in ours:
                t0 = time.perf_counter()
                jax.block_until_ready(ours[who](*call))
                times[who].append(time.perf_counter() - t0)
            else:
                times[who].append(peer_round(args, m, n))
            print(f"| {r + 1} | {who} | {times[who][-1]:.2f} | {load} |", flush=True)
    med = {who: statistics.median(t) for who, t in times.items()}
    theirs = med.pop("authors (train + re-cluster)")
    print(f"\nMedians of {args.repeats}: authors {theirs:.2f} s; "
          + "; ".join(f"{who} {s:.2f} s (authors / this = {theirs / s:.2f})"
                      for who, s in med.items()))


if __name__ == "__main__":
    main()
