"""ResNet9 (Page's DAWNBench network) with BatchNorm, and models that carry state.

BatchNorm statistics are a second pytree ``state`` next to ``params``, with the same leading
client or cluster axes, so ``jit``, ``vmap`` and ``scan`` see plain pytrees only:
a ``StatefulModel`` adds ``init_state(key) -> state`` and
``apply_with_state(params, state, x, *, train, mask=None) -> (outputs, new_state)``. Both
are pure, so stacked ``[N, ...]`` params and states of N clients (or K clusters) go through
``vmap`` / ``lax.map`` and each client keeps its own statistics. ``train=True`` normalises
with the batch's statistics and returns updated running averages; ``train=False``
normalises with the running averages and returns ``state`` unchanged.

Batch statistics cover only the real rows: ``mask`` bool[n] (the loss mask: padding and the
wrapped-around repeats of a small client's minibatch are False) selects the rows whose mean
and variance normalise the batch and update the running averages. The stateless entry
points that carry a mask (``loss``, ``loss_and_accuracy``, what the algorithms call) use it;
``apply(params, x)`` and ``example_losses`` treat every row as real. Without a carried state
they normalise with the batch's statistics and keep nothing.

Carrying the state through training: FedAvg, Local and IFCA (both options, with or without
weight sharing, the oracle included) carry it; every other algorithm refuses a
``StatefulModel`` before compute with one line (``config_check.check_model_state``). The algorithm state
holds ``model_state`` with the leading axes of its ``params``: FedAvg one model's
statistics, Local [N, ...] (one set per client), IFCA [K, ...] (one per cluster); each leaf
is a BatchNorm mean or variance [C] (4,480 floats per model for "page" at width 64).
``core.train.local_train(..., state=s)`` takes every step as
``(g, s) = jax.grad(loss_with_state, has_aux=True)(p, s, xb, yb, m)`` (batch statistics of
the minibatch's real rows, running averages updated) and returns (params, statistics after
the last step); IFCA option I's ``client_gradient(..., state=s)`` takes its one gradient
pass the same way. The server averages the statistics with the same weights over the same
members as the params: s_j <- sum_i w_i s_i / sum_i w_i over cluster j's participants
(streamed as per-cluster sums of the deltas s_i - s_j, [K, S] next to the params' [K, P],
``core.train.cluster_pass``); with IFCA weight sharing the body's statistics are averaged
over all participants like the body's params (``algorithms.ifca``); an empty cluster keeps
its statistics. Every loss that
scores a model (IFCA's cluster choice, ``objective``, ``evaluate``) uses its running
statistics: ``running_view(model, params, state)`` is a stateless ``Model`` over
{"params", "state"} whose ``apply`` is ``apply_with_state(..., train=False)``. The
statistics start at ``init_state`` (mean 0, variance 1).

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
``conv``: "native", "patches" (im2col convolutions and slice-maximum pooling, fast inside XLA
CPU loop bodies; ``models.layers``) or "auto" (patches on the CPU backend; the default).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from fedclust_jax.models.base import Model
from fedclust_jax.models.layers import max_pool, patches_conv, resolve_conv
from fedclust_jax.bounds import Size

State = Any
VARIANTS = ("page", "srfca")
# Trainable parameters (convs, BatchNorm scale/bias, final linear) at 10 classes, width 64.
PARAM_COUNTS = {"page": 6_573_120, "srfca": 2_274_880}


@dataclasses.dataclass(frozen=True, eq=False)
class StatefulModel(Model):
    """A ``Model`` with a state pytree (BatchNorm running statistics).

    init_state(key) -> state; apply_with_state(params, state, x, *, train) -> (out, state).
    body_running(params, state, x) -> features and head_running(params, state, features) ->
    outputs: the forward pass with the running statistics (train=False) split at the head
    (None where the module does not split); ``running_view`` gives them to its view.
    """

    init_state: Callable[[jax.Array], State] = None
    apply_with_state: Callable[..., tuple[jax.Array, State]] = None
    body_running: Callable | None = None
    head_running: Callable | None = None

    def loss_with_state(self, params, state, x, y, mask, *, train: bool = True):
        """(mean loss over real examples, new state): for ``jax.grad(..., has_aux=True)``.
        With ``train`` the batch statistics (and the running-average update) cover only the
        rows where ``mask`` bool[n] is True."""
        out, new_state = self.apply_with_state(params, state, x, train=train, mask=mask)
        return self._masked_mean(self._per_example(out, y), mask), new_state

    def _per_example(self, out, y):
        out = out.astype(jnp.float32)   # float32 losses under bf16 params
        if self.task == "regression":
            return (y - out.reshape(y.shape)) ** 2
        return optax.softmax_cross_entropy_with_integer_labels(out, y)

    @staticmethod
    def _masked_mean(per, mask):
        w = mask.astype(per.dtype)
        return (per * w).sum() / jnp.maximum(w.sum(), 1.0)

    def loss(self, params, x, y, mask):
        """Mean loss over the real examples, normalised with the batch statistics of the
        real rows only (``mask``), no state kept."""
        out = self.apply_masked(params, x, mask)
        return self._masked_mean(self._per_example(out, y), mask)

    def loss_and_accuracy(self, params, x, y, mask):
        """(mean loss, mean accuracy) over the real examples, batch statistics of the real
        rows only; accuracy is 0 for regression."""
        out = self.apply_masked(params, x, mask)
        loss = self._masked_mean(self._per_example(out, y), mask)
        if self.task == "regression":
            return loss, jnp.zeros(())
        correct = (jnp.argmax(out, -1) == y).astype(jnp.float32)
        return loss, self._masked_mean(correct, mask)

    def apply_masked(self, params, x, mask):
        """Outputs [n, ...] normalised with the batch statistics of the rows where ``mask``
        is True (a fresh state; nothing kept)."""
        state = jax.tree.map(jnp.zeros_like, jax.eval_shape(self.init_state, jax.random.key(0)))
        return self.apply_with_state(params, state, x, train=True, mask=mask)[0]


def is_stateful(model) -> bool:
    """True for a model with a state pytree (BatchNorm statistics) that training must carry."""
    return isinstance(model, StatefulModel)


def running_view(model, params, state):
    """(model, params) that score with the running statistics.

    state None (a stateless model): ``(model, params)`` unchanged. Otherwise a stateless
    ``Model`` whose params are {"params": params, "state": state} (both with the same
    leading axes, e.g. [K, ...]) and whose ``apply`` is ``apply_with_state(..., train=False)``:
    any loss routine (``core.losses``, ``evaluate_clusters``) then scores the model with its
    running statistics, as it is served; the mask only weights the loss. A model with
    ``body_running`` / ``head_running`` gives a view that splits at the head (``Model.splits``)."""
    if state is None:
        return model, params

    def apply(variables, x):
        return model.apply_with_state(variables["params"], variables["state"], x, train=False)[0]

    def init(key):
        return {"params": model.init(key), "state": model.init_state(key)}

    split = {}
    if model.body_running is not None and model.head_running is not None:
        split = dict(body_apply=lambda v, x: model.body_running(v["params"], v["state"], x),
                     head_apply=lambda v, h: model.head_running(v["params"], v["state"], h))
    view = Model(name=f"{model.name}-running", init=init, apply=apply, task=model.task,
                 head=model.head, **split)
    return view, {"params": params, "state": state}


def from_nnx_stateful(name: str, make: Callable[[nnx.Rngs], nnx.Module], *, task: str,
                      head: tuple[str, ...] = ()) -> StatefulModel:
    """Wraps an NNX module whose ``__call__(x, train, mask)`` uses BatchNorm; a module with
    ``features(x, train, mask)`` and ``from_features(h, train, mask)`` (``__call__`` their
    composition) gives ``body_running`` / ``head_running``.

    Params are the ``nnx.Param`` leaves, state the ``nnx.BatchStat`` leaves, both pure dicts;
    the module is merged with ``copy=True`` so ``apply_with_state`` works inside ``jax.grad``.
    """
    module = nnx.eval_shape(lambda: make(nnx.Rngs(0)))
    graphdef, abs_params, abs_state = nnx.split(module, nnx.Param, nnx.BatchStat)

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

    def apply_with_state(params, state, x, *, train: bool, mask=None):
        module = merge(params, state)
        out = module(x, train=train, mask=mask)
        return out, nnx.to_pure_dict(nnx.state(module, nnx.BatchStat))

    def apply(params, x):
        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                             nnx.to_pure_dict(abs_state))
        return apply_with_state(params, zeros, x, train=True)[0]  # every row real

    running = {}
    if callable(getattr(module, "features", None)) and callable(
            getattr(module, "from_features", None)):
        running = dict(
            body_running=lambda params, state, x: merge(params, state).features(x, train=False),
            head_running=lambda params, state, h: merge(params, state).from_features(
                h, train=False))
    return StatefulModel(name=name, init=init, apply=apply, task=task, head=head,
                         init_state=init_state, apply_with_state=apply_with_state, **running)


class ConvBN(nnx.Module):
    """conv (no bias) -> BatchNorm -> ReLU; x [n, H, W, C_in] -> [n, H', W', C_out]."""

    def __init__(self, c_in, c_out, rngs, kernel=3, stride=1, padding="SAME", conv="native"):
        kw = {"conv_general_dilated": patches_conv} if conv == "patches" else {}
        self.conv = nnx.Conv(c_in, c_out, (kernel, kernel), strides=stride, padding=padding,
                             use_bias=False, rngs=rngs, **kw)
        self.bn = nnx.BatchNorm(c_out, momentum=0.9, epsilon=1e-5, rngs=rngs)

    def __call__(self, x, train, mask=None):
        """mask: None (every row real) or bool [n, 1, 1, 1]: the rows of the statistics."""
        return jax.nn.relu(self.bn(self.conv(x), use_running_average=not train, mask=mask))


class Residual(nnx.Module):
    """x + conv_bn(conv_bn(x))."""

    def __init__(self, c, rngs, conv="native"):
        self.a = ConvBN(c, c, rngs, conv=conv)
        self.b = ConvBN(c, c, rngs, conv=conv)

    def __call__(self, x, train, mask=None):
        return x + self.b(self.a(x, train, mask), train, mask)


class ResNet9(nnx.Module):
    """x: [n, H, W, C] (32x32x3 for CIFAR-10; any side divisible by 8) -> logits [n, classes]."""

    def __init__(self, num_classes: int, rngs: nnx.Rngs, *, variant: str = "page",
                 width: int = 64, channels: int = 3, conv: str = "native"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        w = lambda m: max(1, m * width // 64)
        self.variant, self.impl = variant, resolve_conv(conv)
        cb = lambda *a, **k: ConvBN(*a, rngs=rngs, conv=self.impl, **k)
        res = lambda c: Residual(c, rngs, conv=self.impl)
        if variant == "page":
            self.scale = 0.125
            self.layers = nnx.List([
                cb(channels, w(64)), cb(w(64), w(128)), "pool",
                res(w(128)), cb(w(128), w(256)), "pool",
                cb(w(256), w(512)), "pool", res(w(512))])
            last = w(512)
        else:
            self.scale = 0.2
            self.layers = nnx.List([
                cb(channels, w(64)), cb(w(64), w(128), kernel=5, stride=2),
                res(w(128)), cb(w(128), w(256)), "pool",
                res(w(256)), cb(w(256), w(128), padding="VALID")])
            last = w(128)
        self.linear = nnx.Linear(last, num_classes, use_bias=False, rngs=rngs)

    def features(self, x, train: bool = True, mask=None):
        """The body (everything below the final linear layer) -> [n, channels]."""
        bmask = None
        if mask is not None:  # no real row (an empty client): every row, so nothing is NaN
            bmask = jnp.asarray(mask, bool).reshape(-1, 1, 1, 1)
            bmask = bmask | ~bmask.any()
        for layer in self.layers:
            if isinstance(layer, str):
                x = max_pool(x, (2, 2), (2, 2), impl=self.impl)
            else:
                x = layer(x, train, bmask)
        return x.max(axis=(1, 2))

    def from_features(self, h, train: bool = True, mask=None):
        """The head (final linear layer, scaled; no statistics) on the body's features."""
        return self.scale * self.linear(h)

    def __call__(self, x, train: bool = True, mask=None):
        """mask: None or bool [n]: the rows whose batch statistics normalise the batch."""
        return self.from_features(self.features(x, train, mask), train, mask)


def resnet9(num_classes: int = 10, *, variant: str = "page", width: int = 64,
            channels: int = 3, conv: str = "auto") -> StatefulModel:
    """ResNet9 as a ``StatefulModel``; the final linear layer is the head.
    conv: "auto" | "native" | "patches" (``models.layers``; auto = patches on CPU)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    impl = resolve_conv(conv)
    return from_nnx_stateful(f"resnet9-{variant}",
                             lambda rngs: ResNet9(num_classes, rngs, variant=variant,
                                                  width=width, channels=channels, conv=impl),
                             task="classification", head=("linear",))


def resnet9_for(data, variant: str = "page", width: Size = 64,
                conv: str = "auto") -> StatefulModel:
    """ResNet9 with BatchNorm (the SR-FCA CIFAR-10 model) for ``data``'s classes and
    channels.

    variant: "page" (Page 2018's ResNet9) or "srfca" (the SR-FCA authors' code);
    width: channels of the first block (64 in both variants; every count scales with it);
    conv: how convolutions run, "auto" (chosen per backend), "native" or "patches"
    (``models.layers``)."""
    shape = tuple(data.feature_shape)
    if len(shape) != 3:
        raise ValueError(f"resnet9 needs images [H, W, C], data has features {shape}")
    return resnet9(data.num_classes, channels=shape[-1], variant=variant, width=width,
                   conv=conv)


resnet9_for.stateful = True   # the registry's models that keep state (config_check)
