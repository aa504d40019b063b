"""The standard loaders a dataset plugin uses (``fedclust_jax.load_images`` and its
siblings), on small files written here: what they return, where they look, and the one
line a missing file gives, through a plugin dataset on the command line."""

import json
import textwrap

import numpy as np
import pytest

from fedclust_jax import (DataNotFoundError, load_digits_images, load_images,
                          load_leaf_clients, resolve_data_dir)
from fedclust_jax.data.sources import write_idx

MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_mnist(folder, n=12, n_test=4, seed=0):
    """Four MNIST IDX files of random bytes in ``folder``; returns the arrays written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = (rng.integers(0, 256, (n, 28, 28)), rng.integers(0, 10, n),
              rng.integers(0, 256, (n_test, 28, 28)), rng.integers(0, 10, n_test))
    for name, a in zip(MNIST_FILES, arrays):
        write_idx(folder / name, a)
    return arrays


@pytest.fixture(autouse=True)
def no_data_root(monkeypatch):
    monkeypatch.delenv("FEDCLUST_DATA", raising=False)


def test_mnist_files_give_float_images_and_int_labels(tmp_path):
    x, y, xt, yt = write_mnist(tmp_path / "mnist")
    out = load_images("mnist", tmp_path)
    assert [(a.shape, a.dtype.name) for a in out] == [
        ((12, 28, 28, 1), "float32"), ((12,), "int32"), ((4, 28, 28, 1), "float32"),
        ((4,), "int32")]
    np.testing.assert_array_equal(out[0][..., 0], (x / 255.0).astype(np.float32))
    np.testing.assert_array_equal(out[3], yt)
    assert 0.0 <= out[0].min() and out[0].max() <= 1.0


def test_the_root_comes_from_fedclust_data_and_cifar_from_an_npz(tmp_path, monkeypatch):
    write_mnist(tmp_path)                                # <root> itself, for mnist
    monkeypatch.setenv("FEDCLUST_DATA", str(tmp_path))
    assert resolve_data_dir(None) == tmp_path
    assert load_images("mnist")[0].shape == (12, 28, 28, 1)
    (tmp_path / "cifar10").mkdir()
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "cifar10" / "cifar10.npz",                  # channels-first is turned
             x_train=rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8),
             y_train=rng.integers(0, 10, (5, 1)),
             x_test=rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
             y_test=rng.integers(0, 10, 2))
    x, y, xt, yt = load_images("cifar10", source="local")
    assert x.shape == (5, 32, 32, 3) and y.shape == (5,) and xt.shape == (2, 32, 32, 3)


def test_a_missing_dataset_names_every_place_looked(tmp_path):
    with pytest.raises(DataNotFoundError) as e:
        load_images("fashion_mnist", tmp_path, source="local")
    text = str(e.value)
    assert isinstance(e.value, FileNotFoundError) and "\n" not in text
    assert str(tmp_path / "fashion_mnist") in text and str(tmp_path / "fashion-mnist") in text
    assert "train-images-idx3-ubyte" in text
    with pytest.raises(DataNotFoundError, match=r"no data_dir given and \$FEDCLUST_DATA unset"):
        load_images("mnist", None, source="local")


def test_digits_and_leaf_clients(tmp_path):
    x, y = load_digits_images()
    assert x.shape == (1797, 8, 8, 1) and x.dtype == np.float32 and y.dtype == np.int32
    folder = tmp_path / "femnist"
    for split, n in (("train", 3), ("test", 1)):
        (folder / split).mkdir(parents=True)
        blob = {"users": ["w0", "w1"], "num_samples": [n, n],
                "user_data": {u: {"x": np.full((n, 784), i / 2).tolist(), "y": [i] * n}
                              for i, u in enumerate(("w0", "w1"))}}
        (folder / split / "part.json").write_text(json.dumps(blob))
    users, xs, ys, xts, yts = load_leaf_clients("femnist", tmp_path)
    assert users == ["w0", "w1"] and xs[1].shape == (3, 28, 28, 1) and xts[0].shape[0] == 1
    assert ys[1].tolist() == [1, 1, 1]


PLUGIN = '''
import numpy as np
from fedclust_jax import Size, from_client_lists, load_images, register_dataset


def few_digits(key, num_clients: Size = 2, data_dir=None):
    """MNIST dealt to clients in equal shards.

    num_clients: number of clients; data_dir: folder holding mnist/ (else $FEDCLUST_DATA)."""
    x, y, xt, yt = load_images("mnist", data_dir, source="local")
    shard = lambda a: np.array_split(a, num_clients)
    return from_client_lists(shard(x), shard(y), shard(xt), shard(yt),
                             np.zeros(num_clients, int), task="classification",
                             num_classes=10)


register_dataset("few-digits", few_digits, replace=True)
'''


def test_a_plugin_dataset_reads_its_files_through_data_dir(tmp_path, capsys):
    from fedclust_jax.cli import main
    from fedclust_jax.data.registry import DATASETS
    plugin = tmp_path / "few_digits.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    write_mnist(tmp_path / "data" / "mnist")
    args = ["--plugin", str(plugin), "run", "--dataset", "few-digits", "--algorithm",
            "fedavg", "--rounds", "1", "--no-progress", "--model-arg", "hidden=[8]"]
    try:
        assert main(args + ["--data-dir", str(tmp_path / "data")]) == 0
        assert "2 clients" in capsys.readouterr().out
        assert main(args + ["--data-dir", str(tmp_path / "nothing")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "dataset 'mnist' not found; looked in:" in err[0], err
        assert str(tmp_path / "nothing" / "mnist") in err[0]
    finally:
        DATASETS.pop("few-digits", None)
