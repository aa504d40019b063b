"""Views (one shared pool, per-client indices, transform on read) equal the materialised
recipes: same arrays, same per-client reads, same training rounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data import build_dataset, recipes
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.sources import write_idx
from fedclust_jax.data.views import FederatedViews, make_views
from fedclust_jax.experiment import run_rounds
from fedclust_jax.models import mlp

KEY = jax.random.key(7)
FIELDS = ("x", "y", "count", "x_test", "y_test", "count_test", "cluster")


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """MNIST-like IDX files: 8x8 uint8 images, 160 train / 40 test."""
    root = tmp_path_factory.mktemp("data")
    (root / "mnist").mkdir()
    rng = np.random.default_rng(0)
    write_idx(root / "mnist" / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (160, 8, 8)))
    write_idx(root / "mnist" / "train-labels-idx1-ubyte.gz", rng.integers(0, 10, 160))
    write_idx(root / "mnist" / "t10k-images-idx3-ubyte", rng.integers(0, 256, (40, 8, 8)))
    write_idx(root / "mnist" / "t10k-labels-idx1-ubyte", rng.integers(0, 10, 40))
    return root


def assert_same(views, data):
    assert isinstance(views, FederatedViews) and isinstance(data, FederatedData)
    for f in FIELDS:
        a, b = np.asarray(getattr(views, f)), np.asarray(getattr(data, f))
        assert a.dtype == b.dtype and a.shape == b.shape, f
        np.testing.assert_array_equal(a, b, err_msg=f)
    # one client at a time, inside jit with a traced id
    ids = jnp.arange(data.num_clients)
    for read in ("train_client", "test_client"):
        got = jax.jit(jax.vmap(lambda d, i: getattr(d, read)(i), (None, 0)))(views, ids)
        want = jax.vmap(lambda i: getattr(data, read)(i))(ids)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=read)


SHAPE = dict(n=10, n_test=5)  # one shape for every case: compiled reads are reused
CASES = [
    ("ifca-rotated-mnist", dict(num_clusters=4, num_clients=8, **SHAPE)),
    ("ifca-rotated-mnist", dict(num_clusters=2, num_clients=8, n=10)),
    ("srfca-rotated-mnist", dict(num_clients=8, **SHAPE)),
    ("srfca-inverted-mnist", dict(num_clients=8, pixel_range="byte", **SHAPE)),
    ("personalized-mnist", dict(clients_per_cluster=2, task="label", **SHAPE)),
    ("ifca-rotated-mnist", dict(num_clients=40, replace=True, **SHAPE)),
    ("srfca-rotated-mnist", dict(num_clients=40, replace=True, **SHAPE)),
]


@pytest.mark.parametrize("name,params", CASES)
def test_views_equal_materialised_recipe(mnist_dir, name, params):
    v = build_dataset(name, KEY, data_dir=mnist_dir, **params)
    d = build_dataset(name, KEY, data_dir=mnist_dir, views=False, **params)
    assert v.pool_x.dtype == np.uint8 and v.pool_x.shape == (200, 8, 8, 1)
    assert_same(v, d)
    idx = jnp.array([3, 0, 3, 1])
    assert_same(v.take(idx), d.take(idx))
    assert v.feature_shape == d.feature_shape and v.num_classes == d.num_classes == 10
    assert (v.n_max, v.n_test_max) == (d.n_max, d.n_test_max) == (d.x.shape[1], d.x_test.shape[1])
    assert v.num_true_clusters == d.num_true_clusters and v.num_clients == d.num_clients


def test_with_replacement_memory_and_range(mnist_dir):
    v = build_dataset("ifca-rotated-mnist", KEY, data_dir=mnist_dir, num_clients=4000, n=20,
                      n_test=20, replace=True)
    assert v.index.shape == (4000, 20) and v.cluster.tolist() == np.repeat(range(4), 1000).tolist()
    assert int(v.index.max()) < 160 <= int(v.index_test.min()) and int(v.index_test.max()) < 200
    pool = 200 * 64 + 200 * 4  # uint8 images + int32 labels
    tables = 4 * 64 * 4 + 256 * 4 + 4 * (1 + 4)  # pixel permutations, byte values, inversion
    assert v.nbytes == pool + tables + 4000 * (4 * 40 + 16)  # per client: indices + 4 int32
    # the paper's construction refuses what cannot be cut without replacement
    with pytest.raises(ValueError, match="replace=True"):
        build_dataset("ifca-rotated-mnist", KEY, data_dir=mnist_dir, num_clients=4000, n=20)


def test_float_pool_and_digits():
    rng = np.random.default_rng(1)
    x, xt = rng.random((50, 6, 6, 1), np.float32), rng.random((20, 6, 6, 1), np.float32)
    y, yt = rng.integers(0, 10, 50).astype(np.int32), rng.integers(0, 10, 20).astype(np.int32)
    kw = dict(cluster_transforms=[recipes.rotation(1), recipes.inversion()], num_clients=4,
              n=20, n_test=5)
    v = recipes.whole_set_clusters(x, y, xt, yt, np.random.default_rng(0), views=True, **kw)
    d = recipes.whole_set_clusters(x, y, xt, yt, np.random.default_rng(0), **kw)
    assert v.pool_x.dtype == np.float32 and v.values is None
    assert_same(v, d)
    v = build_dataset("rotated-digits", KEY, num_clients=8, n=20, n_test=10, views=True)
    assert v.pool_x.dtype == np.uint8
    assert_same(v, build_dataset("rotated-digits", KEY, num_clients=8, n=20, n_test=10))


def test_bfloat16_storage(mnist_dir):
    v = build_dataset("srfca-inverted-mnist", KEY, data_dir=mnist_dir, num_clients=8, **SHAPE)
    d = build_dataset("srfca-inverted-mnist", KEY, data_dir=mnist_dir, num_clients=8,
                      views=False, **SHAPE)
    vb, db = v.astype(jnp.bfloat16), d.astype("bfloat16")
    assert vb.pool_x.dtype == np.uint8 and vb.nbytes == v.nbytes  # the pool stays bytes
    assert db.x.dtype == jnp.bfloat16 and db.y.dtype == np.int32
    assert db.nbytes == d.nbytes - (d.x.size + d.x_test.size) * 2
    assert_same(vb, db)
    with pytest.raises(ValueError, match="dtype"):
        v.astype("float16")


def test_ifca_rounds_identical_on_views(mnist_dir):
    kw = dict(num_clusters=2, num_clients=8, n=20, n_test=10, data_dir=mnist_dir)
    v = build_dataset("ifca-rotated-mnist", KEY, **kw)
    d = build_dataset("ifca-rotated-mnist", KEY, views=False, **kw)
    model = mlp((64, 16, 10))
    alg = IFCA(model, IFCAConfig(num_clusters=2, participation=0.5,
                                 local=LocalTraining(steps=2, lr=0.1, batch_size=8)))
    (sv, hv), (sd, hd) = [run_rounds(alg, data, jax.random.key(3), rounds=2, progress=False)
                          for data in (v, d)]
    for a, b in zip(jax.tree.leaves(sv), jax.tree.leaves(sd)):
        np.testing.assert_array_equal(a, b)
    assert hv.keys() == hd.keys() and "train_loss" in hv
    for k in hv:
        np.testing.assert_array_equal(hv[k], hd[k])
    ev = [jax.jit(alg.evaluate)(jax.tree.map(lambda a: a[0], s), data)
          for s, data in ((sv, v), (sd, d))]
    for a, b in zip(jax.tree.leaves(ev[0]), jax.tree.leaves(ev[1])):
        np.testing.assert_array_equal(a, b)


def test_bad_views_are_refused():
    pool, labels = np.zeros((10, 4, 4, 1), np.uint8), np.zeros(10, np.int32)
    t = [recipes.rotation(0)]
    with pytest.raises(ValueError, match="outside the pool"):
        make_views(pool, labels, np.full((2, 3), 10), np.zeros((2, 1)), [0, 0], [0, 0], t)
    with pytest.raises(ValueError, match="transform"):
        make_views(pool, labels, np.zeros((2, 3)), np.zeros((2, 1)), [0, 0], [0, 1], t)
    with pytest.raises(TypeError, match="ClusterTransform"):
        make_views(pool, labels, np.zeros((2, 3)), np.zeros((2, 1)), [0, 0], [0, 0],
                   [lambda a, b: (a, b)])
    with pytest.raises(ValueError, match="image"):
        make_views(np.zeros((10, 16), np.uint8), labels, np.zeros((2, 3)), np.zeros((2, 1)),
                   [0, 0], [0, 0], [recipes.rotation(1)])
