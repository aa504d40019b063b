"""Times Threshold-Clustering's two methods ("points", "gram"; ``core.robust``) alone and
inside FC's MNIST round, side by side in one process.

    python benchmarks/threshold_tc_methods.py --data-dir ../shared/data/mnist [--reps 5] \
        [--out benchmarks/results/threshold_tc_methods.md]

TC alone: K = 1 from the first point, l = 10, radius = 20th percentile, over 30 random
[S = 19, P = 159,010] point sets (FC's subgroup of the MNIST MLP 784-200-10), one set at a
time (``lax.map``); milliseconds a set, median over repetitions. FC round: threshold
Table 1's MNIST setting with the MLP 784-200-10 (300 clients, one SGD step at lr 0.1 on 50
examples, 16 random groups, l = 10, one client at a time), one seed, seconds per compiled
round, every repetition printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from fedclust_jax.algorithms.fc import FCConfig, FederatedClustering
from fedclust_jax.core.threshold_clustering import TC_METHODS, threshold_clustering
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.recipes import personalized_mnist
from fedclust_jax.models.mlp import mlp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import output_file, printed_to  # noqa: E402


def seconds(fn, *args):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("FEDCLUST_MNIST", "../shared/data/mnist"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", type=output_file,
                   default=None, help="also write what is printed to this file")
    args = p.parse_args()
    with printed_to(args.out, __file__, fence=True):
        measure(args)


def measure(args):

    sets = 30
    z = jax.random.normal(jax.random.key(0), (sets, 19, 159010))
    tc = {m: jax.jit(lambda z, m=m: jax.lax.map(
        lambda g: threshold_clustering(g, g[:1], iters=10, quantile=0.2, method=m), z))
        for m in TC_METHODS}
    for f in tc.values():
        seconds(f, z)
    per = {m: [] for m in tc}
    for _ in range(args.reps):
        for m, f in tc.items():
            per[m].append(1000 * seconds(f, z) / sets)
    print("TC alone, ms a point set (median): " + ", ".join(
        f"{m} {statistics.median(v):.2f}" for m, v in per.items()), flush=True)

    data = jax.tree.map(lambda a: a[None], personalized_mnist(
        jax.random.key(0), task="rotation", data_dir=args.data_dir))
    keys = jax.vmap(jax.random.key)(jnp.asarray([0]))
    rounds = {}
    for m in TC_METHODS:
        alg = FederatedClustering(mlp((784, 200, 10)), FCConfig(
            local=LocalTraining(steps=1, lr=0.1, batch_size=50), tc_iters=10,
            radius_quantile=0.2, num_groups=16, same_init=True, chunk=1, tc_method=m))
        state = jax.jit(jax.vmap(lambda k, d: alg.init(jax.random.fold_in(k, 0), d)))(keys, data)
        rnd = jax.jit(jax.vmap(lambda s, k, d: alg.round(s, k, d)[0]))
        seconds(rnd, state, keys, data)
        rounds[m] = (rnd, state)
    per = {m: [] for m in rounds}
    for _ in range(args.reps):
        for m, (rnd, state) in rounds.items():
            per[m].append(seconds(rnd, state, keys, data))
    print("FC round (MNIST MLP, 300 clients), s: " + "; ".join(
        f"{m} " + ", ".join(f"{t:.2f}" for t in v) for m, v in per.items()))
    print(f"Machine: {jax.devices()[0].platform}, JAX {jax.__version__}, "
          f"{os.cpu_count()} CPU cores")


if __name__ == "__main__":
    main()
