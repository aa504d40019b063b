"""The Shakespeare window datasets: LEAF speakers cut and pooled, and the file-free toy text."""

import gzip
import json

import jax
import numpy as np
import pytest

from fedclust_jax.data.leaf import SHAKESPEARE_CHARS
from fedclust_jax.data.registry import build_dataset


@pytest.fixture(scope="module")
def leaf(tmp_path_factory):
    """shakespeare-leaf/train, test with 3 speakers of 12 / 4 windows (sliding text)."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    text = {f"s{i}": "".join(rng.choice(list("abc de"), 200)) for i in range(3)}
    for split, lo, hi in (("train", 0, 12), ("test", 100, 104)):
        data = {u: {"x": [t[j:j + 80] for j in range(lo, hi)], "y": [t[j + 80] for j in range(lo, hi)]}
                for u, t in text.items()}
        (root / "shakespeare-leaf" / split).mkdir(parents=True)
        with gzip.open(root / "shakespeare-leaf" / split / "d.json.gz", "wt") as f:
            json.dump({"users": list(data), "num_samples": [12] * 3, "user_data": data}, f)
    return str(root)


def test_windows_cut_per_speaker_and_pooled(leaf):
    key = jax.random.key(0)
    full = build_dataset("shakespeare-windows", key, data_dir=leaf)
    cut = build_dataset("shakespeare-windows", key, data_dir=leaf, max_train=5, max_test=2)
    pooled = build_dataset("shakespeare-windows", key, data_dir=leaf, max_train=5, pool=True)
    assert full.num_clients == 3 and np.asarray(full.count).tolist() == [12] * 3
    assert np.asarray(cut.count).tolist() == [5] * 3 and np.asarray(cut.count_test).tolist() == [2] * 3
    np.testing.assert_array_equal(np.asarray(cut.x[1, :5]), np.asarray(full.x[1, :5]))  # the first ones
    assert pooled.num_clients == 1 and int(pooled.count[0]) == 15 and int(pooled.count_test[0]) == 12
    np.testing.assert_array_equal(np.asarray(pooled.y[0, 5:10]), np.asarray(full.y[1, :5]))
    x, y = np.asarray(full.x[0, :12]), np.asarray(full.y[0, :12])
    assert (x[1:, -1] == y[:-1]).all() and (x[1:, :-1] == x[:-1, 1:]).all()  # y: the next token
    two = build_dataset("shakespeare-windows", key, data_dir=leaf, num_clients=2)
    assert two.num_clients == 2
    with pytest.raises(ValueError, match="max_train must be >= 1"):
        build_dataset("shakespeare-windows", key, data_dir=leaf, max_train=0)


def test_toy_text_windows_follow_their_cluster_chain():
    d = build_dataset("toy-text", jax.random.key(1), num_clients=4, num_clusters=2, n=10, n_test=5,
                      length=8)
    assert np.asarray(d.x).shape == (4, 10, 8) and np.asarray(d.y_test).shape == (4, 5)
    assert np.asarray(d.cluster).tolist() == [0, 1, 0, 1] and d.num_classes == len(SHAKESPEARE_CHARS)
    x, y = np.asarray(d.x[0]), np.asarray(d.y[0])
    assert (x[1:, -1] == y[:-1]).all()
    again = build_dataset("toy-text", jax.random.key(1), num_clients=4, num_clusters=2, n=10,
                          n_test=5, length=8)
    np.testing.assert_array_equal(np.asarray(again.x), np.asarray(d.x))
