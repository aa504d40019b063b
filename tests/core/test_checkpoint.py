"""Checkpoints: bfloat16 and key leaves round-trip exactly; with several processes each
writes its own shards into alternating slots; a truncated or damaged file is refused in one
line; a failed save keeps the last good file; states split over 8 forced host CPU devices
save and load equal (a subprocess, since the device count is fixed when JAX starts). Two
real processes resuming from their files: tests/core/test_multiprocess.py."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def states():
    return {"params": jnp.arange(6, dtype=jnp.float32).reshape(2, 3).astype(jnp.bfloat16) / 3,
            "assign": jnp.array([[0, 1], [1, 0]], jnp.int32),
            "key": jax.random.split(jax.random.key(3), 2)}


def test_bf16_and_keys_round_trip(tmp_path):
    path = str(tmp_path / "ck.npz")
    s = states()
    checkpoint.save(path, s, {"train_loss": np.ones((2, 3))}, 3, {"a": 1})
    back, history, done = checkpoint.load(path, s, {"a": 1})
    assert done == 3 and history["train_loss"].shape == (2, 3)
    assert back["params"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(back["params"], np.float32),
                                  np.asarray(s["params"], np.float32))
    np.testing.assert_array_equal(back["assign"], s["assign"])
    np.testing.assert_array_equal(jax.random.key_data(back["key"]), jax.random.key_data(s["key"]))


def test_several_processes_write_their_shards_into_alternating_slots(tmp_path, monkeypatch):
    """With two processes each writes only its own shards (here: process 1 of 2, faked), to
    the slot that does not hold its newest round; its file reads back, placed like the
    run's states."""
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    path = str(tmp_path / "ck.npz")
    s = states()
    for r in (1, 2, 3):
        checkpoint.save(path, s, {"train_loss": np.full((2, r), r)}, r, {"a": 1})
    a, b = checkpoint.files(path)
    assert (os.path.basename(a), os.path.basename(b)) == ("ck.p1-of-2.a.npz", "ck.p1-of-2.b.npz")
    assert not os.path.exists(path)
    assert checkpoint.read_meta(a)["rounds_done"] == 3 and checkpoint.read_meta(b)["rounds_done"] == 2
    meta = checkpoint.read_meta(a)
    assert meta["process"] == 1 and meta["process_count"] == 2 and meta["shards"]
    back, history, done = checkpoint.load(a, s, {"a": 1})
    assert done == 3 and history["train_loss"].shape == (2, 3)
    np.testing.assert_array_equal(back["assign"], s["assign"])
    np.testing.assert_array_equal(jax.random.key_data(back["key"]), jax.random.key_data(s["key"]))
    monkeypatch.setattr(jax, "process_index", lambda: 0)     # another process's file
    with pytest.raises(ValueError, match="written by process 1 of 2"):
        checkpoint.load(a, s, {"a": 1})


def test_a_truncated_or_damaged_file_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "ck.npz")
    checkpoint.save(path, states(), {"train_loss": np.ones((2, 3))}, 3, {"a": 1})
    whole = (tmp_path / "ck.npz").read_bytes()
    for cut in (10, len(whole) // 2, len(whole) - 5):
        with open(path, "wb") as f:
            f.write(whole[:cut])
        with pytest.raises(ValueError) as e:
            checkpoint.load(path, states(), {"a": 1})
        assert "not a fedclust_jax checkpoint" in str(e.value) and "\n" not in str(e.value)
    damaged = bytearray(whole)
    damaged[len(whole) // 3] ^= 0xFF                          # inside a member: CRC fails
    with open(path, "wb") as f:
        f.write(bytes(damaged))
    with pytest.raises(ValueError, match="not a fedclust_jax checkpoint"):
        checkpoint.load(path, states(), {"a": 1})


def test_a_failed_save_keeps_the_last_good_file_and_says_so(tmp_path, monkeypatch):
    """Disk full (ENOSPC while writing) and no permission (the rename refused): one line
    naming the file and the round it still holds; no temporary file is left."""
    import errno
    path = str(tmp_path / "ck.npz")
    checkpoint.save(path, states(), {}, 4, {"a": 1})
    real_savez = np.savez

    def full(f, **arrays):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(checkpoint.SaveFailed) as e:
        checkpoint.save(path, states(), {}, 8, {"a": 1})
    assert "No space left on device" in str(e.value) and "still holds round 4" in str(e.value)
    monkeypatch.setattr(np, "savez", real_savez)

    def refused(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(checkpoint.SaveFailed, match="Permission denied.*still holds round 4"):
        checkpoint.save(path, states(), {}, 8, {"a": 1})
    monkeypatch.undo()
    assert checkpoint.read_meta(path)["rounds_done"] == 4
    assert os.listdir(tmp_path) == ["ck.npz"]


def test_another_configuration_is_refused_naming_what_differs(tmp_path):
    path = str(tmp_path / "ck.npz")
    checkpoint.save(path, states(), {}, 2, {"lr": 0.1, "rounds": 4, "data": {"data_dir": "/a"}})
    # rounds may grow and the data may move
    checkpoint.load(path, states(), {"lr": 0.1, "rounds": 9, "data": {"data_dir": "/b"}})
    with pytest.raises(ValueError, match=r"another configuration \(it differs in lr\)"):
        checkpoint.load(path, states(), {"lr": 0.2, "rounds": 4, "data": {}})


def test_states_split_over_8_devices_save_and_load(tmp_path):
    script = textwrap.dedent(f"""
        import json, jax, jax.numpy as jnp, numpy as np
        from fedclust_jax import checkpoint
        from fedclust_jax.core.sharding import client_mesh, shard_state
        mesh = client_mesh()
        s = {{"models": jnp.arange(2 * 16 * 3, dtype=jnp.float32).reshape(2, 16, 3),
              "assign": jnp.arange(32, dtype=jnp.int32).reshape(2, 16) % 4,
              "clusters": jnp.ones((2, 4, 3), jnp.bfloat16)}}
        s = shard_state(s, mesh, 16)
        path = {str(tmp_path / "ck.npz")!r}
        checkpoint.save(path, s, {{}}, 2, {{}})
        back, _, done = checkpoint.load(path, s, {{}})
        same = all(bool(np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)))
                   for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(back)))
        print(json.dumps([jax.device_count(), str(s["models"].sharding.spec), done, same]))
    """)
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               + " --xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    devices, spec, done, same = json.loads(out.stdout.strip().splitlines()[-1])
    assert devices == 8 and "clients" in spec and done == 2 and same
