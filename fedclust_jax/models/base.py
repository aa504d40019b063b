"""A model is a pair of pure functions over plain pytrees, plus its task's loss.

Modules are written with Flax NNX; ``from_nnx`` splits one once into its graph and params
and keeps only the params (a plain nested dict of arrays) for ``jit``, ``vmap`` and ``scan``.

Precision: ``with_dtype(model, "bfloat16")`` stores the params in bf16 (the forward pass
then runs in bf16 on bf16 data); losses and accuracies upcast the outputs to float32 first,
so every loss, metric and gradient reduction that follows is float32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

Params = Any


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


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """init(key) -> params; apply(params, x[n, ...]) -> outputs[n, ...].

    task: "regression" (outputs [n] or [n, 1], squared error (y - f(x))^2 with no 1/2, as
    the IFCA paper) or "classification" (logits [n, C], softmax cross-entropy).
    head: where the head sits in the params: path prefixes, keys joined by "/" (a top-level
    group such as ``"fc2"``, or a deeper path such as ``"layers/1"``, the last layer of
    ``mlp``); a parameter whose path is one of them or lies below one is in the head, every
    other parameter in the body. IFCA's weight sharing keeps K heads on one body.
    ``head_mask(params)`` marks the head's leaves; ``with_head(params, head_from)`` joins
    one tree's body with another's head.
    body_apply(params, x[n, ...]) -> features [n, ...] and head_apply(params, features) ->
    outputs [n, ...]: the forward pass split at the head (None where a model does not
    split), apply(p, x) == head_apply(p, body_apply(p, x)); body_apply reads only the body's
    parameter groups and head_apply only the ``head``'s. Models whose K copies share one
    body then score all K on a batch with one body pass (``core.losses``).
    """

    name: str
    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    task: str
    head: tuple[str, ...] = ()
    body_apply: Callable[[Params, jax.Array], jax.Array] | None = None
    head_apply: Callable[[Params, jax.Array], jax.Array] | None = None

    @property
    def splits(self) -> bool:
        """True when the forward pass splits into ``body_apply`` and ``head_apply``."""
        return self.body_apply is not None and self.head_apply is not None

    def head_mask(self, params: Params):
        """A pytree of bools shaped like ``params`` (one model's, or stacked [K, ...]):
        True on the head's leaves, False on the body's. ValueError (one line) for a model
        that declares no ``head``, or one whose ``head`` names no parameter."""
        if not self.head:
            raise ValueError(f"model {self.name!r} declares no head; give from_nnx(..., "
                             "head=(\"group\",)) the path of its last layer")
        mask = head_mask(params, self.head)
        if not any(jax.tree.leaves(mask)):
            paths = [path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
            raise ValueError(f"model {self.name!r}: head {list(self.head)} names no parameter; "
                             f"its parameters are {paths}")
        return mask

    def with_head(self, params: Params, head_from: Params) -> Params:
        """``params``' body with ``head_from``'s head: each leaf from ``head_from`` where
        ``head_mask`` is True, else from ``params``. The two trees share their structure;
        each leaf is taken whole, so their leading axes must agree where the result is
        applied (both one model's, or both stacked [K, ...])."""
        mask = self.head_mask(params)
        return jax.tree.map(lambda m, b, h: h if m else b, mask, params, head_from)

    def example_losses(self, params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
        """Per-example loss [n] float32 (outputs upcast before the loss)."""
        out = self.apply(params, x).astype(jnp.float32)
        if self.task == "regression":
            return (y - out.reshape(y.shape)) ** 2
        return optax.softmax_cross_entropy_with_integer_labels(out, y)

    def loss(self, params: Params, x: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
        """Mean loss over the real examples (mask bool[n]); 0 where there are none."""
        per = self.example_losses(params, x, y)
        w = mask.astype(per.dtype)
        return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)

    def loss_and_accuracy(self, params, x, y, mask) -> tuple[jax.Array, jax.Array]:
        """(mean loss, mean accuracy) over the real examples, float32; accuracy is 0 for
        regression."""
        return self.outputs_loss_and_accuracy(self.apply(params, x), y, mask)

    def outputs_loss_and_accuracy(self, out, y, mask) -> tuple[jax.Array, jax.Array]:
        """``loss_and_accuracy`` from the outputs [n, ...] already computed."""
        out = out.astype(jnp.float32)
        w = mask.astype(jnp.float32)
        denom = jnp.maximum(jnp.sum(w), 1.0)
        if self.task == "regression":
            per = (y - out.reshape(y.shape)) ** 2
            return jnp.sum(per * w) / denom, jnp.zeros(())
        per = optax.softmax_cross_entropy_with_integer_labels(out, y)
        correct = (jnp.argmax(out, -1) == y).astype(jnp.float32)
        return jnp.sum(per * w) / denom, jnp.sum(correct * w) / denom


def from_nnx(name: str, make: Callable[[nnx.Rngs], nnx.Module], *, task: str,
             head: tuple[str, ...] = ()) -> Model:
    """Wraps an NNX module constructor ``make(rngs)`` as a pure ``Model``.

    Params are the module's ``nnx.Param`` leaves as a pure nested dict; the graph is built
    once here (abstractly, no arrays allocated) and merged back inside ``apply``. A module
    with methods ``features(x)`` (the body's output) and ``from_features(h)`` (the head on
    it), whose ``__call__`` is their composition, gives ``body_apply`` / ``head_apply``.
    ``head``: the path prefixes of the head's parameters (``Model.head``), e.g. ("head",)
    for a module whose last layer is its attribute ``head``.
    """
    module = nnx.eval_shape(lambda: make(nnx.Rngs(0)))
    graphdef, abstract = nnx.split(module)

    def init(key: jax.Array) -> Params:
        return nnx.to_pure_dict(nnx.split(make(nnx.Rngs(key)))[1])

    def merged(params: Params):
        state = jax.tree.map(lambda a: a, abstract)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(graphdef, state)

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return merged(params)(x)

    split = {}
    if callable(getattr(module, "features", None)) and callable(
            getattr(module, "from_features", None)):
        split = dict(body_apply=lambda params, x: merged(params).features(x),
                     head_apply=lambda params, h: merged(params).from_features(h))
    return Model(name=name, init=init, apply=apply, task=task, head=head, **split)


DENSE_INITS = ("flax", "torch")


def torch_uniform(fan_in: int) -> Callable:
    """PyTorch's ``nn.Linear`` default for weights AND biases: U(-1/sqrt(fan_in),
    1/sqrt(fan_in)) (``kaiming_uniform_(a=sqrt(5))`` reduces to this bound for weights).
    A Flax initializer ``(key, shape, dtype) -> array``."""
    bound = 1.0 / float(fan_in) ** 0.5

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def dense_init_kwargs(init: str, fan_in: int) -> dict:
    """``nnx.Linear`` keyword arguments for a named initialisation.

    "flax": Flax's defaults, LeCun-normal weights (truncated normal, variance 1/fan_in) and
    zero biases; "torch": PyTorch's ``nn.Linear`` default (``torch_uniform`` for weights and
    biases; weight variance 1/(3 fan_in), about 0.58x Flax's standard deviation).
    """
    if init not in DENSE_INITS:
        raise ValueError(f"init must be one of {DENSE_INITS}, got {init!r}")
    if init == "flax":
        return {}
    return dict(kernel_init=torch_uniform(fan_in), bias_init=torch_uniform(fan_in))


def cast_floats(tree, dtype):
    """``tree`` with every floating-point leaf cast to ``dtype`` (integer leaves unchanged)."""
    return jax.tree.map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def with_dtype(model, dtype):
    """``model`` whose ``init`` returns params stored as ``dtype`` ("float32" or
    "bfloat16"; the initialisation is drawn in float32 and rounded once). float32 returns
    ``model`` itself. Works for any model dataclass with an ``init`` field."""
    from fedclust_jax.data.federated import check_dtype
    name = check_dtype(dtype)
    if name == "float32":
        return model
    init = model.init
    return dataclasses.replace(model, init=lambda key: cast_floats(init(key), name))


def num_params(params: Params) -> int:
    """Number of scalar parameters in one model's params."""
    return sum(int(a.size) for a in jax.tree.leaves(params))
