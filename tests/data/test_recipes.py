"""Cluster recipes: transform algebra, shard coverage, client counts and cluster ids."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.data import build_dataset, from_client_lists, partition, recipes, transforms
from fedclust_jax.models import mlp

KEY = jax.random.key(0)


def tiny_images(n, size=6, seed=0):
    """Images whose every pixel is unique, so an image identifies its source index."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, size, size, 1)).astype(np.float32)
    return x, (np.arange(n) % 10).astype(np.int32)


def source_index(images, base):
    """Index into ``base`` of each image (exact match); -1 if absent."""
    keys = {b.tobytes(): i for i, b in enumerate(base)}
    return np.array([keys.get(np.asarray(a).tobytes(), -1) for a in images])


def test_transform_algebra():
    x, y = tiny_images(5)
    np.testing.assert_array_equal(transforms.rotate90(transforms.rotate90(
        transforms.rotate90(transforms.rotate90(x, 1), 1), 1), 1), x)
    assert not np.array_equal(transforms.rotate90(x, 1), x)
    np.testing.assert_array_equal(transforms.rotate90(x, 2), x[:, ::-1, ::-1])
    q = np.round(x * 256) / 256  # dyadic pixels: 1 - (1 - x) is exact in float32
    np.testing.assert_array_equal(transforms.invert(transforms.invert(q)), q)
    np.testing.assert_allclose(transforms.invert(transforms.invert(x)), x, atol=1e-7)
    np.testing.assert_array_equal(transforms.invert(transforms.invert(q * 255, 255), 255), q * 255)
    for k in range(10):
        shifted = transforms.shift_labels(np.arange(10), k, 10)
        assert sorted(shifted) == list(range(10))  # a bijection of the classes
        np.testing.assert_array_equal(transforms.shift_labels(shifted, 10 - k, 10), np.arange(10))
    with pytest.raises(ValueError):
        transforms.shift_labels(np.array([10]), 1, 10)
    # the pixel permutation views use is rotate90 (square images any k, others k even)
    for (h, w), k in (((6, 6), 1), ((6, 6), 3), ((4, 6), 2), ((4, 6), 0)):
        img = np.random.default_rng(k).random((2, h, w, 3))
        perm = transforms.pixel_permutation(h, w, k)
        np.testing.assert_array_equal(img.reshape(2, h * w, 3)[:, perm].reshape(
            transforms.rotate90(img, k).shape), transforms.rotate90(img, k))
    with pytest.raises(ValueError, match="square"):
        transforms.pixel_permutation(4, 6, 1)
    t = transforms.ClusterTransform(rot=1, invert=1.0, label_shift=3)
    tx, ty = t(x, y)
    np.testing.assert_array_equal(tx, transforms.invert(transforms.rotate90(x, 1)))
    np.testing.assert_array_equal(ty, (y + 3) % 10)


def test_disjoint_shards_srfca_layout():
    x, y = tiny_images(100)
    xt, yt = tiny_images(30, seed=1)
    rot = [recipes.rotation(c) for c in range(4)]
    d = recipes.disjoint_shard_clusters(x, y, xt, yt, np.random.default_rng(0),
                                        cluster_transforms=rot, num_clients=8, n=12, n_test=3)
    np.testing.assert_array_equal(d.cluster, np.arange(8) % 4)  # client i in cluster i mod K
    assert d.x.shape == (8, 12, 6, 6, 1) and d.x_test.shape == (8, 3, 6, 6, 1)
    # Undo each client's rotation: shards are disjoint subsets of the train set.
    src = np.concatenate([source_index(transforms.rotate90(np.asarray(d.x[i]), -(i % 4)), x)
                          for i in range(8)])
    assert (src >= 0).all() and len(set(src)) == 96
    np.testing.assert_array_equal(np.asarray(d.y).reshape(-1), y[src])
    tsrc = np.concatenate([source_index(transforms.rotate90(np.asarray(d.x_test[i]), -(i % 4)), xt)
                           for i in range(8)])
    assert (tsrc >= 0).all() and len(set(tsrc)) == 24
    with pytest.raises(ValueError, match="exceed"):
        recipes.disjoint_shard_clusters(x, y, xt, yt, np.random.default_rng(0),
                                        cluster_transforms=rot, num_clients=9, n=12, n_test=3)


def test_whole_set_ifca_layout():
    x, y = tiny_images(40)
    xt, yt = tiny_images(12, seed=1)
    d = recipes.whole_set_clusters(x, y, xt, yt, np.random.default_rng(0),
                                   cluster_transforms=recipes.rotations(2), num_clients=8, n=10,
                                   n_test=4)
    np.testing.assert_array_equal(d.cluster, [0, 0, 0, 0, 1, 1, 1, 1])
    for c, k in ((0, 0), (1, 2)):
        block = np.asarray(d.x[4 * c:4 * c + 4]).reshape(-1, 6, 6, 1)
        src = source_index(transforms.rotate90(block, -k), x)
        assert len(set(src)) == 40 and (src >= 0).all()  # each cluster covers the whole set
        # 12 test images / 4 = 3 machines; client j carries machine j mod 3
        tb = np.asarray(d.x_test[4 * c:4 * c + 4])
        np.testing.assert_array_equal(tb[3], tb[0])
        tsrc = source_index(transforms.rotate90(tb[:3].reshape(-1, 6, 6, 1), -k), xt)
        assert len(set(tsrc)) == 12
    assert np.asarray(d.x).min() >= 0 and np.asarray(d.x).max() <= 1


def test_label_shift_personalized_layout():
    x, y = tiny_images(80)
    xt, yt = tiny_images(40, seed=1)
    d = recipes.disjoint_shard_clusters(
        x, y, xt, yt, np.random.default_rng(0), num_clients=8, n=10, n_test=5, assign="block",
        cluster_transforms=[recipes.label_shift(c) for c in range(4)])
    np.testing.assert_array_equal(d.cluster, np.arange(8) // 2)
    for i in range(8):
        src = source_index(np.asarray(d.x[i]), x)
        np.testing.assert_array_equal(d.y[i], (y[src] + i // 2) % 10)


def test_chunked_cifar_layout():
    x, y = tiny_images(160, size=4)
    xt, yt = tiny_images(80, size=4, seed=1)
    ident = lambda a, b: (a, b)
    d = recipes.chunked_clusters(x, y, xt, yt, np.random.default_rng(0),
                                 cluster_transforms=[ident, ident],
                                 cluster_classes=[range(0, 7), range(3, 10)],
                                 num_chunks=4, keep_chunks=3)
    np.testing.assert_array_equal(d.cluster, [0, 0, 0, 1, 1, 1])
    assert d.x.shape[1] == 112 // 4
    y0, y1 = np.asarray(d.y[:3]), np.asarray(d.y[3:])
    assert set(y0.ravel()) <= set(range(7)) and set(y1.ravel()) <= set(range(3, 10))
    src = source_index(np.asarray(d.x[:3]).reshape(-1, 4, 4, 1), x)
    assert len(set(src)) == 3 * 28  # kept chunks are disjoint within a cluster


def test_partitioners():
    rng = np.random.default_rng(0)
    parts = partition.iid_shards(50, 4, rng)
    assert len(np.unique(np.concatenate(parts))) == 48
    labels = rng.integers(0, 5, 300)
    parts, props = partition.dirichlet_label_skew(labels, 6, 0.3, rng)
    allidx = np.concatenate(parts)
    assert sorted(allidx) == list(range(300))  # a partition: every example exactly once
    np.testing.assert_allclose(props.sum(0), 1.0)
    ids, groups = partition.natural_clients(np.array(["b", "a", "b", "c", "a"]))
    assert list(ids) == ["b", "a", "c"]
    assert [list(g) for g in groups] == [[0, 2], [1, 4], [3]]


def test_rotated_digits_registered():
    d = build_dataset("rotated-digits", KEY, num_clients=8, n=20, n_test=10)
    assert d.num_clients == 8 and d.num_true_clusters == 4 and d.num_classes == 10
    assert d.x.shape == (8, 20, 8, 8, 1) and d.count_test.tolist() == [10] * 8
    d2 = build_dataset("rotated-digits", KEY, num_clients=8, n=20, n_test=10)
    np.testing.assert_array_equal(d.x, d2.x)  # same key, same data
    with pytest.raises(ValueError, match="no parameter"):
        build_dataset("rotated-digits", KEY, bogus=1)


def test_dirichlet_partition_ragged():
    d = build_dataset("dirichlet-partition", KEY, num_clients=5, alpha=0.2)
    assert d.num_clients == 5 and int(d.count.sum()) + int(d.count_test.sum()) == 1797


def test_padding_never_leaks_into_losses():
    rng = np.random.default_rng(0)
    xs = [rng.random((n, 4)).astype(np.float32) for n in (2, 5)]
    ys = [rng.integers(0, 3, n) for n in (2, 5)]
    d = from_client_lists(xs, ys, xs, ys, task="classification", num_classes=3)
    model = mlp((4, 3, 3))
    params = model.init(jax.random.key(1))
    loss = jax.jit(model.loss)
    mask = jnp.arange(d.x.shape[1]) < d.count[0]
    clean = loss(params, d.x[0], d.y[0], mask)
    poisoned_x = d.x[0].at[2:].set(1e6)
    poisoned_y = d.y[0].at[2:].set(2)
    np.testing.assert_allclose(loss(params, poisoned_x, poisoned_y, mask), clean, rtol=1e-6)
    per_example = jax.jit(model.example_losses)(params, poisoned_x, poisoned_y)
    np.testing.assert_allclose(clean, per_example[:2].mean(), rtol=1e-6)  # real examples only


def _write_mnist(folder, n_train, n_test):
    from fedclust_jax.data.sources import write_idx
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    write_idx(folder / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (n_train, 28, 28)))
    write_idx(folder / "train-labels-idx1-ubyte.gz", np.arange(n_train) % 10)
    write_idx(folder / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 28, 28)))
    write_idx(folder / "t10k-labels-idx1-ubyte", np.arange(n_test) % 10)


def test_named_mnist_recipes_from_idx(tmp_path):
    _write_mnist(tmp_path / "mnist", 120, 40)
    d = build_dataset("srfca-rotated-mnist", KEY, data_dir=tmp_path, num_clients=8, n=10, n_test=4)
    assert d.num_clients == 8 and d.cluster.tolist() == [0, 1, 2, 3] * 2
    d = build_dataset("srfca-inverted-mnist", KEY, data_dir=tmp_path, num_clients=6, n=10,
                      n_test=4, pixel_range="byte")
    assert d.cluster.tolist() == [0, 1] * 3 and float(d.x.max()) > 1.0
    d = build_dataset("ifca-rotated-mnist", KEY, data_dir=tmp_path, num_clusters=2,
                      num_clients=6, n=20, n_test=10)
    assert d.cluster.tolist() == [0, 0, 0, 1, 1, 1] and d.x.shape == (6, 20, 28, 28, 1)
    d = build_dataset("personalized-mnist", KEY, data_dir=tmp_path, clients_per_cluster=3,
                      task="label")
    assert d.num_clients == 12 and d.cluster.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert d.x.shape[1] == 120 // 12 and d.x_test.shape[1] == 40 // 12


def test_named_cifar_recipes_from_npz(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "cifar10").mkdir()
    np.savez(tmp_path / "cifar10" / "cifar10.npz",
             x_train=rng.integers(0, 256, (160, 32, 32, 3), dtype=np.uint8),
             y_train=np.arange(160) % 10,
             x_test=rng.integers(0, 256, (80, 32, 32, 3), dtype=np.uint8),
             y_test=np.arange(80) % 10)
    d = build_dataset("srfca-rotated-cifar10", KEY, data_dir=tmp_path)
    assert d.num_clients == 16 and d.cluster.tolist() == [0] * 8 + [1] * 8
    assert d.x.shape == (16, 10, 32, 32, 3)
    d = build_dataset("srfca-label-cifar10", KEY, data_dir=tmp_path)
    assert d.num_clients == 16 and d.x.shape[1] == 112 // 8
    d = build_dataset("ifca-rotated-cifar10", KEY, data_dir=tmp_path, num_clients=4, n=50,
                      n_test=20)
    assert d.cluster.tolist() == [0, 0, 1, 1]


def test_paper_defaults():
    import inspect
    defaults = lambda f: {k: p.default for k, p in inspect.signature(f).parameters.items()}
    assert {"num_clusters": 4, "num_clients": 2400, "n": 100}.items() <= \
        defaults(recipes.ifca_rotated_mnist).items()
    assert {"num_clusters": 4, "num_clients": 100, "n": 600, "n_test": 100}.items() <= \
        defaults(recipes.srfca_rotated_mnist).items()
    assert {"num_clusters": 4, "clients_per_cluster": 75}.items() <= \
        defaults(recipes.personalized_mnist).items()
    assert {"num_clients": 200, "n": 500}.items() <= defaults(recipes.ifca_rotated_cifar10).items()
    assert 50000 // defaults(recipes.srfca_rotated_cifar10)["num_chunks"] == 3125
    assert 35000 // defaults(recipes.srfca_label_cifar10)["num_chunks"] == 4375
