"""Saving and restoring the runner's state between round chunks (numpy .npz, no pickle).

A checkpoint holds the algorithm states of every restart (one pytree with leading axis R),
the per-round history so far, the number of rounds done and the run's configuration; a run
resumed from it continues with the same keys and so equals the uninterrupted run. It imports
``core.sharding`` (the host gather), so it sits at core's layer (tests/test_layers.py).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np


def save(path: str, states, history: dict, rounds_done: int, config: dict):
    """Writes atomically (a temporary file renamed over ``path``).

    Several processes: every process calls ``save`` together; the states are gathered to
    the host first (``core.sharding.to_host``, an all-gather of arrays split over other
    processes' devices) and only process 0 writes. bfloat16 leaves are stored as float32
    (exact) and cast back by ``load``.
    """
    from fedclust_jax.core.sharding import to_host
    leaves = jax.tree.leaves(states)
    keys = [i for i, a in enumerate(leaves) if _is_key(a)]
    host = to_host([jax.random.key_data(a) if _is_key(a) else a for i, a in enumerate(leaves)])
    if jax.process_index() != 0:
        return
    arrays = {f"state_{i}": _storable(a) for i, a in enumerate(host)}
    arrays.update({f"history_{k}": np.asarray(v) for k, v in history.items()})
    meta = {"rounds_done": rounds_done, "config": config,
            "keys": keys}
    tmp = path + ".tmp.npz"
    np.savez(tmp, meta=np.frombuffer(json.dumps(meta, default=str).encode(), np.uint8), **arrays)
    os.replace(tmp, path)


def load(path: str, like_states, config: dict):
    """(states shaped like ``like_states``, history, rounds_done); errors if the checkpoint
    belongs to another configuration. Several processes: each reads the whole file, and the
    runner places the states on the mesh (``jax.device_put`` with their shardings), so each
    process keeps its own clients' shards."""
    with _open(path) as f:
        meta = _meta(path, f)
        saved = {k: v for k, v in meta["config"].items() if k != "rounds"}
        wanted = {k: v for k, v in json.loads(json.dumps(config, default=str)).items() if k != "rounds"}
        if saved != wanted:
            raise ValueError(f"checkpoint {path} was written by another configuration; "
                             "remove it or choose another checkpoint path")
        leaves, treedef = jax.tree.flatten(like_states)
        restored = []
        missing = [f"state_{i}" for i in range(len(leaves)) if f"state_{i}" not in f.files]
        if missing:
            raise not_a_checkpoint(path, f"it lacks {missing[0]} of this run's state")
        for i, like in enumerate(leaves):
            a = f[f"state_{i}"]
            restored.append(jax.random.wrap_key_data(a) if i in meta["keys"] else jax.numpy.asarray(a, like.dtype))
        history = {k[len("history_"):]: f[k] for k in f.files if k.startswith("history_")}
    return jax.tree.unflatten(treedef, restored), history, int(meta["rounds_done"])


def not_a_checkpoint(path: str, why: str) -> ValueError:
    """The one-line refusal of a file that is not a fedclust_jax checkpoint."""
    return ValueError(f"checkpoint {path!r} is not a fedclust_jax checkpoint ({why}); to start "
                      f"afresh remove it or give --checkpoint another path")


def _open(path: str):
    """``np.load`` of a checkpoint without pickle; any other file is ``not_a_checkpoint``."""
    import zipfile
    try:
        f = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        if isinstance(e, (PermissionError, IsADirectoryError)):
            raise ValueError(f"checkpoint {path!r} cannot be read ({e.strerror or e})") from None
        raise not_a_checkpoint(path, "not an .npz archive") from None
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise not_a_checkpoint(path, "a single .npy array, not an .npz archive")
    return f


def _meta(path: str, f) -> dict:
    """The checkpoint's header (rounds_done, config, keys), checked."""
    if "meta" not in f.files:
        raise not_a_checkpoint(path, "an .npz archive without its header")
    try:
        meta = json.loads(bytes(f["meta"]).decode())
    except (ValueError, UnicodeDecodeError, OSError):
        raise not_a_checkpoint(path, "its header is unreadable") from None
    if (not isinstance(meta, dict) or not isinstance(meta.get("rounds_done"), int)
            or not isinstance(meta.get("config"), dict) or not isinstance(meta.get("keys"), list)):
        raise not_a_checkpoint(path, "its header lacks rounds_done, config or keys")
    return meta


def read_meta(path: str) -> dict:
    """The header of the checkpoint at ``path``: {"rounds_done": int, "config": dict,
    "keys": list}; ValueError (one line, ``not_a_checkpoint``) for any other file, read
    without pickle."""
    with _open(path) as f:
        return _meta(path, f)


def _storable(a) -> np.ndarray:
    """``a`` as numpy in a dtype .npz reads back without pickle (bfloat16 -> float32)."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def _is_key(a) -> bool:
    return hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
