"""Saving and restoring the runner's state between round chunks (numpy .npz, no pickle).

A checkpoint holds the algorithm states of every restart (one pytree with leading axis R),
the per-round history so far, the number of rounds done and the run's configuration; a run
resumed from it continues with the same keys and so equals the uninterrupted run.
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np


def save(path: str, states, history: dict, rounds_done: int, config: dict):
    """Writes atomically (a temporary file renamed over ``path``)."""
    leaves = jax.tree.leaves(states)
    arrays = {f"state_{i}": np.asarray(jax.random.key_data(a) if _is_key(a) else a)
              for i, a in enumerate(leaves)}
    arrays.update({f"history_{k}": np.asarray(v) for k, v in history.items()})
    meta = {"rounds_done": rounds_done, "config": config,
            "keys": [i for i, a in enumerate(leaves) if _is_key(a)]}
    tmp = path + ".tmp.npz"
    np.savez(tmp, meta=np.frombuffer(json.dumps(meta, default=str).encode(), np.uint8), **arrays)
    os.replace(tmp, path)


def load(path: str, like_states, config: dict):
    """(states shaped like ``like_states``, history, rounds_done); errors if the checkpoint
    belongs to another configuration."""
    with np.load(path) as f:
        meta = json.loads(bytes(f["meta"]).decode())
        saved = {k: v for k, v in meta["config"].items() if k != "rounds"}
        wanted = {k: v for k, v in json.loads(json.dumps(config, default=str)).items() if k != "rounds"}
        if saved != wanted:
            raise ValueError(f"checkpoint {path} was written by another configuration; "
                             "remove it or choose another checkpoint path")
        leaves, treedef = jax.tree.flatten(like_states)
        restored = []
        for i, like in enumerate(leaves):
            a = f[f"state_{i}"]
            restored.append(jax.random.wrap_key_data(a) if i in meta["keys"] else jax.numpy.asarray(a, like.dtype))
        history = {k[len("history_"):]: f[k] for k in f.files if k.startswith("history_")}
    return jax.tree.unflatten(treedef, restored), history, int(meta["rounds_done"])


def _is_key(a) -> bool:
    return hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
