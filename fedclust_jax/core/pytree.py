"""Small pytree helpers for stacked parameters (leading axis = clients or clusters)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from fedclust_jax.models.base import head_mask, path_name  # noqa: F401 (a model's body/head split)


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


def head_only(model, like):
    """(head, take_head) for training only the head on a frozen body: ``head`` is a
    ``Model`` of the ``model.head`` groups alone, whose inputs are the body's features
    [n, F], and ``take_head(params)`` its params (the head leaves of a ``model`` params
    tree, a list), so that ``head.apply(take_head(p), model.body_apply(p, x)) ==
    model.apply(p, x)``. ``like``: a params tree of ``model`` (only shapes are read)."""
    from fedclust_jax.models.base import Model
    if not (model.splits and model.head):
        raise ValueError(f"{model.name} does not split into a body and a head; head_only "
                         "needs a model with body_apply, head_apply and head names")
    mask = jax.tree.leaves(head_mask(like, model.head))
    leaves, treedef = jax.tree.flatten(like)
    shapes = [(a.shape, a.dtype) for a in leaves]

    def take_head(params) -> list:
        return [a for a, m in zip(jax.tree.leaves(params), mask) if m]

    def apply(head_params: list, h: jax.Array) -> jax.Array:
        it = iter(head_params)   # the body's leaves are zeros that head_apply never reads
        full = [next(it) if m else jnp.zeros(s, d) for m, (s, d) in zip(mask, shapes)]
        return model.head_apply(jax.tree.unflatten(treedef, full), h)

    head = Model(name=f"{model.name}-head", init=lambda key: take_head(model.init(key)),
                 apply=apply, task=model.task)
    return head, take_head
