"""Small pytree helpers for stacked parameters (leading axis = clients or clusters)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def path_name(path) -> str:
    """'layers/1/kernel' for a key path of dict / sequence / attribute keys."""
    parts = []
    for p in path:
        for attr in ("key", "idx", "name"):
            if hasattr(p, attr):
                parts.append(str(getattr(p, attr)))
                break
    return "/".join(parts)


def head_mask(params, head: tuple[str, ...]):
    """Pytree of bools: True for leaves under one of the ``head`` prefixes."""
    def is_head(path, _):
        name = path_name(path)
        return any(name == h or name.startswith(h + "/") for h in head)
    return jax.tree_util.tree_map_with_path(is_head, params)


def take(tree, idx):
    """Gathers ``idx`` along the leading axis of every leaf."""
    return jax.tree.map(lambda a: a[idx], tree)


def stack(trees):
    return jax.tree.map(lambda *a: jnp.stack(a), *trees)


def flatten_stacked(tree) -> jax.Array:
    """[L, ...] pytree -> [L, P] matrix (leaves raveled and concatenated in tree order)."""
    leaves = jax.tree.leaves(tree)
    return jnp.concatenate([a.reshape(a.shape[0], -1) for a in leaves], axis=1)


def unflatten_stacked(matrix: jax.Array, like):
    """Inverse of ``flatten_stacked``: [L, P] -> pytree shaped like ``like`` with lead L."""
    leaves, treedef = jax.tree.flatten(like)
    out, start = [], 0
    for a in leaves:
        size = a[0].size if a.ndim else 1
        out.append(matrix[:, start:start + size].reshape((matrix.shape[0],) + a.shape[1:]))
        start += size
    return jax.tree.unflatten(treedef, out)


def sq_norm(tree) -> jax.Array:
    return sum(jnp.sum(a.astype(jnp.float32) ** 2) for a in jax.tree.leaves(tree))
