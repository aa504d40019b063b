"""Convolutional networks of the papers' image experiments (inputs channels-last).

- ``FemnistCNN`` (IFCA / SR-FCA FEMNIST): conv5x5 32 -> ReLU -> maxpool 2 -> conv5x5 64 ->
  ReLU -> maxpool 2 -> FC 3136 -> 2048 -> ReLU -> FC 2048 -> C. With 28x28x1 inputs and
  C = 62: 6,603,710 parameters (832 + 51,264 + 6,424,576 + 127,038).
- ``CifarCNN`` (IFCA rotated CIFAR-10, the authors' TF-tutorial network): conv5x5 64 ->
  ReLU -> maxpool 3/2 -> LRN -> conv5x5 64 -> ReLU -> LRN -> maxpool 3/2 -> FC 2304 -> 384
  -> ReLU -> FC 384 -> 192 -> ReLU -> FC 192 -> C, on 24x24 centre crops. With 32x32x3
  inputs and C = 10: 1,068,298 parameters (4,864 + 102,464 + 885,120 + 73,920 + 1,930).
  The paper calls it "2 conv + 2 FC". The code's random 24x24 training crops, flips and
  colour jitter and its 0.004 weight decay on the FC layers are training settings; the
  model always takes the centre crop (the code's test-time behaviour).

``conv``: "native" (``lax.conv_general_dilated``, ``nnx.max_pool``, plain dense layers),
"patches" (the CPU layers of ``models.layers``: convolutions, dense kernel gradients and
max-pooling whose gradients stay fast inside XLA CPU loop bodies; the same function) or
"auto" (patches on the CPU backend, native elsewhere; resolved when the model is built).
Parameters are identical either way.
"""

from __future__ import annotations

import math

import jax
from flax import nnx

from fedclust_jax.models.base import Model, from_nnx
from fedclust_jax.models.layers import conv_kwargs, linear_kwargs, max_pool, resolve_conv
from fedclust_jax.bounds import Size


def _as_images(x, height, width, channels):
    """[n, H, W, C], [n, H, W] or [n, H*W*C] -> [n, H, W, C]."""
    return x.reshape(x.shape[0], height, width, channels)


class FemnistCNN(nnx.Module):
    """x: [n, 28, 28, 1] (or [n, 784]) -> logits [n, num_classes]."""

    def __init__(self, num_classes: int, rngs: nnx.Rngs, size: int = 28, channels: int = 1,
                 conv: str = "native"):
        self.size, self.channels, self.impl = size, channels, resolve_conv(conv)
        kw, lin = conv_kwargs(self.impl), linear_kwargs(self.impl)
        self.conv1 = nnx.Conv(channels, 32, (5, 5), padding="SAME", rngs=rngs, **kw)
        self.conv2 = nnx.Conv(32, 64, (5, 5), padding="SAME", rngs=rngs, **kw)
        flat = (size // 4) * (size // 4) * 64
        self.fc1 = nnx.Linear(flat, 2048, rngs=rngs, **lin)
        self.fc2 = nnx.Linear(2048, num_classes, rngs=rngs, **lin)

    def features(self, x):
        """The body (everything below fc2) -> [n, 2048]."""
        x = _as_images(x, self.size, self.size, self.channels)
        x = max_pool(jax.nn.relu(self.conv1(x)), (2, 2), (2, 2), impl=self.impl)
        x = max_pool(jax.nn.relu(self.conv2(x)), (2, 2), (2, 2), impl=self.impl)
        return jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1)))

    def from_features(self, h):
        """The head fc2 on the body's features."""
        return self.fc2(h)

    def __call__(self, x):
        return self.from_features(self.features(x))


def local_response_norm(x, depth_radius: int = 4, bias: float = 1.0, alpha: float = 0.001 / 9.0,
                        beta: float = 0.75):
    """TensorFlow's ``tf.nn.lrn`` over the channel axis of [n, H, W, C]:
    x / (bias + alpha * sum_{|c' - c| <= r} x_{c'}^2) ** beta (the tutorial's parameters)."""
    sq = jax.lax.reduce_window(x * x, 0.0, jax.lax.add, (1, 1, 1, 2 * depth_radius + 1),
                               (1, 1, 1, 1), ((0, 0), (0, 0), (0, 0),
                                              (depth_radius, depth_radius)))
    return x / (bias + alpha * sq) ** beta


def center_crop(x, size: int):
    """[n, H, W, C] -> [n, size, size, C], the centre (TF's resize_image_with_crop_or_pad)."""
    h, w = x.shape[1], x.shape[2]
    if size > min(h, w):
        raise ValueError(f"crop {size} is larger than the images {h}x{w}")
    top, left = (h - size) // 2, (w - size) // 2
    return x[:, top:top + size, left:left + size]


class CifarCNN(nnx.Module):
    """x: [n, 32, 32, 3] -> logits [n, num_classes]; centre-cropped to ``crop`` (None: none)."""

    def __init__(self, num_classes: int, rngs: nnx.Rngs, size: int = 32, channels: int = 3,
                 crop: int | None = 24, conv: str = "native"):
        self.size, self.channels, self.crop = size, channels, crop
        self.impl = resolve_conv(conv)
        side = crop or size
        kw, lin = conv_kwargs(self.impl), linear_kwargs(self.impl)
        self.conv1 = nnx.Conv(channels, 64, (5, 5), padding="SAME", rngs=rngs, **kw)
        self.conv2 = nnx.Conv(64, 64, (5, 5), padding="SAME", rngs=rngs, **kw)
        side = math.ceil(math.ceil(side / 2) / 2)
        self.fc1 = nnx.Linear(side * side * 64, 384, rngs=rngs, **lin)
        self.fc2 = nnx.Linear(384, 192, rngs=rngs, **lin)
        self.fc3 = nnx.Linear(192, num_classes, rngs=rngs, **lin)

    def features(self, x):
        """The body (everything below fc3) -> [n, 192]."""
        x = _as_images(x, self.size, self.size, self.channels)
        if self.crop:
            x = center_crop(x, self.crop)
        pool = lambda a: max_pool(a, (3, 3), (2, 2), "SAME", impl=self.impl)
        x = local_response_norm(pool(jax.nn.relu(self.conv1(x))))
        x = pool(local_response_norm(jax.nn.relu(self.conv2(x))))
        x = jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1)))
        return jax.nn.relu(self.fc2(x))

    def from_features(self, h):
        """The head fc3 on the body's features."""
        return self.fc3(h)

    def __call__(self, x):
        return self.from_features(self.features(x))


def femnist_cnn(num_classes: int = 62, *, size: int = 28, channels: int = 1,
                conv: str = "auto") -> Model:
    """FEMNIST CNN; the last layer (fc2) is the head for IFCA weight sharing.
    conv: "auto" | "native" | "patches" (module docstring)."""
    if size % 4:
        raise ValueError(f"FEMNIST CNN needs a side divisible by 4, got {size}")
    impl = resolve_conv(conv)
    return from_nnx(f"femnist-cnn{num_classes}",
                    lambda rngs: FemnistCNN(num_classes, rngs, size, channels, impl),
                    task="classification", head=("fc2",))


def cifar_cnn(num_classes: int = 10, *, size: int = 32, channels: int = 3,
              crop: int | None = 24, conv: str = "auto") -> Model:
    """IFCA's CIFAR-10 CNN; the last layer (fc3) is the head.
    conv: "auto" | "native" | "patches" (module docstring)."""
    impl = resolve_conv(conv)
    return from_nnx(f"cifar-cnn{num_classes}",
                    lambda rngs: CifarCNN(num_classes, rngs, size, channels, crop, impl),
                    task="classification", head=("fc3",))




def _image_shape(data, what):
    shape = tuple(data.feature_shape)
    if len(shape) == 2:
        shape = (*shape, 1)
    if len(shape) != 3 or shape[0] != shape[1]:
        raise ValueError(f"{what} needs square images [H, W, C], data has features {shape}")
    return shape


def femnist_cnn_for(data, conv: str = "auto") -> Model:
    """The FEMNIST CNN (LEAF's: two 5x5 convolutions with max pooling, a 2048-unit dense
    layer) sized for ``data``'s classes, image side and channels.

    conv: how convolutions run, "auto" (chosen per backend), "native" or "patches"
    (``models.layers``)."""
    size, _, channels = _image_shape(data, "femnist-cnn")
    return femnist_cnn(data.num_classes, size=size, channels=channels, conv=conv)


def cifar_cnn_for(data, crop: Size | None = 24, conv: str = "auto") -> Model:
    """IFCA's CIFAR-10 CNN sized for ``data``'s classes, image side and channels.

    crop: side of the centre crop fed to the network (None: no crop);
    conv: how convolutions run, "auto" (chosen per backend), "native" or "patches"
    (``models.layers``)."""
    size, _, channels = _image_shape(data, "cifar-cnn")
    return cifar_cnn(data.num_classes, size=size, channels=channels, crop=crop, conv=conv)
