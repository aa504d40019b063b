"""RotNet (Gidaris et al. 2018) for 28x28 grey images: an AlexNet-style net that predicts
which of four rotations (0, 90, 180, 270 degrees) an image shows, and whose last
convolutional layer gives the representations UIFCA clusters ([T] 4.3, "Cluster
representations": "we use Alexnet and extract activations from last convolutional layer").

Architecture (AlexNet's five convolutions and three fully connected layers, with the
strides and widths shrunk for 28x28x1 inputs; [T] does not give them), default widths
``channels = (16, 32, 48, 48, 32)``:

    conv1 5x5 c1 (SAME) -> ReLU -> maxpool 2/2      28 -> 14
    conv2 5x5 c2 (SAME) -> ReLU -> maxpool 2/2      14 -> 7
    conv3 3x3 c3 -> ReLU;  conv4 3x3 c4 -> ReLU;  conv5 3x3 c5 -> ReLU   (7x7, SAME)
    pool5: maxpool 3/2 (VALID, AlexNet's overlapping pool)              7 -> 3
    fc1 9 c5 -> hidden -> ReLU;  fc2 hidden -> hidden -> ReLU;  fc3 hidden -> 4 logits

With the defaults and hidden = 128: 115,780 parameters. ``features`` returns the last
convolutional layer's activations (after conv5's ReLU) pooled by pool5 and flattened,
F = 3 * 3 * c5 = 288 (``pool=False``: the unpooled 7 * 7 * c5 = 1,568).

Rotation of an image [H, W] by r quarter turns is ``jnp.rot90(x, r)`` (counter-clockwise,
the same map as ``np.rot90`` on [n, H, W] with ``axes=(1, 2)``), label r.
``pretrain_rotnet`` trains centrally on every image at all four rotations (Adam,
shuffled minibatches, one jitted step per minibatch).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from fedclust_jax.models.base import Model, Params

NUM_ROTATIONS = 4


def max_pool2(x):
    """2x2 / stride 2 max pool of [n, H, W, C] (H, W even) by a reshape: the same values as
    ``nnx.max_pool(x, (2, 2), strides=(2, 2))``, and its gradient is several times faster
    on XLA's CPU backend than the windowed pool's select-and-scatter."""
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def _as_images(x, size):
    """[n, size, size], [n, size, size, 1] or [n, size^2] -> [n, size, size, 1]."""
    return x.reshape(x.shape[0], size, size, 1)


class RotNet(nnx.Module):
    """x: [n, size, size] (or [n, size, size, 1], [n, size^2]) -> rotation logits [n, 4];
    ``features(x)`` -> [n, F] last-conv activations (module docstring)."""

    def __init__(self, rngs: nnx.Rngs, channels=(16, 32, 48, 48, 32), hidden: int = 128,
                 size: int = 28):
        c1, c2, c3, c4, c5 = channels
        self.size = size
        self.conv1 = nnx.Conv(1, c1, (5, 5), padding="SAME", rngs=rngs)
        self.conv2 = nnx.Conv(c1, c2, (5, 5), padding="SAME", rngs=rngs)
        self.conv3 = nnx.Conv(c2, c3, (3, 3), padding="SAME", rngs=rngs)
        self.conv4 = nnx.Conv(c3, c4, (3, 3), padding="SAME", rngs=rngs)
        self.conv5 = nnx.Conv(c4, c5, (3, 3), padding="SAME", rngs=rngs)
        side = pooled_side(size)
        self.fc1 = nnx.Linear(side * side * c5, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.fc3 = nnx.Linear(hidden, NUM_ROTATIONS, rngs=rngs)

    def last_conv(self, x):
        """[n, size/4, size/4, c5] activations of conv5 (after its ReLU)."""
        x = _as_images(x, self.size)
        x = max_pool2(jax.nn.relu(self.conv1(x)))
        x = max_pool2(jax.nn.relu(self.conv2(x)))
        x = jax.nn.relu(self.conv3(x))
        x = jax.nn.relu(self.conv4(x))
        return jax.nn.relu(self.conv5(x))

    def features(self, x, pool: bool = True):
        """[n, F]: last-conv activations, pool5-pooled (pool=True) and flattened."""
        h = self.last_conv(x)
        if pool:
            h = nnx.max_pool(h, (3, 3), strides=(2, 2))
        return h.reshape(h.shape[0], -1)

    def __call__(self, x):
        h = jax.nn.relu(self.fc1(self.features(x)))
        h = jax.nn.relu(self.fc2(h))
        return self.fc3(h)


def pooled_side(size: int) -> int:
    """Side of the pool5 output for ``size`` x ``size`` inputs."""
    return (size // 4 - 3) // 2 + 1


@dataclasses.dataclass(frozen=True, eq=False)
class RotNetModel(Model):
    """A ``Model`` (apply -> rotation logits [n, 4], classification) plus
    features(params, x[n, ...], pool=True) -> [n, F] and the feature sizes
    ``feature_dim`` (pooled) and ``conv_dim`` (unpooled)."""

    features: Callable = None
    feature_dim: int = 0
    conv_dim: int = 0


def rotnet(*, channels=(16, 32, 48, 48, 32), hidden: int = 128, size: int = 28) -> RotNetModel:
    """RotNet for size x size grey images (module docstring); ``channels``: the five conv
    widths c1..c5; ``hidden``: fc1 / fc2 width."""
    channels = tuple(channels)
    if len(channels) != 5 or any(not isinstance(c, int) or c < 1 for c in channels):
        raise ValueError(f"channels must be five positive integers, got {channels!r}")
    if not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"hidden must be a positive integer, got {hidden!r}")
    if not isinstance(size, int) or size % 4 or size < 12:
        raise ValueError(f"size must be a multiple of 4 and >= 12, got {size!r}")
    make = lambda rngs: RotNet(rngs, channels, hidden, size)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))

    def module(params):
        state = jax.tree.map(lambda a: a, abstract)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(graphdef, state)

    @jax.jit  # one compiled program (eager init dispatches every initializer op by op)
    def init(key) -> Params:
        return nnx.to_pure_dict(nnx.split(make(nnx.Rngs(key)))[1])

    side = pooled_side(size)
    return RotNetModel(
        name=f"rotnet{size}-" + "-".join(map(str, channels)) + f"-h{hidden}",
        init=init, apply=lambda params, x: module(params)(x), task="classification",
        head=("fc3",), features=lambda params, x, pool=True: module(params).features(x, pool),
        feature_dim=side * side * channels[4], conv_dim=(size // 4) ** 2 * channels[4])


def rotate(x: jax.Array, r: jax.Array) -> jax.Array:
    """Images x [n, H, W] (H = W) each turned by its own r[n] in {0..3} quarter turns
    counter-clockwise (``jnp.rot90``)."""
    turns = jnp.stack([jnp.rot90(x, k, axes=(1, 2)) for k in range(NUM_ROTATIONS)])
    return turns[r, jnp.arange(x.shape[0])]


def rotated_copies(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Every image of x [n, H, W] at all four rotations: ([4n, H, W], labels int32[4n]),
    rotation-major (rows r n .. (r + 1) n - 1 are the images turned r times)."""
    n = x.shape[0]
    xs = jnp.concatenate([jnp.rot90(x, k, axes=(1, 2)) for k in range(NUM_ROTATIONS)])
    return xs, jnp.repeat(jnp.arange(NUM_ROTATIONS, dtype=jnp.int32), n)


def pretrain_rotnet(model: RotNetModel, key, images, *, epochs: int = 3, batch_size: int = 128,
                    lr: float = 1e-3, params: Params | None = None):
    """Central RotNet training: images [n, H, W] float (e.g. in [0, 1]); every image at all
    four rotations (4n examples) is one epoch, shuffled per epoch into floor(4n / batch)
    minibatches (the remainder is dropped); Adam(lr) on the mean cross-entropy; params
    start from ``model.init(key)`` unless given. Deterministic given ``key``.

    Each minibatch step is one jitted call (gather, loss, gradient, update) dispatched from
    the host: on XLA's CPU backend the convolution gradients run many times slower inside a
    ``lax.scan``/``while`` body than in a top-level computation (JAX issue 12868), so the
    epoch is not a scan.

    Returns (params, losses float[epochs]: the mean minibatch loss of each epoch)."""
    for name, v in (("epochs", epochs), ("batch_size", batch_size)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}")
    xs, ys = rotated_copies(jnp.asarray(images, jnp.float32))
    steps = xs.shape[0] // batch_size
    if steps < 1:
        raise ValueError(f"batch_size {batch_size} exceeds the {xs.shape[0]} rotated examples")
    k_init, k_epochs = jax.random.split(key)
    params = model.init(k_init) if params is None else params
    opt = optax.adam(lr)

    def loss_fn(p, xb, yb):
        logits = model.apply(p, xb)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))

    @jax.jit
    def step(params, state, xs, ys, idx):  # data as arguments: no large constants
        loss, grads = jax.value_and_grad(loss_fn)(params, xs[idx], ys[idx])
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    orders = jax.jit(lambda k: jax.random.permutation(k, xs.shape[0])[: steps * batch_size]
                     .reshape(steps, batch_size))
    state, losses = opt.init(params), []
    for e in range(epochs):
        batches, total = orders(jax.random.fold_in(k_epochs, e)), 0.0
        for j in range(steps):
            params, state, loss = step(params, state, xs, ys, batches[j])
            total = total + loss
        losses.append(total / steps)
    return params, np.asarray(jnp.stack(losses))


def _batched(fn, params, x, batch_size: int):
    """jitted fn(params, chunk) over x [n, ...] in chunks of ``batch_size`` (a host loop, see
    ``pretrain_rotnet``; the last chunk is padded, so one shape compiles) -> [n, ...]."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    n = x.shape[0]
    pad = -n % batch_size
    xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
    out = [fn(params, xp[i:i + batch_size]) for i in range(0, n + pad, batch_size)]
    return jnp.concatenate(out)[:n]


def extract_features(model: RotNetModel, params, x, *, pool: bool = True,
                     batch_size: int = 1000) -> jax.Array:
    """[n, F] last-conv features of images x [n, H, W], computed ``batch_size`` at a time."""
    fn = jax.jit(lambda p, b: model.features(p, b, pool))
    return _batched(fn, params, jnp.asarray(x, jnp.float32), batch_size)


def rotation_accuracy(model: RotNetModel, params, images, *, batch_size: int = 1000) -> float:
    """Share of the 4n rotated copies of images [n, H, W] whose rotation is predicted."""
    xs, ys = rotated_copies(jnp.asarray(images, jnp.float32))
    fn = jax.jit(lambda p, b: jnp.argmax(model.apply(p, b), -1))
    return float(jnp.mean(_batched(fn, params, xs, batch_size) == ys))
