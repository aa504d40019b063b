"""ResNet9 (Page's DAWNBench network) with BatchNorm, and models that carry state.

BatchNorm statistics are a second pytree ``state`` next to ``params`` (DESIGN section 3):
a ``StatefulModel`` adds ``init_state(key) -> state`` and
``apply_with_state(params, state, x, *, train) -> (outputs, new_state)``. Both are pure, so
stacked ``[N, ...]`` params and states of N clients (or K clusters) go through ``vmap`` /
``lax.map`` and each client keeps its own statistics. ``train=True`` normalises with the
batch's statistics and returns updated running averages; ``train=False`` normalises with
the running averages and returns ``state`` unchanged. The plain ``Model.apply(params, x)``
(what stateless algorithms call) normalises with the batch's statistics and keeps nothing.

Variants (``variant``):
- "page" (default; Page 2018): prep conv_bn(3, 64) -> conv_bn(64, 128) + maxpool 2 +
  Res[2 x conv_bn(128)] -> conv_bn(128, 256) + maxpool 2 -> conv_bn(256, 512) + maxpool 2 +
  Res[2 x conv_bn(512)] -> global max pool -> Linear(512, 10, no bias) -> x 0.125.
  6,573,120 parameters at 10 classes, plus 4,480 BatchNorm statistics in the state.
- "srfca" (the SR-FCA authors' CIFAR code): conv_bn(3, 64) -> conv_bn(64, 128, k5, s2) ->
  Res[2 x conv_bn(128)] -> conv_bn(128, 256) -> maxpool 2 -> Res[2 x conv_bn(256)] ->
  conv_bn(256, 128, k3, no padding) -> global max pool -> Linear(128, 10, no bias) -> x 0.2.
  2,274,880 parameters at 10 classes, plus 2,688 BatchNorm statistics.
conv_bn = conv (no bias) -> BatchNorm (PyTorch's momentum 0.1, i.e. Flax momentum 0.9,
eps 1e-5) -> ReLU. ``width`` scales every channel count (64 * width / 64; tests use small
widths). Parameter counts for 10 classes and width 64 are in ``PARAM_COUNTS``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from fedclust_jax.models.base import Model

State = Any
VARIANTS = ("page", "srfca")
# Trainable parameters (convs, BatchNorm scale/bias, final linear) at 10 classes, width 64.
PARAM_COUNTS = {"page": 6_573_120, "srfca": 2_274_880}


@dataclasses.dataclass(frozen=True, eq=False)
class StatefulModel(Model):
    """A ``Model`` with a state pytree (BatchNorm running statistics).

    init_state(key) -> state; apply_with_state(params, state, x, *, train) -> (out, state).
    """

    init_state: Callable[[jax.Array], State] = None
    apply_with_state: Callable[..., tuple[jax.Array, State]] = None

    def loss_with_state(self, params, state, x, y, mask, *, train: bool = True):
        """(mean loss over real examples, new state): for ``jax.grad(..., has_aux=True)``.

        BatchNorm batch statistics cover every row of ``x`` (padding included) unless the
        caller passes only real examples; the loss itself is masked.
        """
        out, new_state = self.apply_with_state(params, state, x, train=train)
        if self.task == "regression":
            per = (y - out.reshape(y.shape)) ** 2
        else:
            per = optax.softmax_cross_entropy_with_integer_labels(out, y)
        w = mask.astype(per.dtype)
        return (per * w).sum() / jnp.maximum(w.sum(), 1.0), new_state


def from_nnx_stateful(name: str, make: Callable[[nnx.Rngs], nnx.Module], *, task: str,
                      head: tuple[str, ...] = ()) -> StatefulModel:
    """Wraps an NNX module whose ``__call__(x, train)`` uses BatchNorm.

    Params are the ``nnx.Param`` leaves, state the ``nnx.BatchStat`` leaves, both pure dicts;
    the module is merged with ``copy=True`` so ``apply_with_state`` works inside ``jax.grad``.
    """
    graphdef, abs_params, abs_state = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))),
                                                nnx.Param, nnx.BatchStat)

    def split(key):
        _, params, state = nnx.split(make(nnx.Rngs(key)), nnx.Param, nnx.BatchStat)
        return params, state

    def init(key):
        return nnx.to_pure_dict(split(key)[0])

    @jax.jit
    def init_state(key):  # jit: the unused parameter initialisers are dropped, not run
        return nnx.to_pure_dict(split(key)[1])

    def merge(params, state):
        p = jax.tree.map(lambda a: a, abs_params)
        s = jax.tree.map(lambda a: a, abs_state)
        nnx.replace_by_pure_dict(p, params)
        nnx.replace_by_pure_dict(s, state)
        return nnx.merge(graphdef, p, s, copy=True)

    def apply_with_state(params, state, x, *, train: bool):
        module = merge(params, state)
        out = module(x, train=train)
        return out, nnx.to_pure_dict(nnx.state(module, nnx.BatchStat))

    def apply(params, x):
        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                             nnx.to_pure_dict(abs_state))
        return apply_with_state(params, zeros, x, train=True)[0]

    return StatefulModel(name=name, init=init, apply=apply, task=task, head=head,
                         init_state=init_state, apply_with_state=apply_with_state)


class ConvBN(nnx.Module):
    """conv (no bias) -> BatchNorm -> ReLU; x [n, H, W, C_in] -> [n, H', W', C_out]."""

    def __init__(self, c_in, c_out, rngs, kernel=3, stride=1, padding="SAME"):
        self.conv = nnx.Conv(c_in, c_out, (kernel, kernel), strides=stride, padding=padding,
                             use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(c_out, momentum=0.9, epsilon=1e-5, rngs=rngs)

    def __call__(self, x, train):
        return jax.nn.relu(self.bn(self.conv(x), use_running_average=not train))


class Residual(nnx.Module):
    """x + conv_bn(conv_bn(x))."""

    def __init__(self, c, rngs):
        self.a = ConvBN(c, c, rngs)
        self.b = ConvBN(c, c, rngs)

    def __call__(self, x, train):
        return x + self.b(self.a(x, train), train)


def _pool(x):
    return nnx.max_pool(x, (2, 2), strides=(2, 2))


class ResNet9(nnx.Module):
    """x: [n, H, W, C] (32x32x3 for CIFAR-10; any side divisible by 8) -> logits [n, classes]."""

    def __init__(self, num_classes: int, rngs: nnx.Rngs, *, variant: str = "page",
                 width: int = 64, channels: int = 3):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        w = lambda m: max(1, m * width // 64)
        self.variant = variant
        if variant == "page":
            self.scale = 0.125
            self.layers = nnx.List([
                ConvBN(channels, w(64), rngs), ConvBN(w(64), w(128), rngs), "pool",
                Residual(w(128), rngs), ConvBN(w(128), w(256), rngs), "pool",
                ConvBN(w(256), w(512), rngs), "pool", Residual(w(512), rngs)])
            last = w(512)
        else:
            self.scale = 0.2
            self.layers = nnx.List([
                ConvBN(channels, w(64), rngs), ConvBN(w(64), w(128), rngs, kernel=5, stride=2),
                Residual(w(128), rngs), ConvBN(w(128), w(256), rngs), "pool",
                Residual(w(256), rngs), ConvBN(w(256), w(128), rngs, padding="VALID")])
            last = w(128)
        self.linear = nnx.Linear(last, num_classes, use_bias=False, rngs=rngs)

    def __call__(self, x, train: bool = True):
        for layer in self.layers:
            x = _pool(x) if isinstance(layer, str) else layer(x, train)
        x = x.max(axis=(1, 2))
        return self.scale * self.linear(x)


def resnet9(num_classes: int = 10, *, variant: str = "page", width: int = 64,
            channels: int = 3) -> StatefulModel:
    """ResNet9 as a ``StatefulModel``; the final linear layer is the head."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    return from_nnx_stateful(f"resnet9-{variant}",
                             lambda rngs: ResNet9(num_classes, rngs, variant=variant,
                                                  width=width, channels=channels),
                             task="classification", head=("linear",))




def resnet9_for(data, variant: str = "page", width: int = 64) -> StatefulModel:
    """Registry builder: ResNet9 with ``data``'s classes and channels."""
    shape = tuple(data.feature_shape)
    if len(shape) != 3:
        raise ValueError(f"resnet9 needs images [H, W, C], data has features {shape}")
    return resnet9(data.num_classes, channels=shape[-1], variant=variant, width=width)
