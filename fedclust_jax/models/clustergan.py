"""ClusterGAN networks (Mukherjee, Asnani, Lin, Kannan, AAAI 2019), channels-last images.

Latent z = (z_n, z_c): z_n [noise_dim] continuous, z_c [K] one-hot; the generator reads
their concatenation [noise_dim + K]. The MNIST architectures of the paper and its authors'
code, for side s (a multiple of 4; 28 for MNIST), base width w (64) and FC width f (1024):

- ``Generator``: FC f -> BN -> ReLU -> FC (s/4)^2 2w -> BN -> ReLU -> deconv w 4x4 s2 ->
  BN -> ReLU -> deconv C 4x4 s2 -> sigmoid. Output in (0, 1), like the pixels /256.
- ``Critic`` (the WGAN discriminator): conv w 4x4 s2 -> lReLU -> conv 2w 4x4 s2 -> lReLU ->
  FC f -> lReLU -> FC 1 (no output activation, no normalisation; lReLU slope 0.2).
- ``Encoder``: the critic's trunk with an FC output of noise_dim + K: the first noise_dim
  are E_n(x) (the z_n estimate), the last K the cluster logits E_c(x).

Details of the authors' code followed here: padding "SAME" everywhere (28 -> 14 -> 7 and
back); kernels N(0, 0.02^2), biases 0, except the critic's and encoder's output layers
(Glorot uniform, TensorFlow's default); the generator's batch norm normalises with the
statistics of the batch being generated (the code never switches it to inference mode, so
there are no running statistics), learns a shift but no scale, epsilon 1e-3. Its L2
weight regularisers are never added to a loss there, so none is used here.

The strided convolutions are written as patch extraction plus matmuls (``conv_s2``,
``deconv_s2``; equal to ``lax.conv_general_dilated`` / ``lax.conv_transpose`` with "SAME"
padding and HWIO kernels, tested): inside ``lax.scan`` XLA's CPU backend runs the input
and weight gradients of strided (transposed) convolutions many times slower than outside
a loop (JAX issue 12868), while slices, pads and matmuls keep their speed.
Parameters at s = 28, w = 64, f = 1024, K = 10, noise_dim = 30: generator 6,604,161
(its three BN shifts included), critic 6,556,865, encoder 6,596,840 (``num_params``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

Params = Any
_normal = nnx.initializers.normal(0.02)
_glorot = nnx.initializers.glorot_uniform()


def _as_images(x, size, channels):
    """[n, s, s, C], [n, s, s] or [n, s*s*C] -> [n, s, s, C]."""
    return x.reshape(x.shape[0], size, size, channels)


def _patches(x, k: int, stride: int, pad: tuple[int, int]):
    """[n, H, W, C] -> [n, Ho, Wo, k*k*C]: the k x k windows (row-major, then channel)
    of x padded by ``pad`` on both spatial axes, every ``stride`` pixels."""
    x = jnp.pad(x, ((0, 0), pad, pad, (0, 0)))
    ho, wo = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    span_h, span_w = stride * (ho - 1) + 1, stride * (wo - 1) + 1
    return jnp.concatenate([x[:, i:i + span_h:stride, j:j + span_w:stride, :]
                            for i in range(k) for j in range(k)], axis=-1)


def conv_s2(x, kernel):
    """Stride-2 "SAME" convolution: x [n, H, W, Cin], kernel [k, k, Cin, Cout] ->
    [n, ceil(H/2), ceil(W/2), Cout] (TensorFlow's padding: total max((out - 1) 2 + k - H, 0),
    the smaller half before; square images)."""
    k, size = kernel.shape[0], x.shape[1]
    out = -(-size // 2)
    total = max((out - 1) * 2 + k - size, 0)
    cols = _patches(x, k, 2, (total // 2, total - total // 2))
    return cols @ kernel.reshape(-1, kernel.shape[-1])


# deconv_s2: output row 2m + a reads padded input rows m + offset with kernel row ky,
# (offset, ky) for a = 0 and a = 1 (the same along columns).
_DECONV_TAPS = (((0, 0), (1, 2)), ((1, 1), (2, 3)))


def deconv_s2(x, kernel):
    """4x4 stride-2 "SAME" transposed convolution: x [n, H, W, Cin], kernel
    [4, 4, Cin, Cout] -> [n, 2H, 2W, Cout], as ``lax.conv_transpose(x, kernel, (2, 2),
    "SAME")``. Each output parity (a, b) is a 2x2 window of the input (padded by 1) times
    four taps of the kernel: no multiplications by inserted zeros."""
    n, h, w, _ = x.shape
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    rows = []
    for taps_a in _DECONV_TAPS:
        cols = []
        for taps_b in _DECONV_TAPS:
            win = [xp[:, oy:oy + h, ox:ox + w, :] for oy, _ in taps_a for ox, _ in taps_b]
            ker = [kernel[ky, kx] for _, ky in taps_a for _, kx in taps_b]
            cols.append(jnp.concatenate(win, -1) @ jnp.concatenate(ker, 0))
        rows.append(jnp.stack(cols, 3))                   # [n, H, W, 2 (b), Cout]
    return jnp.stack(rows, 2).reshape(n, 2 * h, 2 * w, -1)  # [n, H, 2 (a), W, 2 (b), Cout]


class StridedConv(nnx.Module):
    """k x k stride-2 "SAME" convolution with bias: [n, H, W, Cin] -> [n, H/2, W/2, Cout]."""

    def __init__(self, cin: int, cout: int, rngs: nnx.Rngs, k: int = 4):
        self.kernel = nnx.Param(_normal(rngs.params(), (k, k, cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x):
        return conv_s2(x, self.kernel[...]) + self.bias[...]


class StridedDeconv(nnx.Module):
    """4x4 stride-2 "SAME" transposed convolution with bias: [n, H, W, Cin] ->
    [n, 2H, 2W, Cout]."""

    def __init__(self, cin: int, cout: int, rngs: nnx.Rngs):
        self.kernel = nnx.Param(_normal(rngs.params(), (4, 4, cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x):
        return deconv_s2(x, self.kernel[...]) + self.bias[...]


class BatchShift(nnx.Module):
    """Batch normalisation with batch statistics and a learned shift only:
    (x - mean) / sqrt(var + eps) + bias over every axis but the last. x: [n, ..., F]."""

    def __init__(self, features: int, eps: float = 1e-3):
        self.bias = nnx.Param(jnp.zeros((features,)))
        self.eps = eps

    def __call__(self, x):
        axes = tuple(range(x.ndim - 1))
        mean = jnp.mean(x, axes)
        var = jnp.mean(jnp.square(x - mean), axes)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) + self.bias[...]


class Generator(nnx.Module):
    """z: [n, latent_dim] -> images [n, size, size, channels] in (0, 1)."""

    def __init__(self, latent_dim: int, rngs: nnx.Rngs, size: int = 28, channels: int = 1,
                 width: int = 64, fc_width: int = 1024):
        self.base, self.width = size // 4, width
        self.fc1 = nnx.Linear(latent_dim, fc_width, kernel_init=_normal, rngs=rngs)
        self.bn1 = BatchShift(fc_width)
        self.fc2 = nnx.Linear(fc_width, self.base * self.base * 2 * width, kernel_init=_normal,
                              rngs=rngs)
        self.bn2 = BatchShift(2 * width)
        self.deconv1 = StridedDeconv(2 * width, width, rngs)
        self.bn3 = BatchShift(width)
        self.deconv2 = StridedDeconv(width, channels, rngs)

    def __call__(self, z):
        h = jax.nn.relu(self.bn1(self.fc1(z)))
        h = self.fc2(h).reshape(z.shape[0], self.base, self.base, 2 * self.width)
        h = jax.nn.relu(self.bn2(h))
        h = jax.nn.relu(self.bn3(self.deconv1(h)))
        return jax.nn.sigmoid(self.deconv2(h))


class _Trunk(nnx.Module):
    """conv w 4x4 s2 -> lReLU -> conv 2w 4x4 s2 -> lReLU -> FC f -> lReLU -> FC out.
    x: [n, size, size, channels] (or flattened) -> [n, out]."""

    def __init__(self, out: int, rngs: nnx.Rngs, size: int, channels: int, width: int,
                 fc_width: int):
        self.size, self.channels = size, channels
        self.conv1 = StridedConv(channels, width, rngs)
        self.conv2 = StridedConv(width, 2 * width, rngs)
        side = -(-size // 4)  # ceil(ceil(s / 2) / 2), SAME padding
        self.fc1 = nnx.Linear(side * side * 2 * width, fc_width, kernel_init=_normal, rngs=rngs)
        self.fc2 = nnx.Linear(fc_width, out, kernel_init=_glorot, rngs=rngs)

    def __call__(self, x):
        h = _as_images(x, self.size, self.channels)
        h = jax.nn.leaky_relu(self.conv1(h), 0.2)
        h = jax.nn.leaky_relu(self.conv2(h), 0.2)
        h = jax.nn.leaky_relu(self.fc1(h.reshape(h.shape[0], -1)), 0.2)
        return self.fc2(h)


class Critic(nnx.Module):
    """x: [n, size, size, channels] -> critic scores [n]."""

    def __init__(self, rngs: nnx.Rngs, size: int = 28, channels: int = 1, width: int = 64,
                 fc_width: int = 1024):
        self.trunk = _Trunk(1, rngs, size, channels, width, fc_width)

    def __call__(self, x):
        return self.trunk(x)[:, 0]


class Encoder(nnx.Module):
    """x: [n, size, size, channels] -> (z_n estimate [n, noise_dim], logits [n, K])."""

    def __init__(self, noise_dim: int, num_clusters: int, rngs: nnx.Rngs, size: int = 28,
                 channels: int = 1, width: int = 64, fc_width: int = 1024):
        self.noise_dim = noise_dim
        self.trunk = _Trunk(noise_dim + num_clusters, rngs, size, channels, width, fc_width)

    def __call__(self, x):
        out = self.trunk(x)
        return out[:, :self.noise_dim], out[:, self.noise_dim:]


def _pure(make: Callable[[nnx.Rngs], nnx.Module]):
    """(init(key) -> params, apply(params, *args)) of an NNX module constructor; the graph
    is built once (abstractly) and params are plain nested dicts."""
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))

    def init(key):
        return nnx.to_pure_dict(nnx.split(make(nnx.Rngs(key)))[1])

    def apply(params, *args):
        state = jax.tree.map(lambda a: a, abstract)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(graphdef, state)(*args)

    return init, apply


@dataclasses.dataclass(frozen=True, eq=False)
class ClusterGANNets:
    """The three ClusterGAN networks as pure functions over a params dict
    {"generator", "critic", "encoder"}.

    init(key) -> params; generate(params["generator"], z [n, noise_dim + K]) -> x [n, s, s, C];
    critic(params["critic"], x [n, s, s, C] or [n, s, s]) -> [n];
    encode(params["encoder"], x) -> (z_n [n, noise_dim], logits [n, K]).
    """

    name: str
    noise_dim: int
    num_clusters: int
    shape: tuple[int, int, int]
    init: Callable[[jax.Array], Params]
    generate: Callable[[Params, jax.Array], jax.Array]
    critic: Callable[[Params, jax.Array], jax.Array]
    encode: Callable[[Params, jax.Array], tuple[jax.Array, jax.Array]]

    @property
    def latent_dim(self) -> int:
        return self.noise_dim + self.num_clusters


def clustergan_nets(num_clusters: int, *, noise_dim: int = 30, size: int = 28,
                    channels: int = 1, width: int = 64, fc_width: int = 1024) -> ClusterGANNets:
    """ClusterGAN's MNIST networks (module docstring) for K = ``num_clusters``; defaults:
    the paper's MNIST setting (noise_dim 30, 28x28x1, w = 64, f = 1024)."""
    for name, v in (("num_clusters", num_clusters), ("noise_dim", noise_dim), ("size", size),
                    ("channels", channels), ("width", width), ("fc_width", fc_width)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if size % 4:
        raise ValueError(f"the ClusterGAN generator needs a side divisible by 4, got {size}")
    dims = dict(size=size, channels=channels, width=width, fc_width=fc_width)
    gen_init, generate = _pure(lambda r: Generator(noise_dim + num_clusters, r, **dims))
    crit_init, critic = _pure(lambda r: Critic(r, **dims))
    enc_init, encode = _pure(lambda r: Encoder(noise_dim, num_clusters, r, **dims))

    def init(key):
        k_g, k_d, k_e = jax.random.split(key, 3)
        return dict(generator=gen_init(k_g), critic=crit_init(k_d), encoder=enc_init(k_e))

    return ClusterGANNets(name=f"clustergan{num_clusters}-{size}x{size}x{channels}-w{width}",
                          noise_dim=noise_dim, num_clusters=num_clusters,
                          shape=(size, size, channels), init=init, generate=generate,
                          critic=critic, encode=encode)
