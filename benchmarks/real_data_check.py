"""Real-data check: reads MNIST (IDX), FEMNIST and Shakespeare (LEAF JSON) from a folder,
builds every recipe that uses them, and prints clients, samples per client and label
histograms.

    python benchmarks/real_data_check.py [DATA_DIR] [--out FILE]   # default: ../shared/data

The committed output: ``--out benchmarks/results/real_data_check.txt``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

from fedclust_jax.data import build_dataset
from fedclust_jax.data.leaf import (SHAKESPEARE_CHARS, find_leaf, load_leaf_clients,
                                   read_leaf_folder, time_split)
from fedclust_jax.data.sources import load_images

from _common import output_file, printed_to

REPO = Path(__file__).resolve().parents[1]
KEY = jax.random.key(0)


def hist(labels, num_classes):
    return np.bincount(np.asarray(labels).reshape(-1), minlength=num_classes)


def spread(counts):
    c = np.asarray(counts)
    return f"min {c.min()} / median {int(np.median(c))} / max {c.max()} (total {c.sum()})"


def describe(name, d):
    count, count_test = np.asarray(d.count), np.asarray(d.count_test)
    cluster = np.asarray(d.cluster)
    print(f"  {name}: {d.num_clients} clients, features {d.feature_shape}, "
          f"{d.num_classes} classes")
    print(f"    train per client: {spread(count)}")
    print(f"    test per client:  {spread(count_test)}")
    if (cluster >= 0).any():
        print(f"    clients per cluster: {np.bincount(cluster).tolist()}; "
              f"first clients' clusters: {cluster[:8].tolist()}")
    mask = np.arange(d.y.shape[1]) < count[:, None]
    y = np.asarray(d.y)
    print(f"    train label histogram: {hist(y[mask], d.num_classes).tolist()}")
    if (cluster >= 0).any():
        for c in range(int(cluster.max()) + 1):
            sel = cluster == c
            print(f"    cluster {c} labels: {hist(y[sel][mask[sel]], d.num_classes).tolist()}")


def check_mnist(data_dir):
    print("== MNIST (IDX files) ==")
    x, y, xt, yt = load_images("mnist", data_dir, source="local")
    print(f"  train {x.shape}, test {xt.shape}, pixels in [{x.min()}, {x.max()}], "
          f"mean {x.mean():.4f}, std {x.std():.4f}")
    print(f"  train labels: {hist(y, 10).tolist()}")
    print(f"  test labels:  {hist(yt, 10).tolist()}")
    for name, params in (("srfca-rotated-mnist", {}), ("srfca-inverted-mnist", {}),
                         ("ifca-rotated-mnist", {"num_clients": 1200, "n": 200}),
                         ("ifca-rotated-mnist", {"num_clusters": 2, "num_clients": 200,
                                                 "n": 100}),
                         ("personalized-mnist", {"task": "rotation"}),
                         ("personalized-mnist", {"task": "label"})):
        d = build_dataset(name, KEY, data_dir=data_dir, **params)
        describe(f"{name} {params}" if params else name, d)
        del d


def check_femnist(data_dir):
    print("== FEMNIST (LEAF JSON) ==")
    users, xs, ys, xts, _ = load_leaf_clients("femnist", data_dir)
    print(f"  writers {len(users)}, train samples {sum(map(len, xs))}, "
          f"test samples {sum(map(len, xts))}, classes present "
          f"{len(np.unique(np.concatenate(ys)))}")
    for name, params in (("femnist", {}), ("femnist", {"num_clients": 50})):
        describe(f"{name} {params}" if params else name, build_dataset(name, KEY, data_dir=data_dir,
                                                                       **params))


def check_shakespeare(data_dir):
    print("== Shakespeare (LEAF JSON) ==")
    d = build_dataset("shakespeare", KEY, data_dir=data_dir)
    describe("shakespeare (LEAF train/test)", d)
    y = np.asarray(d.y)[np.arange(d.y.shape[1]) < np.asarray(d.count)[:, None]]
    top = np.argsort(-hist(y, 80))[:10]
    print(f"    most frequent targets: {[SHAKESPEARE_CHARS[i] for i in top]}")
    raw = read_leaf_folder(find_leaf("shakespeare", data_dir, "derived"))
    total = np.array([len(u["x"]) for u in raw.values()])
    parts = [time_split(int(t), 0.9, 79) for t in total]
    n = np.array([p[0].stop - p[0].start for p in parts])
    nt = np.array([p[1].stop - p[1].start for p in parts])
    print(f"  derived (no LEAF split): {len(raw)} speakers, {total.sum()} windows; "
          f"time-ordered 90/10 split with a gap of 79 windows -> train {n.sum()}, test {nt.sum()}")
    print(f"    train per speaker: {spread(n)}")
    print(f"    test per speaker:  {spread(nt)}; speakers without test windows: "
          f"{int((nt == 0).sum())}")


def check_digits():
    print("== scikit-learn digits (embedded) ==")
    describe("rotated-digits", build_dataset("rotated-digits", KEY))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--out", type=output_file,
                        default=None, help="also write what is printed to this file")
    args = parser.parse_args()
    with printed_to(args.out, __file__):
        print(f"data dir: {Path(args.data_dir).name} (../shared/data by default)")
        check_mnist(args.data_dir)
        check_femnist(args.data_dir)
        check_shakespeare(args.data_dir)
        check_digits()


if __name__ == "__main__":
    main()
