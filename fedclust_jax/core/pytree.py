"""Small pytree helpers for stacked parameters (leading axis = clients or clusters)."""

from __future__ import annotations

import math

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


def flatten_stacked(tree, dtype=None) -> jax.Array:
    """[L, ...] pytree -> [L, P] matrix (leaves raveled and concatenated in tree order),
    cast to ``dtype`` when given."""
    leaves = jax.tree.leaves(tree)
    flat = [a.reshape(a.shape[0], -1) for a in leaves]
    return jnp.concatenate([f if dtype is None else f.astype(dtype) for f in flat], axis=1)


def unflatten_stacked(matrix: jax.Array, like):
    """Inverse of ``flatten_stacked``: [L, P] -> pytree shaped like ``like`` (any leading
    size; the result has leading axis L) with ``like``'s leaf dtypes."""
    leaves, treedef = jax.tree.flatten(like)
    out, start = [], 0
    for a in leaves:
        size = math.prod(a.shape[1:])
        part = matrix[:, start:start + size]
        out.append(part.reshape((matrix.shape[0],) + a.shape[1:]).astype(a.dtype))
        start += size
    return jax.tree.unflatten(treedef, out)


def sq_norm(tree) -> jax.Array:
    return sum(jnp.sum(a.astype(jnp.float32) ** 2) for a in jax.tree.leaves(tree))
