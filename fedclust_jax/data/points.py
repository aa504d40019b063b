"""Point-clustered data (UIFCA, [T] chapter 4): points, not clients, carry clusters.

Heterogeneity recipe ([T] section 4.1), level p in [0, 1]: a client with s points has its
first round(s p) points from its dominant cluster and the other s - round(s p) from
clusters drawn uniformly at random (the dominant one included). p = 0 is i.i.d., p = 1 one
cluster per client. Client i's dominant cluster is i mod K (unspecified in [T]; this makes
dominant clusters balanced when N is a multiple of K). Cluster sizes are therefore equal
only in expectation (m/K each when N is a multiple of K).

Generators return ``FederatedData`` with x [N, s, d], point_cluster int32[N, s] (the
truth, never read by the algorithms), y = zeros, an empty test split (count_test 0) and
cluster[i] = the dominant cluster when p = 1, else -1 (clients have no single cluster).
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.data.defaults import paper_defaults
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.synthetic import bernoulli_theta
from fedclust_jax.bounds import Count, NonNegative, Positive, Probability, Seed, Size


def check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity):
    if not isinstance(num_clusters, (int, np.integer)) or num_clusters < 1:
        raise ValueError(f"number of clusters K must be an integer >= 1, got {num_clusters!r}")
    for name, v in (("num_clients", num_clients), ("points_per_client", points_per_client)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not 0.0 <= heterogeneity <= 1.0:
        raise ValueError(f"heterogeneity level p must be in [0, 1], got {heterogeneity!r}")


def dominant_count(points_per_client: int, heterogeneity: float) -> int:
    """round(s p): the number of leading points a client draws from its dominant cluster."""
    return int(round(points_per_client * heterogeneity))


def heterogeneous_clusters(key, num_clients: int, points_per_client: int, num_clusters: int,
                           heterogeneity: float, dominant=None) -> jax.Array:
    """int32[N, s] true cluster of every point under the recipe (module docstring).

    dominant: int[N] dominant cluster per client (default i mod K).
    """
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    dom = (jnp.arange(num_clients) % num_clusters if dominant is None
           else jnp.asarray(dominant, jnp.int32))
    n_dom = dominant_count(points_per_client, heterogeneity)
    rand = jax.random.randint(key, (num_clients, points_per_client), 0, num_clusters)
    first = jnp.arange(points_per_client)[None, :] < n_dom
    return jnp.where(first, dom[:, None], rand).astype(jnp.int32)


def _point_data(x, labels, heterogeneity, num_clusters) -> FederatedData:
    n, s = labels.shape
    cluster = (jnp.arange(n, dtype=jnp.int32) % num_clusters if heterogeneity == 1.0
               else jnp.full((n,), -1, jnp.int32))
    return FederatedData(
        x=x, y=jnp.zeros((n, s), jnp.int32), count=jnp.full((n,), s, jnp.int32),
        x_test=jnp.zeros((n, 1) + x.shape[2:], x.dtype), y_test=jnp.zeros((n, 1), jnp.int32),
        count_test=jnp.zeros((n,), jnp.int32), cluster=cluster, point_cluster=labels,
        task="classification", num_classes=0)


@paper_defaults(
    model=None,
    rounds=20,
    algorithms={"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
    source=("Chung's thesis, Table 4.1 synthetic runs: T = 20 cluster rounds (the runner's "
        "rounds), tau = 100 communication rounds of M = 100 local steps (UIFCA's defaults; a "
        "GPU-scale job: lower comm_rounds / local_steps on a CPU); the model is the affine "
        "flow, the default for data whose points carry clusters"))
def gaussian_clusters(key, *, num_clients: Size = 4, points_per_client: Size = 1000,
                      num_clusters: Size = 4, dim: Size = 32, separation: Positive = 5.0,
                      noise_std: NonNegative = 1.0, heterogeneity: Probability = 1.0,
                      scaling: str = "multiply") -> FederatedData:
    """Gaussian clusters ([T] 4.3): centre_k = Bernoulli(0.5)^d "scaled by R", point =
    centre + N(0, sigma^2 I). scaling="multiply" (default): centre = R b, separation about
    R sqrt(d/2) (20 for d = 32, R = 5: no overlap, consistent with the reported 100% for
    k-FED); it also fits [T]'s "R represents minimum separation between each center":
    two distinct centres differ in at least one coordinate, so R is exactly their least
    possible distance. scaling="norm": ||centre|| = R, separation about R and sometimes
    less (overlapping at sigma = 1: k-FED 97.2 / 97.9 / 100% at p = 0 / 0.5 / 1 on seed 0,
    below [T]'s 100%).
    true_params holds the centres [K, d].

    num_clients: number of clients m
    points_per_client: points per client
    num_clusters: number of true clusters k
    dim: feature dimension d
    separation: cluster separation R
    noise_std: standard deviation sigma of the points around their centre
    heterogeneity: fraction p of a client's points from its own cluster
    scaling: how the separation R sets the centres, "norm" (||centre|| = R) or "multiply"
    (the Bernoulli centres times R)"""
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    if dim < 1 or separation <= 0 or noise_std < 0:
        raise ValueError(f"need dim >= 1, separation > 0, noise_std >= 0; got {dim}, "
                         f"{separation}, {noise_std}")
    k_c, k_lab, k_x = jax.random.split(key, 3)
    centres = bernoulli_theta(k_c, num_clusters, dim, separation, scaling)
    labels = heterogeneous_clusters(k_lab, num_clients, points_per_client, num_clusters,
                                    heterogeneity)
    x = centres[labels] + noise_std * jax.random.normal(k_x, labels.shape + (dim,))
    return _point_data(x, labels, heterogeneity, num_clusters).replace(true_params=centres)


@paper_defaults(
    model=None,
    rounds=20,
    algorithms={"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
    source="as uifca-gaussian (Chung's thesis, Table 4.1)")
def subspace_clusters(key, *, num_clients: Size = 4, points_per_client: Size = 1000,
                      num_clusters: Size = 4, dim: Size = 32, subspace_dim: Size = 16,
                      coef_std: NonNegative = 1.0, jitter: NonNegative = 0.05,
                      heterogeneity: Probability = 1.0) -> FederatedData:
    """Subspace clusters ([T] 4.3): cluster k has a random orthonormal basis U_k [d, r]
    (QR of a Gaussian matrix); point = U_k c + jitter * N(0, I_d), c ~ N(0, coef_std^2 I_r).
    The jitter makes the rank-r covariance non-singular ([T] leaves it out; its density
    would be degenerate). All clusters have mean 0, so centroid methods cannot separate
    them. true_params holds the bases [K, d, r].

    num_clients: number of clients m
    points_per_client: points per client
    num_clusters: number of true clusters k
    dim: feature dimension d
    subspace_dim: dimension of each cluster's subspace
    coef_std: std of the subspace coefficients
    jitter: noise added off the subspace
    heterogeneity: fraction p of a client's points from its own cluster"""
    check_point_setup(num_clients, points_per_client, num_clusters, heterogeneity)
    if not 1 <= subspace_dim <= dim:
        raise ValueError(f"need 1 <= subspace_dim <= dim, got {subspace_dim}, {dim}")
    if jitter < 0 or coef_std <= 0:
        raise ValueError(f"need jitter >= 0 and coef_std > 0, got {jitter}, {coef_std}")
    k_b, k_lab, k_c, k_j = jax.random.split(key, 4)
    bases = jnp.linalg.qr(jax.random.normal(k_b, (num_clusters, dim, subspace_dim)))[0]
    labels = heterogeneous_clusters(k_lab, num_clients, points_per_client, num_clusters,
                                    heterogeneity)
    coef = coef_std * jax.random.normal(k_c, labels.shape + (subspace_dim,))
    x = jnp.einsum("nsdr,nsr->nsd", bases[labels], coef)
    x = x + jitter * jax.random.normal(k_j, x.shape)
    return _point_data(x, labels, heterogeneity, num_clusters).replace(true_params=bases)


def points_from_pools(key, pools, *, num_clients: int, points_per_client: int,
                      heterogeneity: float) -> FederatedData:
    """Distributes real points by the recipe: pools is a list of K arrays [n_k, ...] (the
    points of each true cluster, e.g. one digit or one rotation); every point is used at
    most once (drawn without replacement from its cluster's pool). Host-side numpy.

    Raises if some cluster needs more points than its pool holds (lower
    points_per_client)."""
    k = len(pools)
    check_point_setup(num_clients, points_per_client, k, heterogeneity)
    k_lab, k_perm = jax.random.split(key)
    labels = np.asarray(heterogeneous_clusters(k_lab, num_clients, points_per_client, k,
                                               heterogeneity))
    rng = np.random.default_rng(np.asarray(jax.random.key_data(k_perm)).ravel())
    x = np.zeros(labels.shape + np.asarray(pools[0]).shape[1:], np.float32)
    for c in range(k):  # host-side data preparation, once
        where = labels == c
        need, pool = int(where.sum()), np.asarray(pools[c])
        if need > len(pool):
            raise ValueError(f"cluster {c} needs {need} points but its pool has {len(pool)}; "
                             "lower points_per_client")
        x[where] = pool[rng.permutation(len(pool))[:need]]
    return _point_data(jnp.asarray(x), jnp.asarray(labels), heterogeneity, k)


def true_points(data) -> np.ndarray:
    """int[N, n_max] true cluster of every point (``data.point_cluster``) with -1 on
    padding (host numpy); errors if the data carry no point clusters."""
    if data.point_cluster is None:
        raise ValueError("these data carry no point clusters (point_cluster is None); use a "
                         "point dataset such as uifca-gaussian or uifca-subspace")
    count = np.asarray(data.count)
    mask = np.arange(data.x.shape[1])[None, :] < count[:, None]
    return np.where(mask, np.asarray(data.point_cluster), -1)


# ---- MNIST point clusters ([T] 4.3: Tables 4.2 and 4.3) --------------------------------

def _byte_images(source: str, data_dir, download: bool):
    """(train images, labels) as uint8 [n, H, W]: "mnist" (``sources.load_images``) or
    "digits" (scikit-learn's 8x8 digits, 0..16 scaled to bytes; no download, for CI)."""
    from fedclust_jax.data.sources import load_digits_images, load_images
    if source == "digits":
        x, y = load_digits_images(scale=False)
        return np.rint(x[..., 0] * 255.0 / 16.0).astype(np.uint8), y
    if source != "mnist":
        raise ValueError(f"source must be 'mnist' or 'digits', got {source!r}")
    x, y, _, _ = load_images("mnist", data_dir, download=download)
    return np.rint(np.asarray(x).reshape(x.shape[:3]) * 255.0).astype(np.uint8), np.asarray(y)


def _image_pools(task: str, images, labels, digits) -> list[np.ndarray]:
    """uint8 pools of the K clusters: "rotated" (one digit, rot90 by 0..3: K = 4) or
    "digits" (one pool per listed digit)."""
    if task == "rotated":
        if len(digits) != 1:
            raise ValueError(f"the rotated task takes one digit, got digits={list(digits)}")
        return [np.rot90(images[labels == digits[0]], r, axes=(1, 2)) for r in range(4)]
    if task != "digits":
        raise ValueError(f"task must be 'rotated' or 'digits', got {task!r}")
    if len(set(digits)) != len(digits) or len(digits) < 2:
        raise ValueError(f"the digits task takes >= 2 distinct digits, got {list(digits)}")
    return [images[labels == d] for d in digits]


def _pool_points(key, pools, num_clients, points_per_client, fill, heterogeneity):
    k = len(pools)
    n = num_clients if num_clients is not None else k
    s = points_per_client if points_per_client is not None else int(fill * min(map(len, pools)))
    return points_from_pools(key, pools, num_clients=n, points_per_client=s,
                             heterogeneity=heterogeneity)


@paper_defaults(
    model="real-nvp",
    rounds=20,
    algorithms={"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
    source=("Chung's thesis, Tables 4.2 / 4.3: rotated digit 2, K = 4 rotations, n = K clients; "
        "fedclust_jax/studies/uifca/ holds each table's settings"))
def mnist_points(key, *, task: str = "rotated", digits: list = (2,),
                 heterogeneity: Probability = 1.0, num_clients: Size | None = None,
                 points_per_client: Size | None = None,
                 fill: float = 0.95, random_background: bool = False, source: str = "mnist",
                 data_dir: str | None = None, download: bool = False) -> FederatedData:
    """[T] 4.3's MNIST point clusters: "rotated" (one digit's training images at 0/90/180/
    270 degrees, K = 4) or "digits" (cluster = digit, K = len(digits); [T]'s Digits: 0-9,
    Table 4.2: 2 and 3). n = K clients (``num_clients``), each of ``points_per_client``
    points (default: ``fill`` x the smallest pool) dealt by the heterogeneity recipe,
    every image used at most once. Pixels are bytes / 256 (in [0, 255/256], for the
    flows' dequantization). random_background ([T] Table 4.2 "RB"): pixels < 0.01 replaced
    by uniform random bytes (drawn from ``key``).

    task: "rotated" (clusters are rotations of one digit) or "digits" (a cluster per digit)
    digits: the digits used (the first alone for "rotated", one cluster each for "digits")
    heterogeneity: fraction p of a client's points from its own cluster
    num_clients: number of clients n (None: K)
    points_per_client: points per client (None: ``fill`` x the smallest pool)
    fill: points per client as a fraction of the smallest cluster's pool
    source: "mnist" (MNIST's IDX files or TFDS) or "digits" (scikit-learn's 8x8 digits,
    no files: for CI)
    data_dir: folder holding MNIST (else $FEDCLUST_DATA)
    download: let TFDS download MNIST when the network allows"""
    images, labels = _byte_images(source, data_dir, download)
    pools = _image_pools(task, images, labels, [int(d) for d in digits])
    k_rb, k_deal = jax.random.split(key)
    data = _pool_points(k_deal, pools, num_clients, points_per_client, fill, heterogeneity)
    x = np.asarray(data.x)                       # bytes / 1 (pools are uint8)
    if random_background:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(k_rb)).ravel())
        bg = x < 0.01 * 255
        x = np.where(bg, rng.integers(0, 256, x.shape), x)
    return data.replace(x=jnp.asarray(x / 256.0, jnp.float32))


@paper_defaults(
    model=None,
    data={"pca": 32},
    rounds=20,
    algorithms={"kfed": {"num_clusters": 4}, "uifca": {"num_clusters": 4}},
    source=("Chung's thesis, Table 4.3 'MNIST Representations': RotNet features, K = 4 rotations, "
        "projected on 32 principal components (Table 4.1's dimension)"))
def rotnet_points(key, *, digit: Count = 2, heterogeneity: Probability = 1.0, fill: float = 0.95,
                  points_per_client: Size | None = None, pca: Count = 0, epochs: Count = 3,
                  pretrain_images: Count = 10000, pretrain_seed: Seed = 0,
                  cache_dir: str | None = None, source: str = "mnist",
                  data_dir: str | None = None, download: bool = False) -> FederatedData:
    """[T] 4.3's "MNIST Representations", read as the Rotated task on RotNet features: a
    RotNet (``models.rotnet``) pretrained centrally (Adam 1e-3, batch 128, ``epochs``) on
    the first ``pretrain_images`` MNIST *test* images at all four rotations (held out from
    the clustered training images; its params saved in ``cache_dir`` when given (not "")
    and read from there by later runs); every point is its image's pooled last-conv activations
    (F = 288), scaled to unit L2 norm. pca = d > 0: projected on the top d principal
    components of the pretraining images' representations, divided by one global scale
    (the root mean variance of the kept components), for UIFCA's full-Gaussian flow.
    Clusters, clients and dealing as ``mnist_points(task="rotated", digits=[digit])``.
    The representations are computed once per process for each (digit, pca, RotNet).

    digit: the digit whose rotations are the clusters
    heterogeneity: fraction p of a client's points from its own cluster
    fill: points per client as a fraction of the smallest cluster's pool
    points_per_client: points per client (None: ``fill`` x the smallest pool)
    pca: project the representations on their top d principal components (0: none)
    epochs: RotNet pretraining epochs
    pretrain_images: MNIST test images RotNet is pretrained on
    pretrain_seed: seed of RotNet's pretraining
    cache_dir: folder caching RotNet's params ("": none)
    source: "mnist" (MNIST's IDX files or TFDS) or "digits" (scikit-learn's 8x8 digits,
    no files: for CI)
    data_dir: folder holding MNIST (else $FEDCLUST_DATA)
    download: let TFDS download MNIST when the network allows"""
    setting = (source, data_dir, download, epochs, pretrain_images, pretrain_seed, cache_dir)
    pools = _rotnet_pools(int(digit), int(pca), setting)
    return _pool_points(key, list(pools), None, points_per_client, fill, heterogeneity)


@functools.lru_cache(maxsize=2)
def _rotnet(setting):
    """(model, params, unit-norm features of images [n, H, W]) of a pretrained RotNet."""
    from fedclust_jax.models.rotnet import extract_features, pretrain_rotnet, rotnet
    source, data_dir, download, epochs, pretrain_images, seed, cache_dir = setting
    pre, _, _ = _rotnet_images(source, data_dir, download, pretrain_images)
    model = rotnet(size=pre.shape[1])
    path = None if not cache_dir else Path(cache_dir).expanduser() / (
        f"{model.name}-{source}-n{len(pre)}-e{epochs}-s{seed}.npz")
    params = _load_params(path, model.init(jax.random.key(0)))
    if params is None:
        params, _ = pretrain_rotnet(model, jax.random.key(seed), pre, epochs=epochs)
        _save_params(path, params)
    unit = lambda f: f / jnp.maximum(jnp.linalg.norm(f, axis=-1, keepdims=True), 1e-12)
    return lambda images: np.asarray(unit(extract_features(model, params, images)))


@functools.lru_cache(maxsize=16)
def _rotnet_pools(digit: int, pca: int, setting) -> tuple:
    from fedclust_jax.models.rotnet import rotated_copies
    source, data_dir, download, _, pretrain_images, _, _ = setting
    pre, images, labels = _rotnet_images(source, data_dir, download, pretrain_images)
    features = _rotnet(setting)
    feats = features(rotated_copies(jnp.asarray(images[labels == digit]))[0])
    if pca:
        ref = features(rotated_copies(jnp.asarray(pre))[0]).astype(np.float64)
        mean = ref.mean(0)
        vals, vecs = np.linalg.eigh(np.cov(ref - mean, rowvar=False))
        top = np.argsort(vals)[::-1][:pca]
        feats = ((feats - mean) @ vecs[:, top] / np.sqrt(vals[top].mean())).astype(np.float32)
    return tuple(np.split(feats, 4))                                  # rotation-major


@functools.lru_cache(maxsize=2)
def _rotnet_images(source, data_dir, download, pretrain_images):
    """(pretraining images, training images, labels), images float32 bytes / 256
    [n, H, W]: MNIST (pretraining: the first test images) or the 8x8 digits zero-padded to
    RotNet's smallest size, 12x12 (CI)."""
    from fedclust_jax.data.sources import load_digits_images, load_images
    as_bytes = lambda a: (np.rint(np.asarray(a).reshape(np.shape(a)[:3]) * 255) / 256).astype(np.float32)
    if source == "digits":
        x, y = load_digits_images()
        x = np.pad(as_bytes(x), ((0, 0), (2, 2), (2, 2)))
        return x[:pretrain_images], x, np.asarray(y)
    xtr, ytr, xte, _ = load_images("mnist", data_dir, download=download)
    return as_bytes(xte)[:pretrain_images], as_bytes(xtr), np.asarray(ytr)


def _load_params(path, template):
    if path is None or not path.exists():
        return None
    leaves, treedef = jax.tree.flatten(template)
    with np.load(path) as f:
        stored = [f[f"a{i}"] for i in range(len(leaves))]
    if any(a.shape != b.shape for a, b in zip(stored, leaves)):
        return None
    return jax.tree.unflatten(treedef, [jnp.asarray(a) for a in stored])


def _save_params(path, params):
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{f"a{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(params))})
