"""benchmarks/peers.py without the peers installed: the one line that says what is missing
(exit code 2), the minibatches it exports for the peers (the ones our FedAvg round trains
on: a NumPy SGD on them gives our round's model), the FEMNIST CNN in torch's layout (a NumPy
NCHW forward pass with the exported arrays gives our logits) and the table's agreement
check. Nothing is timed."""

import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
_spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)


def test_missing_peers_is_one_line_and_exit_code_2(tmp_path, capsys):
    bare = tmp_path / "bare-python"        # a Python that sees no site-packages
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    with pytest.raises(SystemExit) as e:
        peers.main(["--quick", "--peer-python", str(bare)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"peers.py: {bare} lacks flwr[simulation], pfl, torch; install the extra "
                   "(pip install -e \".[peers]\") or name a Python that has them with --peer-python"]
    assert peers.missing_peers(str(bare), ["fedclust_jax"]) == []      # ours needs none
    assert peers.missing_peers(str(bare), ["ifca-authors"]) == ["torch"]


def test_exported_minibatches_are_the_ones_our_round_trains_on():
    """One FedAvg round (softmax regression, ragged clients, 3 steps of batch 8) through the
    runner equals plain SGD in NumPy on the exported minibatches, from the same start."""
    from _common import runner_round
    from helpers import ragged_classification

    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.registry import build_model
    data = ragged_classification(6)
    alg = build_algorithm("fedavg", build_model("mlp", data, hidden=()),
                          dict(lr=0.5, steps=3, batch_size=8), data)
    fn, args = runner_round(alg, data, seed=0)
    start = jax.tree.map(lambda a: np.asarray(a[0], np.float64), args[0].params["layers"][0])
    ours = jax.jit(fn)(*args)[0].params["layers"][0]
    idx, mask = peers.fedavg_batches(data, steps=3, batch=8, rounds=1, seed=0)
    assert idx.shape == mask.shape == (1, 6, 3, 8)
    count = np.asarray(data.count)
    np.testing.assert_array_equal(mask[0].sum(-1), np.minimum(count, 8)[:, None].repeat(3, 1))
    assert all((idx[0, i][mask[0, i]] < count[i]).all() for i in range(6))
    x, y = np.asarray(data.x, np.float64), np.asarray(data.y)
    total = {k: 0.0 for k in start}
    for i in range(6):
        w, b = start["kernel"].copy(), start["bias"].copy()
        for s in range(3):
            rows = idx[0, i, s][mask[0, i, s]]
            z = x[i, rows] @ w + b
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(rows)), y[i, rows]] -= 1
            w, b = w - 0.5 * x[i, rows].T @ p / len(rows), b - 0.5 * p.mean(0)
        total["kernel"] += w / 6
        total["bias"] += b / 6
    for k in start:
        np.testing.assert_allclose(np.asarray(ours[k][0]), total[k], rtol=2e-5, atol=2e-6)


def _numpy_conv_nchw(x, w, b):
    """'SAME' 5x5 convolution, x [n, C, H, W], w [O, C, 5, 5] (torch's layout)."""
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(5):
        for j in range(5):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b[None, :, None, None]


def test_cnn_in_torch_layout_gives_our_logits():
    from fedclust_jax.models.cnn import femnist_cnn
    model = femnist_cnn(62, size=12, conv="native")
    params = model.init(jax.random.key(0))
    x = jax.random.uniform(jax.random.key(1), (2, 12, 12, 1))
    t = {k: np.asarray(v, np.float64) for k, v in peers.torch_layout_cnn(params).items()}
    assert t["conv1.weight"].shape == (32, 1, 5, 5) and t["fc1.weight"].shape == (2048, 576)
    pool = lambda a: a.reshape(a.shape[0], a.shape[1], a.shape[2] // 2, 2, a.shape[3] // 2,
                               2).max((3, 5))
    h = pool(np.maximum(_numpy_conv_nchw(np.asarray(x, np.float64).transpose(0, 3, 1, 2),
                                         t["conv1.weight"], t["conv1.bias"]), 0))
    h = pool(np.maximum(_numpy_conv_nchw(h, t["conv2.weight"], t["conv2.bias"]), 0))
    h = np.maximum(h.reshape(2, -1) @ t["fc1.weight"].T + t["fc1.bias"], 0)   # torch's flatten
    logits = h @ t["fc2.weight"].T + t["fc2.bias"]
    np.testing.assert_allclose(logits, np.asarray(model.apply(params, x)), rtol=1e-4, atol=1e-5)


def test_mlp_in_the_authors_layout():
    params = {"layers": {0: {"kernel": jnp.arange(24.).reshape(2, 4, 3), "bias": jnp.ones((2, 3))},
                         1: {"kernel": jnp.ones((2, 3, 5)), "bias": jnp.zeros((2, 5))}}}
    t = peers.torch_layout_mlp(params, 1)
    np.testing.assert_array_equal(t["fc1.weight"], np.arange(12., 24.).reshape(4, 3).T)
    assert t["fc2.weight"].shape == (5, 3) and t["fc1.bias"].shape == (3,)


def test_table_marks_a_peer_outside_the_tolerance():
    rec = lambda loss, s: dict(round_s=[9.0, s, s], startup_s=1.0, loss=loss, threads="t",
                               version="v", layout="l")
    lines, summary = peers.summarize("fedavg-femnist", {
        "fedclust_jax": [rec([4.0, 3.0], 1.0)], "pytorch": [rec([4.0, 3.001], 2.0)],
        "pfl": [rec([4.0, 3.1], 3.0)], "flower": [dict(error="exit 1: boom")]}, 1e-3)
    text = "\n".join(lines)
    assert summary["pytorch"]["agreement"] == pytest.approx(1e-3 / 3)
    assert "(within 0.001)" in text and "(OUTSIDE 0.001)" in text
    assert "| flower | not run |" in text and "pytorch 2.00x; pfl 3.00x" in text
