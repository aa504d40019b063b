"""Time one IFCA round (option II): MLP 784-200-10, n=100 examples per client, full batch,
tau=10 local steps, K=4 cluster models; N clients, full vmap vs chunked lax.map.

Prints seconds per round (median of --repeats timed rounds after one compile round) and the
achieved GFLOP/s, counting 2 * (784*200 + 200*10) FLOPs per example per forward pass, K
forwards for the loss matrix and 3 forward-equivalents per local step (forward + backward).

    python benchmarks/ifca_round.py --clients 100 1000 --chunks none 50 200
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.mlp import mlp

SIZES = (784, 200, 10)


def round_flops(n_clients: int, n: int, k: int, tau: int) -> float:
    forward = 2 * sum(a * b for a, b in zip(SIZES[:-1], SIZES[1:])) * n
    return n_clients * (k * forward + tau * 3 * forward)


def make_data(n_clients: int, n: int) -> FederatedData:
    kx, ky = jax.random.split(jax.random.key(0))
    x = jax.random.uniform(kx, (n_clients, n, SIZES[0]))
    y = jax.random.randint(ky, (n_clients, n), 0, SIZES[-1])
    count = jnp.full((n_clients,), n, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x[:, :1], y_test=y[:, :1],
                         count_test=jnp.ones_like(count), cluster=jnp.zeros_like(count),
                         num_classes=SIZES[-1])


def time_round(n_clients: int, chunk, *, n: int, k: int, tau: int, repeats: int) -> float:
    data = make_data(n_clients, n)
    alg = IFCA(mlp(SIZES), IFCAConfig(num_clusters=k, option="model", chunk=chunk,
                                      local=LocalTraining(steps=tau, lr=0.1)))
    state = alg.init(jax.random.key(1), data)
    step = jax.jit(alg.round)
    state, _ = step(state, jax.random.key(2), data)
    jax.block_until_ready(state)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        state, _ = step(state, jax.random.key(3 + r), data)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--chunks", nargs="+", default=["none", "50", "200"],
                   help="client chunk sizes; 'none' = one vmap over all clients")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--tau", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dev = jax.devices()[0]
    print(f"# jax {jax.__version__}, {dev.platform} {getattr(dev, 'device_kind', '')}, "
          f"{platform.processor() or platform.machine()}, {jax.device_count()} device(s)")
    print("| clients N | chunk | s / round | GFLOP / round | GFLOP/s |")
    print("|---:|---:|---:|---:|---:|")
    for n_clients in args.clients:
        for c in args.chunks:
            chunk = None if c == "none" else int(c)
            if chunk is not None and chunk >= n_clients:
                continue
            sec = time_round(n_clients, chunk, n=args.n, k=args.k, tau=args.tau, repeats=args.repeats)
            gflop = round_flops(n_clients, args.n, args.k, args.tau) / 1e9
            print(f"| {n_clients} | {c} | {sec:.3f} | {gflop:.1f} | {gflop / sec:.1f} |", flush=True)


if __name__ == "__main__":
    main()
