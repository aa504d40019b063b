"""The papers' cluster recipes on real data, as named datasets ``builder(key, **params)``.

Images are float32 ``[N, n, H, W, C]`` in [0, 1] (channels last); labels int32 ``[N, n]``.
The MNIST and CIFAR-10 recipes return ``FederatedViews`` by default (``views=True``): the
source images once, as uint8, plus per-client indices and a cluster transform applied on
read (``fedclust_jax.data.views``); ``views=False`` gives the same arrays materialised as
``FederatedData``. Randomness: one numpy Generator seeded from the JAX ``key`` (same key ->
same data, in both forms).

Two constructions recur:
- whole-set (IFCA): each of k clusters takes the whole train set, shuffled independently,
  transformed, and cut into m/k clients of n images; client i is in cluster floor(i/(m/k)).
  The paper's test machines (m_test = k * 10000 / n, built the same way from the test set)
  become per-client test splits: cluster c's test set is shuffled and cut into
  10000 // n_test machines, and the j-th client of cluster c carries machine
  j mod (10000 // n_test). When m/k is a multiple of that number every machine is carried
  by the same number of clients, so the client average equals the paper's machine average.
- disjoint shards (SR-FCA): the train and test sets are shuffled once and cut into m
  disjoint shards of n train / n_test test images; client i is in cluster i mod K and its
  cluster's transform is applied to both its splits.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.data.defaults import paper_defaults
from fedclust_jax.data import partition, transforms
from fedclust_jax.data.federated import FederatedData, from_client_lists
from fedclust_jax.data.leaf import load_leaf_clients
from fedclust_jax.data.sources import (FILES_DOC, IDX_NAMES, find_idx, load_digits_images,
                                       load_images, read_idx, resolve_data_dir)
from fedclust_jax.data.transforms import ClusterTransform
from fedclust_jax.data.views import FederatedViews, make_views
from fedclust_jax.bounds import Count, OpenFraction, Positive, Size

Transform = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def numpy_rng(key) -> np.random.Generator:
    """A numpy Generator seeded from a JAX key (typed or raw uint32)."""
    key = jnp.asarray(key)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).reshape(-1).tolist())


# ---------------------------------------------------------------- transforms per cluster

def rotation(k: int) -> ClusterTransform:
    return ClusterTransform(rot=k)


def inversion(max_value: float = 1.0) -> ClusterTransform:
    return ClusterTransform(invert=float(max_value))


def label_shift(shift: int, num_classes: int = 10) -> ClusterTransform:
    return ClusterTransform(label_shift=shift, num_classes=num_classes)


def rotations(num_clusters: int) -> list[ClusterTransform]:
    """k = 4: 0/90/180/270 degrees; k = 2: 0/180; otherwise k * 90 (k <= 4)."""
    if num_clusters == 2:
        return [rotation(0), rotation(2)]
    if not 1 <= num_clusters <= 4:
        raise ValueError(f"rotation recipes have 1..4 clusters, got {num_clusters}")
    return [rotation(c) for c in range(num_clusters)]


def _apply(t: Transform, x, y):
    shape = x.shape
    xf, yf = t(x.reshape(-1, *shape[2:]), y.reshape(-1))
    return xf.reshape(shape), yf.reshape(y.shape)


def _stack(x, y, xt, yt, cluster, num_classes) -> FederatedData:
    n_clients = x.shape[0]
    return FederatedData(
        x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.int32),
        count=jnp.full(n_clients, x.shape[1], jnp.int32),
        x_test=jnp.asarray(xt, jnp.float32), y_test=jnp.asarray(yt, jnp.int32),
        count_test=jnp.full(n_clients, xt.shape[1], jnp.int32),
        cluster=jnp.asarray(cluster, jnp.int32), task="classification",
        num_classes=num_classes)


def _check(cond, msg):
    if not cond:
        raise ValueError(msg)


@dataclasses.dataclass
class Layout:
    """Which examples each client holds: index int[N, n] into the train set, index_test
    int[N, n_test] into the test set, cluster int[N], and transform int[N] (a row of
    ``transforms``, the cluster transforms)."""

    index: np.ndarray
    index_test: np.ndarray
    cluster: np.ndarray
    transform: np.ndarray
    transforms: Sequence[Transform]


def realise(layout: Layout, x, y, x_test, y_test, *, views: bool, values=None,
            num_classes: int = 10) -> FederatedData | FederatedViews:
    """A ``Layout`` over (x, y, x_test, y_test) as data.

    views=False: ``FederatedData`` with every client's examples gathered and transformed
    (numpy, float32). views=True: ``FederatedViews`` over one pool (train then test
    examples, stored as given: uint8 with ``values`` float32[256] byte -> value, or float).
    """
    if views:
        return make_views(np.concatenate([x, x_test]), np.concatenate([y, y_test]),
                          layout.index, layout.index_test + len(x), layout.cluster,
                          layout.transform, layout.transforms, values=values,
                          num_classes=num_classes)
    read = (lambda a, i: a[i]) if values is None else \
        (lambda a, i: np.asarray(values, np.float32)[a[i]])
    xs, ys = read(x, layout.index), y[layout.index]
    xts, yts = read(x_test, layout.index_test), y_test[layout.index_test]
    for c, t in enumerate(layout.transforms):
        sel = layout.transform == c
        if sel.any():
            xs[sel], ys[sel] = _apply(t, xs[sel], ys[sel])
            xts[sel], yts[sel] = _apply(t, xts[sel], yts[sel])
    return _stack(xs, ys, xts, yts, layout.cluster, num_classes)


# ---------------------------------------------------------------- constructions

def whole_set_layout(num_train: int, num_test: int, rng, *, num_clusters: int,
                     num_clients: int, n: int, n_test: int | None = None,
                     replace: bool = False) -> Layout:
    """IFCA construction (see module doc) as indices; transforms are cluster ids.

    replace=True: client i of cluster c instead draws its n train and n_test test examples
    uniformly with replacement from the whole train / test set (any number of clients).
    """
    k = num_clusters
    n_test = n if n_test is None else n_test
    _check(num_clients % k == 0, f"num_clients ({num_clients}) must be a multiple of the "
           f"{k} clusters")
    _check(n > 0 and n_test > 0, f"n ({n}) and n_test ({n_test}) must be positive")
    per = num_clients // k
    idx, tidx = [], []
    if replace:
        for _ in range(k):
            idx.append(rng.integers(0, num_train, (per, n), dtype=np.int32))
            tidx.append(rng.integers(0, num_test, (per, n_test), dtype=np.int32))
    else:
        _check(per * n <= num_train, f"{per} clients x {n} images per cluster exceed the "
               f"{num_train} train images (replace=True draws with replacement)")
        machines = num_test // n_test
        _check(machines >= 1, f"n_test={n_test} exceeds the {num_test} test images")
        for _ in range(k):
            idx.append(rng.permutation(num_train)[: per * n].reshape(per, n))
            t = rng.permutation(num_test)[: machines * n_test].reshape(machines, n_test)
            tidx.append(t[np.arange(per) % machines])
    cluster = np.repeat(np.arange(k), per)
    return Layout(np.concatenate(idx), np.concatenate(tidx), cluster, cluster, [])


def whole_set_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                       num_clients: int, n: int, n_test: int | None = None,
                       num_classes: int = 10, views: bool = False, values=None,
                       replace: bool = False) -> FederatedData | FederatedViews:
    """IFCA construction (see module doc). x [n_train, ...], x_test [n_test_total, ...].

    Returns m clients with n train / n_test test images each (n_test defaults to n);
    ``views``, ``values``: see ``realise``; ``replace``: see ``whole_set_layout``.
    """
    layout = whole_set_layout(len(x), len(x_test), rng, num_clusters=len(cluster_transforms),
                              num_clients=num_clients, n=n, n_test=n_test, replace=replace)
    layout.transforms = list(cluster_transforms)
    return realise(layout, x, y, x_test, y_test, views=views, values=values,
                   num_classes=num_classes)


def disjoint_shard_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                            num_clients: int, n: int, n_test: int, assign: str = "mod",
                            num_classes: int = 10, views: bool = False, values=None,
                            replace: bool = False) -> FederatedData | FederatedViews:
    """SR-FCA construction (see module doc): disjoint shards, client i in cluster i mod K
    (``assign="mod"``) or in equal contiguous blocks (``assign="block"``).

    replace=True: each client instead draws n train / n_test test examples uniformly with
    replacement from the whole train / test set (not disjoint; any number of clients).
    ``views``, ``values``: see ``realise``."""
    k = len(cluster_transforms)
    _check(n > 0 and n_test > 0, f"n ({n}) and n_test ({n_test}) must be positive")
    if not replace:
        _check(num_clients * n <= len(x), f"{num_clients} disjoint shards of {n} exceed the "
               f"{len(x)} train images (replace=True draws with replacement)")
        _check(num_clients * n_test <= len(x_test), f"{num_clients} disjoint shards of "
               f"{n_test} exceed the {len(x_test)} test images")
    if assign == "mod":
        cluster = np.arange(num_clients) % k
    elif assign == "block":
        _check(num_clients % k == 0, f"num_clients ({num_clients}) must be a multiple of {k}")
        cluster = np.arange(num_clients) // (num_clients // k)
    else:
        raise ValueError(f"assign must be 'mod' or 'block', got {assign!r}")
    if replace:
        idx = rng.integers(0, len(x), (num_clients, n), dtype=np.int32)
        tidx = rng.integers(0, len(x_test), (num_clients, n_test), dtype=np.int32)
    else:
        idx = rng.permutation(len(x))[: num_clients * n].reshape(num_clients, n)
        tidx = rng.permutation(len(x_test))[: num_clients * n_test].reshape(num_clients, n_test)
    layout = Layout(idx, tidx, cluster, cluster, list(cluster_transforms))
    return realise(layout, x, y, x_test, y_test, views=views, values=values,
                   num_classes=num_classes)


def chunked_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                     cluster_classes: Sequence[Sequence[int] | None], num_chunks: int,
                     keep_chunks: int, num_classes: int = 10, views: bool = False,
                     values=None) -> FederatedData | FederatedViews:
    """SR-FCA CIFAR construction: for each cluster, the whole train set (restricted to the
    cluster's classes when given) is shuffled and cut into ``num_chunks`` equal chunks of
    which ``keep_chunks`` chosen at random become clients; the test set is cut the same way
    and a client carries the test chunk with its train chunk's index. ``views``,
    ``values``: see ``realise``."""
    _check(1 <= keep_chunks <= num_chunks, f"need 1 <= keep_chunks ({keep_chunks}) <= "
           f"num_chunks ({num_chunks})")
    idx, tidx, cluster = [], [], []
    for c, classes in enumerate(cluster_classes):
        pool = np.arange(len(x)) if classes is None else \
            np.flatnonzero(transforms.label_subset_mask(y, classes))
        tpool = np.arange(len(x_test)) if classes is None else \
            np.flatnonzero(transforms.label_subset_mask(y_test, classes))
        size, tsize = len(pool) // num_chunks, len(tpool) // num_chunks
        _check(size >= 1 and tsize >= 1, f"cluster {c}: too few images for {num_chunks} chunks")
        chunks = rng.permutation(pool)[: size * num_chunks].reshape(num_chunks, size)
        tchunks = rng.permutation(tpool)[: tsize * num_chunks].reshape(num_chunks, tsize)
        keep = np.sort(rng.choice(num_chunks, keep_chunks, replace=False))
        idx.append(chunks[keep]); tidx.append(tchunks[keep])
        cluster.append(np.full(keep_chunks, c))
    _check(len({a.shape[1] for a in idx}) == 1 and len({a.shape[1] for a in tidx}) == 1,
           "clusters' chunk sizes differ; use equal class subsets")
    cluster = np.concatenate(cluster)
    layout = Layout(np.concatenate(idx), np.concatenate(tidx), cluster, cluster,
                    list(cluster_transforms))
    return realise(layout, x, y, x_test, y_test, views=views, values=values,
                   num_classes=num_classes)


# ---------------------------------------------------------------- named recipes

def _images(name, data_dir, source, download):
    return load_images(name, data_dir, source=source, download=download)


# byte b -> b / 255 in float32, the same arithmetic as the float loaders in ``sources``
BYTE_VALUES = np.arange(256, dtype=np.uint8).astype(np.float32) / 255.0


def _as_bytes(*images):
    """(images as uint8, BYTE_VALUES) when every float image is exactly b / 255 for bytes b,
    else (images unchanged, None)."""
    out = []
    for x in images:
        b = np.rint(x * 255.0)
        if b.min() < 0 or b.max() > 255:
            return (*images, None)
        b = b.astype(np.uint8)
        if not np.array_equal(BYTE_VALUES[b], x):
            return (*images, None)
        out.append(b)
    return (*out, BYTE_VALUES)


def _source(name, data_dir, source, download, views):
    """(x, y, x_test, y_test, values) of an image dataset.

    views=False: float32 images in [0, 1] (``sources.load_images``), values None.
    views=True: the images as stored, uint8 [n, H, W, C] with ``values = BYTE_VALUES``
    (MNIST IDX files are read raw, never as a float copy; other sources are converted back
    when every pixel is a byte / 255), else float32 images and values None.
    """
    if views:
        root = resolve_data_dir(data_dir)
        files = None
        if name in IDX_NAMES and source in ("auto", "local") and not download and root:
            files = find_idx(name, root)
        if files is not None:
            a = {k: read_idx(f) for k, f in files.items()}
            xs, xts = a["train_images"], a["test_images"]
            if all(im.dtype == np.uint8 and im.ndim == 3 and len(im) == len(lab) for im, lab in
                   ((xs, a["train_labels"]), (xts, a["test_labels"]))):
                return (xs[..., None], a["train_labels"].astype(np.int32), xts[..., None],
                        a["test_labels"].astype(np.int32), BYTE_VALUES)
    x, y, xt, yt = _images(name, data_dir, source, download)
    if not views:
        return x, y, xt, yt, None
    x, xt, values = _as_bytes(x, xt)
    return x, y, xt, yt, values


_VIEWS_DOC = """
    views: True (default) keeps the images once, as stored (uint8), with per-client indices
    and a transform id applied on read (``FederatedViews``); False materialises float32
    ``FederatedData``. Both hold the same arrays for the same key."""


@paper_defaults(
    model="mlp",
    model_args={"hidden": [200]},
    rounds=300,
    training={"lr": 0.1, "steps": 10},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 4, "option": "model"},
        "oracle": {},
    },
    source=("IFCA paper Sec. 3.2: MLP 784-200-10, full participation, tau=10 full-batch steps, "
        "gamma=0.1, option II; 300 rounds (authors' code)"))
def ifca_rotated_mnist(key, *, num_clusters: Size = 4, num_clients: Size = 2400, n: Size = 100,
                       n_test: Size | None = None, views: bool = True, replace: bool = False,
                       data_dir=None, source: str = "auto", download: bool = False):
    """IFCA rotated MNIST: k = 4 (0/90/180/270) or 2 (0/180) clusters, m clients of n images,
    each cluster taking the whole 60k train set (whole-set construction). Paper grid:
    (m, n) in {(4800, 50), (2400, 100), (1200, 200)}. Pixels in [0, 1], no normalisation.
    replace: True draws each client's n train / n_test test images with replacement from
    the whole train / test set, so m is unbounded (views: 4 (n + n_test) + 16 bytes per
    client besides the 55 MB of images).

    num_clusters: number of true clusters k
    num_clients: number of clients m
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)"""
    x, y, xt, yt, values = _source("mnist", data_dir, source, download, views)
    return whole_set_clusters(x, y, xt, yt, numpy_rng(key),
                              cluster_transforms=rotations(num_clusters),
                              num_clients=num_clients, n=n, n_test=n_test, views=views,
                              values=values, replace=replace)


def _srfca_mnist_defaults(num_clusters: int, one_shot_steps: int, rounds_per_refine: int):
    """The SR-FCA paper's MNIST settings (its code's values), which differ between its
    rotated and inverted sets only in K and the ONE_SHOT / REFINE lengths."""
    return paper_defaults(
        model="mlp",
        model_args={"hidden": [200]},
        rounds=50,
        training={"optimizer": "adam", "lr": 0.0002, "steps": 5, "batch_size": 50},
        algorithms={
            "fedavg": {},
            "local": {},
            "ifca": {"num_clusters": num_clusters, "option": "model"},
            "oracle": {},
            "srfca": {"beta": 0.15, "one_shot_steps": one_shot_steps,
                      "rounds_per_refine": rounds_per_refine, "rounds": 2},
        },
        source=(f"SR-FCA paper and code: MLP 784-200-10, Adam 2e-4, batch 50, 50 rounds x 5 "
                f"local steps, IFCA K={num_clusters}, SR-FCA beta 0.15, ONE_SHOT "
                f"{one_shot_steps} steps, 2 REFINE steps of {rounds_per_refine} rounds "
                "(lambda: tune it)"))


@_srfca_mnist_defaults(num_clusters=4, one_shot_steps=250, rounds_per_refine=42)
def srfca_rotated_mnist(key, *, num_clusters: Size = 4, num_clients: Size = 100, n: Size = 600,
                        n_test: Size = 100, views: bool = True, replace: bool = False,
                        data_dir=None, source: str = "auto", download: bool = False):
    """SR-FCA rotated MNIST: m = 100 disjoint shards of 600 train / 100 test images, client i
    in cluster i mod K rotated by (i mod K) * 90 degrees (K = 4). Pixels in [0, 1].
    replace: True draws each client's images with replacement (shards no longer disjoint;
    m unbounded).

    num_clusters: number of true clusters k
    num_clients: number of clients m
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)"""
    x, y, xt, yt, values = _source("mnist", data_dir, source, download, views)
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key),
                                   cluster_transforms=[rotation(c) for c in range(num_clusters)],
                                   num_clients=num_clients, n=n, n_test=n_test, views=views,
                                   values=values, replace=replace)


@_srfca_mnist_defaults(num_clusters=2, one_shot_steps=280, rounds_per_refine=56)
def srfca_inverted_mnist(key, *, num_clients: Size = 100, n: Size = 600, n_test: Size = 100,
                         pixel_range: str = "unit", views: bool = True, replace: bool = False,
                         data_dir=None, source: str = "auto", download: bool = False):
    """SR-FCA inverted MNIST: disjoint shards as ``srfca_rotated_mnist``, K = 2; odd clients'
    images inverted. pixel_range "unit": x in [0, 1], inversion 1 - x (default);
    "byte": raw 0..255 floats and 255 - x, as the authors' code does. replace: True draws
    each client's images with replacement (shards no longer disjoint; m unbounded).

    num_clients: number of clients m
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)
    pixel_range: unit ([0, 1], 1 - x) or byte (0..255, 255 - x)"""
    if pixel_range not in ("unit", "byte"):
        raise ValueError(f"pixel_range must be 'unit' or 'byte', got {pixel_range!r}")
    x, y, xt, yt, values = _source("mnist", data_dir, source, download, views)
    top = 1.0
    if pixel_range == "byte":
        top = 255.0
        if values is not None:
            values = values * 255.0
        else:
            x, xt = x * 255.0, xt * 255.0
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key),
                                   cluster_transforms=[rotation(0), inversion(top)],
                                   num_clients=num_clients, n=n, n_test=n_test, views=views,
                                   values=values, replace=replace)


@paper_defaults(
    model="mlp",
    model_args={"hidden": [200]},
    rounds=100,
    training={"lr": 0.1, "steps": 1},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 4, "option": "model"},
        "fc": {"num_groups": 16},
        "oracle": {},
    },
    source=("'Provably personalized' paper Table 1: K=4 x 75 clients, FC with 16 subgroups and "
        "the 20th-percentile radius, one gradient step per round; the model (IFCA's MLP), lr, "
        "rounds and batch size are unstated (choices here)"))
def personalized_mnist(key, *, num_clusters: Size = 4, clients_per_cluster: Size = 75,
                       task: str = "rotation", n: Size | None = None, n_test: Size | None = None,
                       views: bool = True, data_dir=None, source: str = "auto",
                       download: bool = False):
    """"Provably personalized" MNIST (Table 1): K = 4 clusters x 75 clients of disjoint
    shards, cluster k's clients in a contiguous block. task "rotation": images rotated by
    k * 90 degrees; "label": private labels y -> (y + k) mod 10. n / n_test default to an
    equal share of the 60k / 10k images (200 / 33 at N = 300; unstated in the paper).

    num_clusters: number of true clusters k
    clients_per_cluster: clients in each cluster
    task: "rotation" (cluster k's images rotated by k * 90 degrees) or "label" (private
    labels y -> (y + k) mod 10)
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)
    """
    if task not in ("rotation", "label"):
        raise ValueError(f"task must be 'rotation' or 'label', got {task!r}")
    x, y, xt, yt, values = _source("mnist", data_dir, source, download, views)
    m = num_clusters * clients_per_cluster
    n = len(x) // m if n is None else n
    n_test = len(xt) // m if n_test is None else n_test
    ts = ([rotation(c) for c in range(num_clusters)] if task == "rotation"
          else [label_shift(c, 10) for c in range(num_clusters)])
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key), cluster_transforms=ts,
                                   num_clients=m, n=n, n_test=n_test, assign="block",
                                   views=views, values=values)


@paper_defaults(
    model="resnet9",
    rounds=2400,
    training={"lr": 0.5, "momentum": 0.9, "weight_decay": 0.0005, "steps": 1, "batch_size": 100},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
    source=("SR-FCA paper and code: ResNet9, SGD lr 0.5, momentum 0.9, wd 5e-4, batch 100, 2400 "
        "one-step rounds (the code's one-cycle schedule, label smoothing and augmentation are "
        "not applied)"))
def srfca_rotated_cifar10(key, *, num_chunks: Size = 16, keep_chunks: Size = 8,
                          views: bool = True, data_dir=None, source: str = "auto",
                          download: bool = False):
    """SR-FCA rotated CIFAR-10: 2 clusters (0 / 180 degrees); each cluster's full 50k train
    set cut into 16 chunks of 3125, 8 kept at random -> 16 clients (chunked construction).

    The paper's m = 32 with 50% participation is, in the authors' code, this fixed random
    half of the clients: keep_chunks = num_chunks gives all 32 clients, and per-round
    participation is then a training setting.

    num_chunks: chunks each cluster's set is cut into
    keep_chunks: chunks kept per cluster (clients per cluster)"""
    x, y, xt, yt, values = _source("cifar10", data_dir, source, download, views)
    return chunked_clusters(x, y, xt, yt, numpy_rng(key),
                            cluster_transforms=[rotation(0), rotation(2)],
                            cluster_classes=[None, None], num_chunks=num_chunks,
                            keep_chunks=keep_chunks, views=views, values=values)


@paper_defaults(
    model="resnet9",
    rounds=2400,
    training={"lr": 0.5, "momentum": 0.9, "weight_decay": 0.0005, "steps": 1, "batch_size": 100},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
    source="as srfca-rotated-cifar10 (SR-FCA paper and code)")
def srfca_label_cifar10(key, *, num_chunks: Size = 8, keep_chunks: Size = 8, views: bool = True,
                        data_dir=None, source: str = "auto", download: bool = False):
    """SR-FCA label CIFAR-10: cluster 0 holds classes 0-6, cluster 1 classes 3-9 (4 shared),
    labels unchanged. Each cluster's 35k images cut into 8 chunks of 4375 (the paper's n),
    all kept -> 16 clients, the same fixed "50% of m = 32" as ``srfca_rotated_cifar10``.
    The authors' code's 16-chunks-keep-8 construction is num_chunks=16, keep_chunks=8
    (n = 2,187, which does not match the paper's n). (That code filters {0-5} / {4-9} and
    overwrites data between clusters, a bug not reproduced.)

    num_chunks: chunks each cluster's set is cut into
    keep_chunks: chunks kept per cluster (clients per cluster)"""
    x, y, xt, yt, values = _source("cifar10", data_dir, source, download, views)
    return chunked_clusters(x, y, xt, yt, numpy_rng(key),
                            cluster_transforms=[ClusterTransform(), ClusterTransform()],
                            cluster_classes=[range(0, 7), range(3, 10)],
                            num_chunks=num_chunks, keep_chunks=keep_chunks, views=views,
                            values=values)


@paper_defaults(
    model="cifar-cnn",
    rounds=600,
    training={"lr": 0.25, "lr_decay": 0.99, "steps": 50, "batch_size": 50, "participation": 0.1},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
    source=("IFCA paper Sec. 3.3: 10% participation, lr x0.99 per round, batch 50; the authors' "
        "code: lr0=0.25, 5 local epochs (50 steps), 600 rounds. Augmentation is not applied"))
def ifca_rotated_cifar10(key, *, num_clients: Size = 200, n: Size = 500,
                         n_test: Size | None = None, views: bool = True, replace: bool = False,
                         data_dir=None, source: str = "auto", download: bool = False):
    """IFCA rotated CIFAR-10: k = 2 (0 / 180 degrees), m = 200 clients of n = 500 images,
    whole-set construction (m_test = 40 machines of 500 -> 20 per cluster). Augmentation
    (crop, flip) and the 10% participation are training settings, not data. replace: True
    draws each client's images with replacement from the whole set (m unbounded).

    num_clients: number of clients m
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)"""
    x, y, xt, yt, values = _source("cifar10", data_dir, source, download, views)
    return whole_set_clusters(x, y, xt, yt, numpy_rng(key), cluster_transforms=rotations(2),
                              num_clients=num_clients, n=n, n_test=n_test, views=views,
                              values=values, replace=replace)


@paper_defaults(
    model="mlp",
    model_args={"hidden": [200]},
    rounds=50,
    training={"lr": 0.1, "steps": 10},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 4, "option": "model", "restarts": 3},
        "oracle": {},
    },
    source=("IFCA rotated-MNIST settings (MLP hidden 200, tau=10 full-batch steps, gamma=0.1, "
        "option II) on sklearn's 8x8 digits; 50 rounds"))
def rotated_digits(key, *, num_clusters: Size = 4, num_clients: Size = 40, n: Size = 100,
                   n_test: Size = 40, test_fraction: OpenFraction = 0.25, views: bool = False,
                   replace: bool = False):
    """Rotated 8x8 digits (scikit-learn's bundled 1,797 images, no download): the IFCA
    whole-set rotation recipe on a random (1 - test_fraction) / test_fraction split.
    Images [N, n, 8, 8, 1] in [0, 1]; runs in seconds. views: True keeps the raw 0..16
    pixel values once as uint8 (``FederatedViews``, value table b / 16); replace: True
    draws each client's images with replacement from the whole set (m unbounded).

    num_clusters: number of true clusters k
    num_clients: number of clients m
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)
    test_fraction: share held out for testing"""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    x, y = load_digits_images(scale=not views)
    values = None
    if views:
        x, values = x.astype(np.uint8), np.arange(256).astype(np.float32) / 16.0
    rng = numpy_rng(key)
    perm = rng.permutation(len(x))
    n_te = int(round(test_fraction * len(x)))
    te, tr = perm[:n_te], perm[n_te:]
    return whole_set_clusters(x[tr], y[tr], x[te], y[te], rng,
                              cluster_transforms=rotations(num_clusters),
                              num_clients=num_clients, n=n, n_test=n_test, views=views,
                              values=values, replace=replace)


# ---------------------------------------------------------------- natural clients (LEAF)

def _natural(name, key, num_clients, lists, num_classes, dtype):
    users, xs, ys, xts, yts = lists
    if num_clients is not None:
        if not 1 <= num_clients <= len(users):
            raise ValueError(f"num_clients must be in 1..{len(users)} for this {name} copy, "
                             f"got {num_clients}")
        pick = np.sort(numpy_rng(key).choice(len(users), num_clients, replace=False))
        xs, ys, xts, yts = ([a[i] for i in pick] for a in (xs, ys, xts, yts))
    return from_client_lists(xs, ys, xts, yts, None, task="classification",
                             num_classes=num_classes, dtype=dtype)


@paper_defaults(
    model="femnist-cnn",
    data={"num_clients": 50},
    rounds=200,
    training={"lr": 0.04, "steps": 5, "batch_size": 100},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 4, "option": "model"},
        "srfca": {"beta": 0.2092, "one_shot_steps": 1000, "rounds_per_refine": 200, "rounds": 2},
    },
    source=("SR-FCA paper and code: 50 writers, CNN, SGD lr 0.04, batch 100, 200 rounds x 5 local "
        "steps, IFCA K=4, SR-FCA beta 0.2092, ONE_SHOT 1000 steps, 2 REFINE steps (lambda: "
        "tune it, --set srfca.lam=...)"))
def femnist(key, *, num_clients: Size | None = None, data_dir=None) -> FederatedData:
    """FEMNIST from LEAF JSON: one client per writer, LEAF's per-user train/test split,
    62 classes, x [N, n_max, 28, 28, 1] (1.0 = white background, as LEAF stores it),
    cluster -1 (latent). num_clients: a random subset of writers (SR-FCA uses 50), None = all."""
    return _natural("femnist", key, num_clients, load_leaf_clients("femnist", data_dir), 62,
                    np.float32)


@paper_defaults(
    model="shakespeare-lstm",
    data={"num_clients": 50},
    rounds=6,
    training={"lr": 0.8, "steps": 400, "batch_size": 10},
    algorithms={
        "fedavg": {},
        "local": {},
        "ifca": {"num_clusters": 3, "option": "model"},
        "srfca": {"beta": 0.15, "lam_quantile": 0.25, "one_shot_steps": 2400, "rounds_per_refine": 6, "rounds": 2},
    },
    source=("SR-FCA paper and code: 50 speakers, 2-layer LSTM(256), SGD lr 0.8, batch 10, 6 "
        "rounds x 400 local steps, IFCA K=3, SR-FCA beta 0.15, lambda the 25th percentile of "
        "ONE_SHOT distances, ONE_SHOT 2400 steps, 2 REFINE steps"))
def shakespeare(key, *, num_clients: Size | None = None, data_dir=None,
                subdir: str | None = None, train_fraction: OpenFraction = 0.9,
                gap: Count = 79) -> FederatedData:
    """Shakespeare from LEAF JSON: one client per speaker, next-character prediction over
    LEAF's 80 symbols; x int32 tokens [N, n_max, 80], y [N, n_max]. With LEAF's train/ and
    test/ folders their split is used; a folder without a split (``subdir="derived"``) is
    split per speaker in time order: the first ``train_fraction`` of the windows for
    training, then ``gap`` windows skipped, the rest for testing.

    num_clients: number of clients m
    subdir: LEAF folder inside the data folder
    train_fraction: share of each speaker's windows used for training
    gap: windows skipped between train and test"""
    lists = load_leaf_clients("shakespeare", data_dir, subdir=subdir,
                              train_fraction=train_fraction, gap=gap)
    return _natural("shakespeare", key, num_clients, lists, 80, np.int32)


# ---------------------------------------------------------------- generic partitions

def _base(dataset, data_dir, source, download):
    if dataset == "digits":
        x, y = load_digits_images()
        return x, y, None, None
    return _images(dataset, data_dir, source, download)


def _split_base(rng, x, y, xt, yt, test_fraction=0.25):
    if xt is not None:
        return x, y, xt, yt
    perm = rng.permutation(len(x))
    n_te = int(round(test_fraction * len(x)))
    return x[perm[n_te:]], y[perm[n_te:]], x[perm[:n_te]], y[perm[:n_te]]


@paper_defaults(
    model="mlp",
    model_args={"hidden": [200]},
    rounds=50,
    training={"lr": 0.1, "steps": 10},
    algorithms={"fedavg": {}, "local": {}},
    source="generic partition (no paper): MLP hidden 200, 10 full-batch steps, lr 0.1")
def iid_partition(key, *, dataset: str = "digits", num_clients: Size = 10, data_dir=None,
                  source: str = "auto", download: bool = False) -> FederatedData:
    """IID shards of a standard dataset (digits, mnist, fashion_mnist, cifar10, emnist):
    train and test sets shuffled and cut into equal disjoint shards; cluster -1.

    dataset: source set: digits, mnist, fashion_mnist, cifar10 or emnist
    num_clients: number of clients m"""
    rng = numpy_rng(key)
    x, y, xt, yt = _split_base(rng, *_base(dataset, data_dir, source, download))
    parts = partition.iid_shards(len(x), num_clients, rng)
    tparts = partition.iid_shards(len(xt), num_clients, rng)
    return from_client_lists([x[p] for p in parts], [y[p] for p in parts],
                             [xt[p] for p in tparts], [yt[p] for p in tparts], None,
                             task="classification", num_classes=int(y.max()) + 1)


@paper_defaults(
    model="mlp",
    model_args={"hidden": [200]},
    rounds=50,
    training={"lr": 0.1, "steps": 10},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
    source="generic partition (no paper): MLP hidden 200, 10 full-batch steps, lr 0.1")
def dirichlet_partition(key, *, dataset: str = "digits", num_clients: Size = 10,
                        alpha: Positive = 0.5, data_dir=None, source: str = "auto",
                        download: bool = False) -> FederatedData:
    """Dirichlet label skew (concentration ``alpha``) of a standard dataset; each client's
    test split follows its train label mix (same proportions). Ragged, padded; cluster -1.

    dataset: source set: digits, mnist, fashion_mnist, cifar10 or emnist
    num_clients: number of clients m
    alpha: Dirichlet concentration (smaller: more label skew)"""
    rng = numpy_rng(key)
    x, y, xt, yt = _split_base(rng, *_base(dataset, data_dir, source, download))
    k = int(y.max()) + 1
    parts, props = partition.dirichlet_label_skew(y, num_clients, alpha, rng, k)
    tparts, _ = partition.dirichlet_label_skew(yt, num_clients, alpha, rng, k, props)
    return from_client_lists([x[p] for p in parts], [y[p] for p in parts],
                             [xt[p] for p in tparts], [yt[p] for p in tparts], None,
                             task="classification", num_classes=k)


for _recipe in (ifca_rotated_mnist, srfca_rotated_mnist, srfca_inverted_mnist, personalized_mnist,
                srfca_rotated_cifar10, srfca_label_cifar10, ifca_rotated_cifar10):
    _recipe.__doc__ += _VIEWS_DOC
for _recipe in (ifca_rotated_mnist, srfca_rotated_mnist, srfca_inverted_mnist, personalized_mnist,
                srfca_rotated_cifar10, srfca_label_cifar10, ifca_rotated_cifar10, femnist,
                shakespeare, iid_partition, dirichlet_partition):
    _recipe.__doc__ += FILES_DOC

RECIPES = {
    "rotated-digits": rotated_digits,
    "ifca-rotated-mnist": ifca_rotated_mnist,
    "srfca-rotated-mnist": srfca_rotated_mnist,
    "srfca-inverted-mnist": srfca_inverted_mnist,
    "personalized-mnist": personalized_mnist,
    "srfca-rotated-cifar10": srfca_rotated_cifar10,
    "srfca-label-cifar10": srfca_label_cifar10,
    "ifca-rotated-cifar10": ifca_rotated_cifar10,
    "femnist": femnist,
    "shakespeare": shakespeare,
    "iid-partition": iid_partition,
    "dirichlet-partition": dirichlet_partition,
}
