"""Checkpoints: bfloat16 and key leaves round-trip exactly; the states are gathered to the
host (``core.sharding.to_host``) and only process 0 writes; states split over 8 forced host
CPU devices save and load equal (a subprocess, since the device count is fixed when JAX
starts). Two real processes writing one checkpoint: tests/core/test_multiprocess.py."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import checkpoint
from fedclust_jax.core import sharding

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


def test_gathers_then_only_process_zero_writes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(sharding, "to_host", lambda tree: calls.append(1) or
                        jax.tree.map(np.asarray, tree))
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    path = str(tmp_path / "ck.npz")
    checkpoint.save(path, states(), {}, 1, {})
    assert calls == [1] and not os.path.exists(path)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    checkpoint.save(path, states(), {}, 1, {})
    assert calls == [1, 1] and os.path.exists(path)


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
