"""Readers of real data on tiny files the tests write: IDX, LEAF JSON, CIFAR .npz, tfds."""

import gzip
import json
import time

import jax
import numpy as np
import pytest

from fedclust_jax.data import leaf, sources
from fedclust_jax.data.recipes import femnist, shakespeare, srfca_rotated_mnist
from fedclust_jax.data.sources import DataFormatError, DataNotFoundError


def write_mnist(folder, n_train=40, n_test=12, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
              "train-labels-idx1-ubyte": np.arange(n_train) % 10,
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
              "t10k-labels-idx1-ubyte": np.arange(n_test) % 10}
    for stem, a in arrays.items():
        sources.write_idx(folder / (stem + (".gz" if gz else "")), a)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_idx_roundtrip_and_mnist_loader(tmp_path, gz):
    arrays = write_mnist(tmp_path / "mnist", gz=gz)
    x, y, xt, yt = sources.load_images("mnist", tmp_path)
    assert x.shape == (40, 28, 28, 1) and xt.shape == (12, 28, 28, 1)
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_array_equal(np.round(x[..., 0] * 255), arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(yt, arrays["t10k-labels-idx1-ubyte"])


def test_idx_corrupt_is_format_error(tmp_path):
    p = tmp_path / "bad.gz"
    sources.write_idx(p, np.zeros((3, 4, 4)))
    raw = gzip.decompress(p.read_bytes())
    (tmp_path / "short").write_bytes(raw[:-5])
    with pytest.raises(DataFormatError, match="data bytes"):
        sources.read_idx(tmp_path / "short")
    (tmp_path / "junk").write_bytes(b"hello world")
    with pytest.raises(DataFormatError, match="not an IDX"):
        sources.read_idx(tmp_path / "junk")


def test_missing_dir_fails_fast_without_network(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDCLUST_DATA", raising=False)
    monkeypatch.setattr("socket.socket.connect", lambda *a, **k: pytest.fail("network used"))
    missing = tmp_path / "nowhere"
    t = time.perf_counter()
    for name in ("mnist", "cifar10", "fashion_mnist"):
        with pytest.raises(DataNotFoundError, match=name) as err:
            sources.load_images(name, missing)
        assert str(missing) in str(err.value) and "tfds.data_source" in str(err.value)
    with pytest.raises(DataNotFoundError, match="emnist"):
        sources.load_images("emnist", missing, source="tfds")
    with pytest.raises(DataNotFoundError, match="femnist"):
        femnist(jax.random.key(0), data_dir=missing)
    with pytest.raises(FileNotFoundError, match="mnist"):
        srfca_rotated_mnist(jax.random.key(0), data_dir=missing)
    assert time.perf_counter() - t < 5.0


def test_env_var_points_at_data(tmp_path, monkeypatch):
    write_mnist(tmp_path / "mnist")
    monkeypatch.setenv("FEDCLUST_DATA", str(tmp_path))
    assert sources.load_images("mnist")[0].shape == (40, 28, 28, 1)


def test_cifar_npz(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "cifar10").mkdir()
    np.savez(tmp_path / "cifar10" / "cifar10.npz",
             x_train=rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8),
             y_train=np.arange(20) % 10,
             x_test=rng.integers(0, 256, (10, 3, 32, 32), dtype=np.uint8),  # channels first
             y_test=np.arange(10)[:, None])
    x, y, xt, yt = sources.load_images("cifar10", tmp_path)
    assert x.shape == (20, 32, 32, 3) and xt.shape == (10, 32, 32, 3) and yt.shape == (10,)
    np.savez(tmp_path / "cifar10" / "cifar10.npz", a=np.zeros(3))
    with pytest.raises(DataFormatError, match="x_train"):
        sources.load_images("cifar10", tmp_path)


@pytest.mark.parametrize("name, shape", [("mnist", (28, 28, 1)), ("cifar10", (32, 32, 3)),
                                         ("emnist", (28, 28, 1))])
def test_tfds_data_source_mock(tmp_path, name, shape):
    tfds = pytest.importorskip("tensorflow_datasets")
    (tmp_path / name).mkdir()
    with tfds.testing.mock_data(num_examples=6):
        x, y, xt, yt = sources.load_images(name, tmp_path, source="tfds")
        if name == "mnist":  # "auto" falls back to a tfds folder when no IDX files exist
            np.testing.assert_array_equal(sources.load_images(name, tmp_path)[1], y)
    assert x.shape == (6, *shape) and xt.shape == (6, *shape)
    assert x.dtype == np.float32 and x.max() <= 1.0 and y.dtype == np.int32


def _leaf_blob(users, make):
    data = {u: make(i) for i, u in enumerate(users)}
    return {"users": users, "num_samples": [len(d["y"]) + 79 for d in data.values()],
            "user_data": data}


def _write_json(path, blob, gz):
    if gz:
        with gzip.open(str(path) + ".gz", "wt") as f:
            json.dump(blob, f)
    else:
        path.write_text(json.dumps(blob))


@pytest.mark.parametrize("gz", [True, False])
def test_leaf_femnist_natural_clients(tmp_path, gz):
    base = tmp_path / "femnist-leaf"
    for split, sizes in (("train", (3, 5, 2)), ("test", (1, 2, 0))):
        (base / split).mkdir(parents=True)
        make = lambda i, s=sizes: {"x": np.full((s[i], 784), i / 10).tolist(),
                                   "y": [i + 50] * s[i]}
        _write_json(base / split / "a.json", _leaf_blob(["w0", "w1"], make), gz)
        _write_json(base / split / "b.json", _leaf_blob(["w2"], lambda i: make(2)), gz)
    d = femnist(jax.random.key(0), data_dir=tmp_path)
    assert d.num_clients == 3 and d.num_classes == 62
    np.testing.assert_array_equal(d.count, [3, 5, 2])
    np.testing.assert_array_equal(d.count_test, [1, 2, 0])
    assert d.x.shape == (3, 5, 28, 28, 1)
    assert (np.asarray(d.cluster) == -1).all()
    np.testing.assert_allclose(d.x[1, :5], 0.1)
    assert int(d.y[2, 0]) == 52


def test_leaf_shakespeare_time_split_and_tokens(tmp_path):
    text = "".join(leaf.SHAKESPEARE_CHARS[(7 * i) % 80] for i in range(1080))
    x = [text[i:i + 80] for i in range(1000)]
    y = [text[i + 80] for i in range(1000)]
    folder = tmp_path / "shakespeare-leaf" / "derived"
    folder.mkdir(parents=True)
    _write_json(folder / "all.json", {"users": ["A"], "num_samples": [1000],
                                      "user_data": {"A": {"x": x, "y": y}}}, True)
    d = shakespeare(jax.random.key(0), data_dir=tmp_path, subdir="derived")
    assert d.x.shape == (1, 900, 80) and d.x.dtype == np.int32
    assert int(d.count[0]) == 900 and int(d.count_test[0]) == 1000 - 900 - 79
    tokens = leaf.encode_chars([text])[0]
    np.testing.assert_array_equal(d.x[0, 5], tokens[5:85])
    assert int(d.y[0, 5]) == tokens[85]
    np.testing.assert_array_equal(d.x_test[0, 0], tokens[900 + 79:900 + 79 + 80])
    assert leaf.time_split(10, 0.9, 79) == (slice(0, 9), slice(10, 10))
    with pytest.raises(DataFormatError, match="alphabet"):
        leaf.encode_chars(["abc\u00e9"])


def test_leaf_corrupt_file(tmp_path):
    (tmp_path / "femnist" / "train").mkdir(parents=True)
    (tmp_path / "femnist" / "train" / "x.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="LEAF"):
        femnist(jax.random.key(0), data_dir=tmp_path)
