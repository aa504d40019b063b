"""benchmarks/peers.py without the peers installed: the one line that says what is missing
(exit code 2), the minibatches it exports for the peers (the ones our FedAvg round trains
on: a NumPy SGD on them gives our round's model), the FEMNIST CNN in torch's layout and the
MLP in torch's and Haiku's (NumPy forward passes with the exported arrays give our logits),
the many-clients workload's exported bytes, a child stopped at its time limit, the table's
agreement check, the table against m and its plot, and a --quick run of ours alone. Nothing
is timed."""

import importlib.util
import json
import pathlib
import sys
import time

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
                   "(pip install -e \".[peers]\") or name a Python that has them with --peer-python"
                   + (f"; {sys.executable} lacks dm-haiku, fedjax; make FedJAX's own Python "
                      "(benchmarks/README.md, \"Peers\") and name it with --fedjax-python"
                      if importlib.util.find_spec("fedjax") is None else "")]
    assert peers.missing_peers(str(bare), ["fedclust_jax"]) == []      # ours needs none
    assert peers.missing_peers(str(bare), ["ifca-authors"]) == ["torch"]
    assert peers.missing_peers(str(bare), ["fedjax"]) == ["dm-haiku", "fedjax"]


def test_fedavg_mnist_without_fedjax_is_one_line_and_exit_code_2(tmp_path, capsys):
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    with pytest.raises(SystemExit) as e:
        peers.main(["--quick", "--workloads", "fedavg-mnist", "--frameworks", "fedclust_jax",
                    "fedjax", "--peer-python", str(bare), "--fedjax-python", str(bare)])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"peers.py: {bare} lacks dm-haiku, fedjax; make FedJAX's own Python "
        "(benchmarks/README.md, \"Peers\") and name it with --fedjax-python"]


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


def test_mnist_workload_exports_bytes_and_the_mlp_in_torch_and_haiku_layouts(tmp_path):
    """fedavg-mnist at --quick size: every client's exported bytes read (b / 255) as our
    client's images, and the MLP's initial params in torch's and Haiku's layouts give our
    logits on them; the minibatches cover every client's real examples only."""
    (case, workload, s), = peers.cases(["fedavg-mnist"], quick=True, clients=[6])
    assert case == "fedavg-mnist-m6" and s["clients"] == 6
    spec = peers.export(workload, True, None, 2, str(tmp_path), s)
    assert spec["clients"] == 6 and spec["ours_params"]["batch_size"] == s["batch"]
    x, y = np.load(tmp_path / "x.npy"), np.load(tmp_path / "y.npy")
    idx, mask = np.load(tmp_path / "idx.npy"), np.load(tmp_path / "mask.npy")
    assert x.dtype == np.uint8 and x.shape == (6, s["n"], 784) and y.shape == (6, s["n"])
    assert idx.shape == mask.shape == (2, 6, s["steps"], s["batch"]) and mask.all()
    _, data, alg, init = peers.our_setup(workload, True, None, s)
    values = peers.byte_values()
    np.testing.assert_array_equal(values[x], np.asarray(data.x))
    logits = np.asarray(alg.model.apply(init, data.x[0]), np.float64)
    t = {k: np.asarray(v, np.float64) for k, v in np.load(tmp_path / "init.npz").items()}
    h = np.maximum(values[x[0]] @ t["fc1.weight"].T + t["fc1.bias"], 0)
    np.testing.assert_allclose(h @ t["fc2.weight"].T + t["fc2.bias"], logits, rtol=1e-4, atol=1e-5)
    hk = {k: np.asarray(v, np.float64) for k, v in np.load(tmp_path / "init_haiku.npz").items()}
    assert sorted(hk) == ["fc1/b", "fc1/w", "fc2/b", "fc2/w"]
    h = np.maximum(values[x[0]] @ hk["fc1/w"] + hk["fc1/b"], 0)
    np.testing.assert_allclose(h @ hk["fc2/w"] + hk["fc2/b"], logits, rtol=1e-4, atol=1e-5)


def test_cnn_in_haiku_layout_keeps_our_arrays():
    from fedclust_jax.models.cnn import femnist_cnn
    params = femnist_cnn(62, size=12, conv="native").init(jax.random.key(0))
    hk = peers.haiku_layout(params, "fedavg-femnist")
    assert sorted(hk) == sorted(f"{m}/{p}" for m in ("conv1", "conv2", "fc1", "fc2") for p in "wb")
    np.testing.assert_array_equal(hk["conv2/w"], np.asarray(params["conv2"]["kernel"]))  # HWIO
    np.testing.assert_array_equal(hk["fc1/w"], np.asarray(params["fc1"]["kernel"]))      # (h, w, c)


def test_a_child_past_its_round_limit_is_stopped_with_what_it_started(tmp_path):
    """A 'Python' that reports start-up and one round, then starts a grandchild and hangs:
    stopped at the round limit, recorded as a timeout, the grandchild gone too."""
    pidfile = tmp_path / "grandchild.pid"
    fake = tmp_path / "slow-python"
    fake.write_text(f"""#!{sys.executable}
import json, subprocess, sys, time
print(json.dumps({{"peers_mark": 1}}), flush=True)
print(json.dumps({{"peers_mark": 2}}), flush=True)
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
open({str(pidfile)!r}, "w").write(str(p.pid))
time.sleep(60)
""")
    fake.chmod(0o755)
    args = peers.argparse.Namespace(peer_python=str(fake), fedjax_python=str(fake), threads=1,
                                    startup_limit=30.0, round_limit=1.5)
    t0 = time.perf_counter()
    rec = peers.run_child(args, "pytorch", str(tmp_path))
    assert time.perf_counter() - t0 < 20
    assert rec["timeout_s"] == 1.5 and rec["rounds_done"] == 1 and rec["phase"] == "round 2"
    pid = int(pidfile.read_text())
    for _ in range(50):                        # killed: gone, or a zombie awaiting its reaper
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"grandchild {pid} still running")
    lines, summary = peers.summarize("fedavg-mnist-m10", {"pytorch": [rec]}, 1e-3)
    assert summary["pytorch"]["seconds_per_round"] is None and summary["pytorch"]["timeout_s"] == 1.5
    assert "| pytorch | > 1.5 |" in "\n".join(lines)


def test_table_against_m_the_speedup_and_the_plot(tmp_path):
    rec = lambda s: dict(round_s=[9.0, s, s], startup_s=1.0, loss=[2.0, 1.0], threads="t",  # noqa: E731
                         version="v", layout="l")
    stopped = dict(timeout_s=120.0, rounds_done=0, phase="round 1", error="stopped")
    runs = {100: {"fedclust_jax": [rec(0.5)], "pytorch-1t": [rec(0.4)], "fedjax": [rec(0.6)]},
            1000: {"fedclust_jax": [rec(1.0)], "pytorch-1t": [rec(4.0)], "fedjax": [stopped]},
            10000: {"fedclust_jax": [rec(8.0)], "pytorch-1t": [stopped], "fedjax": [stopped]}}
    summaries = {f"fedavg-mnist-m{m}": peers.summarize("fedavg-mnist", r, 1e-3)[1]
                 for m, r in runs.items()}
    assert peers.speedup(summaries["fedavg-mnist-m100"]) == (pytest.approx(0.8), "pytorch-1t", False)
    assert peers.speedup(summaries["fedavg-mnist-m1000"]) == (pytest.approx(4.0), "pytorch-1t", False)
    assert peers.speedup(summaries["fedavg-mnist-m10000"]) == (pytest.approx(15.0), "pytorch-1t", True)
    text = "\n".join(peers.scale_table(summaries))
    assert "| framework | m = 100 | m = 1,000 | m = 10,000 |" in text
    assert "| fedjax | 0.60 | > 120 | > 120 |" in text
    assert "| ours' speed-up over the fastest peer | 0.80x (pytorch-1t) | 4.00x (pytorch-1t) | " \
           ">= 15.00x (pytorch-1t) |" in text
    pytest.importorskip("matplotlib")
    peers.scale_plot(summaries, str(tmp_path / "scale.png"))
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_run_of_ours_alone_writes_the_cases_table_and_plot(tmp_path, capsys):
    """--quick of the many-clients workload with ours only (no peer needed): its summary key,
    the table against m, the plot."""
    pytest.importorskip("matplotlib")
    out = peers.main(["--quick", "--workloads", "fedavg-mnist", "--frameworks", "fedclust_jax",
                      "--clients", "4", "--rounds", "2", "--json", str(tmp_path / "p.json"),
                      "--plot", str(tmp_path / "p.png")])
    assert sorted(out) == ["fedavg-mnist-m4"]
    for case in out.values():
        ours = case["fedclust_jax"]
        assert ours["seconds_per_round"] > 0 and len(ours["loss"]) == 2, ours
    record = json.loads((tmp_path / "p.json").read_text())
    assert sorted(record["summary"]) == sorted(out) and record["round_limit_s"] == 120.0
    assert "| framework | m = 4 |" in capsys.readouterr().out
    assert (tmp_path / "p.png").stat().st_size > 1000
