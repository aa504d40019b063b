"""The papers' cluster recipes on real data, as named datasets ``builder(key, **params)``.

Images are float32 ``[N, n, H, W, C]`` in [0, 1] (channels last); labels int32 ``[N, n]``.
Randomness: one numpy Generator seeded from the JAX ``key`` (same key -> same data).

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

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.data import partition, transforms
from fedclust_jax.data.federated import FederatedData, from_client_lists
from fedclust_jax.data.leaf import load_leaf_clients
from fedclust_jax.data.sources import load_digits_images, load_images

Transform = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def numpy_rng(key) -> np.random.Generator:
    """A numpy Generator seeded from a JAX key (typed or raw uint32)."""
    key = jnp.asarray(key)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).reshape(-1).tolist())


# ---------------------------------------------------------------- transforms per cluster

def rotation(k: int) -> Transform:
    return lambda x, y: (transforms.rotate90(x, k), y)


def inversion(max_value: float = 1.0) -> Transform:
    return lambda x, y: (transforms.invert(x, max_value), y)


def label_shift(shift: int, num_classes: int = 10) -> Transform:
    return lambda x, y: (x, transforms.shift_labels(y, shift, num_classes))


def rotations(num_clusters: int) -> list[Transform]:
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


# ---------------------------------------------------------------- constructions

def whole_set_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                       num_clients: int, n: int, n_test: int | None = None,
                       num_classes: int = 10) -> FederatedData:
    """IFCA construction (see module doc). x [n_train, ...], x_test [n_test_total, ...].

    Returns m clients with n train / n_test test images each (n_test defaults to n).
    """
    k = len(cluster_transforms)
    n_test = n if n_test is None else n_test
    _check(num_clients % k == 0, f"num_clients ({num_clients}) must be a multiple of the "
           f"{k} clusters")
    per = num_clients // k
    _check(0 < n and per * n <= len(x), f"{per} clients x {n} images per cluster exceed the "
           f"{len(x)} train images")
    machines = len(x_test) // n_test if n_test > 0 else 0
    _check(machines >= 1, f"n_test={n_test} exceeds the {len(x_test)} test images")
    xs, ys, xts, yts = [], [], [], []
    for t in cluster_transforms:
        idx = rng.permutation(len(x))[: per * n].reshape(per, n)
        tidx = rng.permutation(len(x_test))[: machines * n_test].reshape(machines, n_test)
        tidx = tidx[np.arange(per) % machines]
        for a, b, out_x, out_y in ((x[idx], y[idx], xs, ys),
                                   (x_test[tidx], y_test[tidx], xts, yts)):
            a, b = _apply(t, a, b)
            out_x.append(a); out_y.append(b)
    cluster = np.repeat(np.arange(k), per)
    return _stack(np.concatenate(xs), np.concatenate(ys), np.concatenate(xts),
                  np.concatenate(yts), cluster, num_classes)


def disjoint_shard_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                            num_clients: int, n: int, n_test: int, assign: str = "mod",
                            num_classes: int = 10) -> FederatedData:
    """SR-FCA construction (see module doc): disjoint shards, client i in cluster i mod K
    (``assign="mod"``) or in equal contiguous blocks (``assign="block"``)."""
    k = len(cluster_transforms)
    _check(num_clients * n <= len(x) and n > 0, f"{num_clients} disjoint shards of {n} exceed "
           f"the {len(x)} train images")
    _check(num_clients * n_test <= len(x_test) and n_test > 0, f"{num_clients} disjoint "
           f"shards of {n_test} exceed the {len(x_test)} test images")
    if assign == "mod":
        cluster = np.arange(num_clients) % k
    elif assign == "block":
        _check(num_clients % k == 0, f"num_clients ({num_clients}) must be a multiple of {k}")
        cluster = np.arange(num_clients) // (num_clients // k)
    else:
        raise ValueError(f"assign must be 'mod' or 'block', got {assign!r}")
    idx = rng.permutation(len(x))[: num_clients * n].reshape(num_clients, n)
    tidx = rng.permutation(len(x_test))[: num_clients * n_test].reshape(num_clients, n_test)
    xs, ys, xts, yts = x[idx], y[idx], x_test[tidx], y_test[tidx]
    for c, t in enumerate(cluster_transforms):
        sel = cluster == c
        xs[sel], ys[sel] = _apply(t, xs[sel], ys[sel])
        xts[sel], yts[sel] = _apply(t, xts[sel], yts[sel])
    return _stack(xs, ys, xts, yts, cluster, num_classes)


def chunked_clusters(x, y, x_test, y_test, rng, *, cluster_transforms: Sequence[Transform],
                     cluster_classes: Sequence[Sequence[int] | None], num_chunks: int,
                     keep_chunks: int, num_classes: int = 10) -> FederatedData:
    """SR-FCA CIFAR construction: for each cluster, the whole train set (restricted to the
    cluster's classes when given) is shuffled and cut into ``num_chunks`` equal chunks of
    which ``keep_chunks`` chosen at random become clients; the test set is cut the same way
    and a client carries the test chunk with its train chunk's index."""
    _check(1 <= keep_chunks <= num_chunks, f"need 1 <= keep_chunks ({keep_chunks}) <= "
           f"num_chunks ({num_chunks})")
    xs, ys, xts, yts, cluster = [], [], [], [], []
    for c, (t, classes) in enumerate(zip(cluster_transforms, cluster_classes)):
        pool = np.arange(len(x)) if classes is None else \
            np.flatnonzero(transforms.label_subset_mask(y, classes))
        tpool = np.arange(len(x_test)) if classes is None else \
            np.flatnonzero(transforms.label_subset_mask(y_test, classes))
        size, tsize = len(pool) // num_chunks, len(tpool) // num_chunks
        _check(size >= 1 and tsize >= 1, f"cluster {c}: too few images for {num_chunks} chunks")
        chunks = rng.permutation(pool)[: size * num_chunks].reshape(num_chunks, size)
        tchunks = rng.permutation(tpool)[: tsize * num_chunks].reshape(num_chunks, tsize)
        keep = np.sort(rng.choice(num_chunks, keep_chunks, replace=False))
        for idx, out_x, out_y, xx, yy in ((chunks[keep], xs, ys, x, y),
                                          (tchunks[keep], xts, yts, x_test, y_test)):
            a, b = _apply(t, xx[idx], yy[idx])
            out_x.append(a); out_y.append(b)
        cluster.append(np.full(keep_chunks, c))
    _check(len({a.shape[1] for a in xs}) == 1, "clusters' chunk sizes differ; use equal class "
           "subsets")
    return _stack(np.concatenate(xs), np.concatenate(ys), np.concatenate(xts),
                  np.concatenate(yts), np.concatenate(cluster), num_classes)


# ---------------------------------------------------------------- named recipes

def _images(name, data_dir, source, download):
    return load_images(name, data_dir, source=source, download=download)


def ifca_rotated_mnist(key, *, num_clusters: int = 4, num_clients: int = 2400, n: int = 100,
                       n_test: int | None = None, data_dir=None, source: str = "auto",
                       download: bool = False) -> FederatedData:
    """IFCA rotated MNIST: k = 4 (0/90/180/270) or 2 (0/180) clusters, m clients of n images,
    each cluster taking the whole 60k train set (whole-set construction). Paper grid:
    (m, n) in {(4800, 50), (2400, 100), (1200, 200)}. Pixels in [0, 1], no normalisation."""
    x, y, xt, yt = _images("mnist", data_dir, source, download)
    return whole_set_clusters(x, y, xt, yt, numpy_rng(key),
                              cluster_transforms=rotations(num_clusters),
                              num_clients=num_clients, n=n, n_test=n_test)


def srfca_rotated_mnist(key, *, num_clusters: int = 4, num_clients: int = 100, n: int = 600,
                        n_test: int = 100, data_dir=None, source: str = "auto",
                        download: bool = False) -> FederatedData:
    """SR-FCA rotated MNIST: m = 100 disjoint shards of 600 train / 100 test images, client i
    in cluster i mod K rotated by (i mod K) * 90 degrees (K = 4). Pixels in [0, 1]."""
    x, y, xt, yt = _images("mnist", data_dir, source, download)
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key),
                                   cluster_transforms=[rotation(c) for c in range(num_clusters)],
                                   num_clients=num_clients, n=n, n_test=n_test)


def srfca_inverted_mnist(key, *, num_clients: int = 100, n: int = 600, n_test: int = 100,
                         pixel_range: str = "unit", data_dir=None, source: str = "auto",
                         download: bool = False) -> FederatedData:
    """SR-FCA inverted MNIST: disjoint shards as ``srfca_rotated_mnist``, K = 2; odd clients'
    images inverted. pixel_range "unit": x in [0, 1], inversion 1 - x (default);
    "byte": raw 0..255 floats and 255 - x, as the authors' code does."""
    if pixel_range not in ("unit", "byte"):
        raise ValueError(f"pixel_range must be 'unit' or 'byte', got {pixel_range!r}")
    x, y, xt, yt = _images("mnist", data_dir, source, download)
    top = 1.0
    if pixel_range == "byte":
        x, xt, top = x * 255.0, xt * 255.0, 255.0
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key),
                                   cluster_transforms=[rotation(0), inversion(top)],
                                   num_clients=num_clients, n=n, n_test=n_test)


def personalized_mnist(key, *, num_clusters: int = 4, clients_per_cluster: int = 75,
                       task: str = "rotation", n: int | None = None, n_test: int | None = None,
                       data_dir=None, source: str = "auto",
                       download: bool = False) -> FederatedData:
    """"Provably personalized" MNIST (Table 1): K = 4 clusters x 75 clients of disjoint
    shards, cluster k's clients in a contiguous block. task "rotation": images rotated by
    k * 90 degrees; "label": private labels y -> (y + k) mod 10. n / n_test default to an
    equal share of the 60k / 10k images (200 / 33 at N = 300; unstated in the paper)."""
    if task not in ("rotation", "label"):
        raise ValueError(f"task must be 'rotation' or 'label', got {task!r}")
    x, y, xt, yt = _images("mnist", data_dir, source, download)
    m = num_clusters * clients_per_cluster
    n = len(x) // m if n is None else n
    n_test = len(xt) // m if n_test is None else n_test
    ts = ([rotation(c) for c in range(num_clusters)] if task == "rotation"
          else [label_shift(c, 10) for c in range(num_clusters)])
    return disjoint_shard_clusters(x, y, xt, yt, numpy_rng(key), cluster_transforms=ts,
                                   num_clients=m, n=n, n_test=n_test, assign="block")


def srfca_rotated_cifar10(key, *, num_chunks: int = 16, keep_chunks: int = 8, data_dir=None,
                          source: str = "auto", download: bool = False) -> FederatedData:
    """SR-FCA rotated CIFAR-10: 2 clusters (0 / 180 degrees); each cluster's full 50k train
    set cut into 16 chunks of 3125, 8 kept at random -> 16 clients (chunked construction).

    The paper's m = 32 with 50% participation is, in the authors' code, this fixed random
    half of the clients: keep_chunks = num_chunks gives all 32 clients, and per-round
    participation is then a training setting."""
    x, y, xt, yt = _images("cifar10", data_dir, source, download)
    return chunked_clusters(x, y, xt, yt, numpy_rng(key),
                            cluster_transforms=[rotation(0), rotation(2)],
                            cluster_classes=[None, None], num_chunks=num_chunks,
                            keep_chunks=keep_chunks)


def srfca_label_cifar10(key, *, num_chunks: int = 8, keep_chunks: int = 8, data_dir=None,
                        source: str = "auto", download: bool = False) -> FederatedData:
    """SR-FCA label CIFAR-10: cluster 0 holds classes 0-6, cluster 1 classes 3-9 (4 shared),
    labels unchanged. Each cluster's 35k images cut into 8 chunks of 4375 (the paper's n),
    all kept -> 16 clients, the same fixed "50% of m = 32" as ``srfca_rotated_cifar10``.
    The authors' code's 16-chunks-keep-8 construction is num_chunks=16, keep_chunks=8
    (n = 2,187, which does not match the paper's n). (That code filters {0-5} / {4-9} and
    overwrites data between clusters, a bug not reproduced.)"""
    x, y, xt, yt = _images("cifar10", data_dir, source, download)
    ident = lambda a, b: (a, b)
    return chunked_clusters(x, y, xt, yt, numpy_rng(key), cluster_transforms=[ident, ident],
                            cluster_classes=[range(0, 7), range(3, 10)],
                            num_chunks=num_chunks, keep_chunks=keep_chunks)


def ifca_rotated_cifar10(key, *, num_clients: int = 200, n: int = 500, n_test: int | None = None,
                         data_dir=None, source: str = "auto",
                         download: bool = False) -> FederatedData:
    """IFCA rotated CIFAR-10: k = 2 (0 / 180 degrees), m = 200 clients of n = 500 images,
    whole-set construction (m_test = 40 machines of 500 -> 20 per cluster). Augmentation
    (crop, flip) and the 10% participation are training settings, not data."""
    x, y, xt, yt = _images("cifar10", data_dir, source, download)
    return whole_set_clusters(x, y, xt, yt, numpy_rng(key), cluster_transforms=rotations(2),
                              num_clients=num_clients, n=n, n_test=n_test)


def rotated_digits(key, *, num_clusters: int = 4, num_clients: int = 40, n: int = 100,
                   n_test: int = 40, test_fraction: float = 0.25) -> FederatedData:
    """Rotated 8x8 digits (scikit-learn's bundled 1,797 images, no download): the IFCA
    whole-set rotation recipe on a random (1 - test_fraction) / test_fraction split.
    Images [N, n, 8, 8, 1] in [0, 1]; runs in seconds."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    x, y = load_digits_images()
    rng = numpy_rng(key)
    perm = rng.permutation(len(x))
    n_te = int(round(test_fraction * len(x)))
    te, tr = perm[:n_te], perm[n_te:]
    return whole_set_clusters(x[tr], y[tr], x[te], y[te], rng,
                              cluster_transforms=rotations(num_clusters),
                              num_clients=num_clients, n=n, n_test=n_test)


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


def femnist(key, *, num_clients: int | None = None, data_dir=None) -> FederatedData:
    """FEMNIST from LEAF JSON: one client per writer, LEAF's per-user train/test split,
    62 classes, x [N, n_max, 28, 28, 1] (1.0 = white background, as LEAF stores it),
    cluster -1 (latent). num_clients: a random subset of writers (SR-FCA uses 50), None = all."""
    return _natural("femnist", key, num_clients, load_leaf_clients("femnist", data_dir), 62,
                    np.float32)


def shakespeare(key, *, num_clients: int | None = None, data_dir=None,
                subdir: str | None = None, train_fraction: float = 0.9,
                gap: int = 79) -> FederatedData:
    """Shakespeare from LEAF JSON: one client per speaker, next-character prediction over
    LEAF's 80 symbols; x int32 tokens [N, n_max, 80], y [N, n_max]. With LEAF's train/ and
    test/ folders their split is used; a folder without a split (``subdir="derived"``) is
    split per speaker in time order: the first ``train_fraction`` of the windows for
    training, then ``gap`` windows skipped, the rest for testing."""
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


def iid_partition(key, *, dataset: str = "digits", num_clients: int = 10, data_dir=None,
                  source: str = "auto", download: bool = False) -> FederatedData:
    """IID shards of a standard dataset (digits, mnist, fashion_mnist, cifar10, emnist):
    train and test sets shuffled and cut into equal disjoint shards; cluster -1."""
    rng = numpy_rng(key)
    x, y, xt, yt = _split_base(rng, *_base(dataset, data_dir, source, download))
    parts = partition.iid_shards(len(x), num_clients, rng)
    tparts = partition.iid_shards(len(xt), num_clients, rng)
    return from_client_lists([x[p] for p in parts], [y[p] for p in parts],
                             [xt[p] for p in tparts], [yt[p] for p in tparts], None,
                             task="classification", num_classes=int(y.max()) + 1)


def dirichlet_partition(key, *, dataset: str = "digits", num_clients: int = 10,
                        alpha: float = 0.5, data_dir=None, source: str = "auto",
                        download: bool = False) -> FederatedData:
    """Dirichlet label skew (concentration ``alpha``) of a standard dataset; each client's
    test split follows its train label mix (same proportions). Ragged, padded; cluster -1."""
    rng = numpy_rng(key)
    x, y, xt, yt = _split_base(rng, *_base(dataset, data_dir, source, download))
    k = int(y.max()) + 1
    parts, props = partition.dirichlet_label_skew(y, num_clients, alpha, rng, k)
    tparts, _ = partition.dirichlet_label_skew(yt, num_clients, alpha, rng, k, props)
    return from_client_lists([x[p] for p in parts], [y[p] for p in parts],
                             [xt[p] for p in tparts], [yt[p] for p in tparts], None,
                             task="classification", num_classes=k)


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
