"""Normalizing flows: exact log-likelihood generative models for UIFCA.

A flow maps data x to a latent z = f(x) with prior N(0, I), so
    log p(x) = log N(f(x); 0, I) + log |det df/dx|,
the change-of-variables formula ([T] section 4.2, written there for g = f^{-1}).

Two flows, each an NNX module split once into graph and pure params (``FlowModel``):

- ``affine_flow(d)``: x = W z + b, a learned Gaussian N(b, W W^T). This is the thesis's
  "1-layer planar flow g(z) = w^T z + b" read as an affine map of R^d (as printed it is
  scalar-valued and not invertible). It is stored through A = W^{-1} (scoring is a
  matmul). ``structure="triangular"`` (default) keeps A lower triangular with a positive
  diagonal exp(log_scale) (every Gaussian has such a precision Cholesky factor; log det
  exact and stable); ``structure="full"`` learns a dense A (log det via slogdet).
  Parameters: triangular d + d + d(d-1)/2, the last stored as a dense [d, d] block of
  which the strictly lower part is used (d = 32: 1,088 stored, 560 effective); full
  d^2 + d.
- ``real_nvp(shape)``: RealNVP (Dinh et al.) on images [H, W] with convolutional or MLP
  coupling networks and either checkerboard masks (standard) or cyclic half-image masks
  (Kirichenko et al.: the conditioning half cycles top, right, bottom, left, so a
  coupling cannot use the local pixel correlations across a checkerboard). Inputs in [0, 1] go through the
  logit transform logit(alpha + (1 - 2 alpha) x) first (its Jacobian is included).
  The thesis gives neither depth nor width, only "standard RealNVP" (Dinh et al., whose
  image couplings are convolutional networks) and Kirichenko et al.'s code. Defaults: 8
  couplings (scale = tanh(.) times a learned per-pixel factor; last layer zero-initialised
  so each coupling starts as the identity), then a per-pixel affine layer.
  ``coupling="conv"`` (default): Dinh et al.'s kind of s-t network, three 3x3
  convolutions (2 -> h -> h -> 2 channels, h = 32 by default, the inputs being the masked
  image and the mask), which sees only a pixel's neighbourhood and is shared across
  positions: the inductive bias Kirichenko et al. name as the reason a flow's likelihood
  rates other images of the same kind highly. Parameters per coupling:
  18 h + h + 9 h^2 + h + 18 h + 2 + D; for h = 32 and 28x28: 11,218, and 91,312 in all
  with 8 couplings (see ``num_params``). ``coupling="mlp"``: an MLP over the whole image
  per coupling, D -> h -> h -> 2D (h = 128 by default, ReLU); per coupling D h + h + h^2
  + h + 2 D h + 2 D + D; for 28x28 and h = 128: 320,048, and 2,561,952 in all.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from fedclust_jax.models.layers import conv_kwargs, resolve_conv

Params = Any
LOG_2PI = math.log(2.0 * math.pi)
AFFINE_STRUCTURES = ("triangular", "full")
MASKS = ("checkerboard", "cyclic")
COUPLINGS = ("conv", "mlp")
HIDDEN = {"conv": 32, "mlp": 128}     # default width of a coupling network


@dataclasses.dataclass(frozen=True, eq=False)
class FlowModel:
    """init(key) -> params; log_prob(params, x[n, *shape]) -> [n] exact log-density;
    forward(params, x) -> (z [n, D], log|det df/dx| [n]), the data -> latent map f.

    shape: the event shape of one point; dequantize: width of the uniform noise added to
    training batches (1/256 for 8-bit images, 0 for continuous data) and half of it added
    at scoring time (bin centres).
    """

    name: str
    init: Callable[[jax.Array], Params]
    log_prob: Callable[[Params, jax.Array], jax.Array]
    forward: Callable[[Params, jax.Array], tuple[jax.Array, jax.Array]]
    shape: tuple[int, ...]
    dequantize: float = 0.0

    def nll(self, params: Params, x: jax.Array) -> jax.Array:
        """Per-point negative log-likelihood [n] (UIFCA's f_theta(x)), at bin centres."""
        return -self.log_prob(params, x + 0.5 * self.dequantize)

    def train_nll(self, params: Params, x: jax.Array, weight: jax.Array, key) -> jax.Array:
        """Weighted mean NLL over a batch x[n, ...] (weight [n], 0 = ignore), with
        dequantization noise when ``dequantize`` > 0; 0 where all weights are 0."""
        if self.dequantize > 0:
            x = x + self.dequantize * jax.random.uniform(key, x.shape)
        per = -self.log_prob(params, x).astype(jnp.float32)
        return jnp.sum(per * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def _wrap(name: str, make: Callable[[nnx.Rngs], nnx.Module], shape, dequantize=0.0):
    """Splits an NNX flow (with a ``forward(x) -> (z, log_det)`` method) into a pure
    ``FlowModel`` with log_prob = log N(z; 0, I) + log_det."""
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))

    def init(key):
        return nnx.to_pure_dict(nnx.split(make(nnx.Rngs(key)))[1])

    def forward(params, x):
        state = jax.tree.map(lambda a: a, abstract)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(graphdef, state).forward(x)

    def log_prob(params, x):
        z, log_det = forward(params, x)
        return standard_normal_logpdf(z) + log_det

    return FlowModel(name=name, init=init, log_prob=log_prob, forward=forward,
                     shape=tuple(shape), dequantize=float(dequantize))


def standard_normal_logpdf(z: jax.Array) -> jax.Array:
    """[n] log N(z; 0, I) of z[n, D]."""
    return -0.5 * jnp.sum(z * z, axis=-1) - 0.5 * z.shape[-1] * LOG_2PI


class AffineFlow(nnx.Module):
    """x = W z + b with z ~ N(0, I_d), stored through the inverse A = W^{-1} (so that
    scoring is one matmul, z = A (x - b), log|det df/dx| = log|det A|): params shift b [d]
    and either log_scale [d] plus lower [d, d] (A = tril(lower, -1) + diag(exp(log_scale)),
    the Cholesky factor of the precision; still every Gaussian) or weight [d, d] (A dense).

    Random init: b ~ N(0, init_scale^2 I), A = I.
    """

    def __init__(self, dim: int, structure: str, init_scale: float, rngs: nnx.Rngs):
        self.structure = structure
        self.shift = nnx.Param(init_scale * jax.random.normal(rngs.params(), (dim,)))
        if structure == "triangular":
            self.log_scale = nnx.Param(jnp.zeros((dim,)))
            self.lower = nnx.Param(jnp.zeros((dim, dim)))
        else:
            self.weight = nnx.Param(jnp.eye(dim))

    def inverse_matrix(self) -> jax.Array:
        """A = W^{-1} [d, d]: the strict lower triangle of ``lower`` plus diag(exp(log_scale)),
        selected with index masks (``jnp.tril`` and ``jnp.diag`` give the same values but
        copy their operand's sharding, which a client walk split over devices refuses when
        the params come from outside the walk)."""
        if self.structure == "triangular":
            lower, scale = self.lower[...], jnp.exp(self.log_scale[...])
            row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)
            col = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 1)
            return jnp.where(row > col, lower,
                             jnp.where(row == col, scale[:, None], jnp.zeros((), lower.dtype)))
        return self.weight[...]

    def matrix(self) -> jax.Array:
        """W [d, d] (x = W z + b)."""
        return jnp.linalg.inv(self.inverse_matrix())

    def forward(self, x: jax.Array):
        """z = A (x - b) [n, d] and log|det A| [n]."""
        x = x.reshape(x.shape[0], -1)
        a = self.inverse_matrix()
        z = (x - self.shift[...]) @ a.T
        if self.structure == "triangular":
            log_det = jnp.sum(self.log_scale[...])
        else:
            log_det = jnp.linalg.slogdet(a)[1]
        return z, jnp.broadcast_to(log_det, (x.shape[0],))


def affine_flow(dim: int, *, structure: str = "triangular", init_scale: float = 1.0) -> FlowModel:
    """Affine flow (a learned Gaussian) on R^dim; see the module docstring."""
    if structure not in AFFINE_STRUCTURES:
        raise ValueError(f"affine flow structure must be one of {AFFINE_STRUCTURES}, "
                         f"got {structure!r}")
    if dim < 1:
        raise ValueError(f"affine flow dim must be >= 1, got {dim}")
    return _wrap(f"affine{dim}-{structure}",
                 lambda rngs: AffineFlow(dim, structure, init_scale, rngs), (dim,))


def coupling_masks(height: int, width: int, depth: int, kind: str) -> jax.Array:
    """[depth, H*W] float masks, 1 = conditioning (unchanged) pixel of that coupling.

    checkerboard: (row + col) even, alternating with its complement.
    cyclic: top half, right half, bottom half, left half, repeating.
    """
    if kind not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {kind!r}")
    r, c = jnp.meshgrid(jnp.arange(height), jnp.arange(width), indexing="ij")
    if kind == "checkerboard":
        board = ((r + c) % 2 == 0)
        base = [board, ~board]
    else:
        base = [r < height // 2, c >= width // 2, r >= height // 2, c < width // 2]
    return jnp.stack([base[l % len(base)].reshape(-1) for l in range(depth)]).astype(jnp.float32)


def affine_coupling(x, mask, scale, s, t):
    """y = m x + (1 - m)(x exp(s') + t) with s' = (1 - m) a tanh(s): x, s, t [n, D], mask m
    and factor a [D]. Returns y [n, D] and log|det dy/dx| = sum of s' [n]."""
    s = (1.0 - mask) * scale * jnp.tanh(s)
    y = mask * x + (1.0 - mask) * (x * jnp.exp(s) + t)
    return y, jnp.sum(s, axis=-1)


class Coupling(nnx.Module):
    """Affine coupling y = m x + (1 - m)(x exp(s) + t), (s, t) = MLP(m x); s = a tanh(.)."""

    def __init__(self, dim: int, hidden: int, rngs: nnx.Rngs):
        self.l0 = nnx.Linear(dim, hidden, rngs=rngs)
        self.l1 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 2 * dim, kernel_init=nnx.initializers.zeros, rngs=rngs)
        self.scale = nnx.Param(jnp.ones((dim,)))

    def __call__(self, x, mask):
        h = jax.nn.relu(self.l1(jax.nn.relu(self.l0(x * mask))))
        s, t = jnp.split(self.out(h), 2, axis=-1)
        return affine_coupling(x, mask, self.scale[...], s, t)


class ConvCoupling(nnx.Module):
    """Affine coupling as ``Coupling`` with (s, t) from three 3x3 convolutions over the
    channels (m x, m) of the [H, W] image: y [n, H W], sum of s [n]. ``conv``: the
    convolution's implementation (``models.layers``)."""

    def __init__(self, height: int, width: int, hidden: int, conv: str, rngs: nnx.Rngs):
        self.height, self.width = height, width
        impl = conv_kwargs(conv)
        conv = lambda i, o, **kw: nnx.Conv(i, o, kernel_size=(3, 3), padding="SAME",
                                           rngs=rngs, **impl, **kw)
        self.c0, self.c1 = conv(2, hidden), conv(hidden, hidden)
        self.out = conv(hidden, 2, kernel_init=nnx.initializers.zeros)
        self.scale = nnx.Param(jnp.ones((height * width,)))

    def __call__(self, x, mask):
        n = x.shape[0]
        image = jnp.stack([x * mask, jnp.broadcast_to(mask, x.shape)], axis=-1)
        h = jax.nn.relu(self.c0(image.reshape(n, self.height, self.width, 2)))
        st = self.out(jax.nn.relu(self.c1(h))).reshape(n, -1, 2)
        return affine_coupling(x, mask, self.scale[...], st[..., 0], st[..., 1])


class RealNVP(nnx.Module):
    """Couplings over flattened images, then a per-pixel affine (log_scale, shift)."""

    def __init__(self, height: int, width: int, depth: int, hidden: int, mask: str,
                 alpha: float, coupling: str, conv: str, rngs: nnx.Rngs):
        dim = height * width
        self.alpha, self.height, self.width, self.mask = alpha, height, width, mask
        make = ((lambda: Coupling(dim, hidden, rngs)) if coupling == "mlp"
                else (lambda: ConvCoupling(height, width, hidden, conv, rngs)))
        self.couplings = nnx.List([make() for _ in range(depth)])
        self.log_scale = nnx.Param(jnp.zeros((dim,)))
        self.shift = nnx.Param(jnp.zeros((dim,)))

    def forward(self, x: jax.Array):
        """Logit transform, couplings, per-pixel affine: z [n, H W], log|det df/dx| [n]."""
        x = x.reshape(x.shape[0], -1)
        a = self.alpha
        u = a + (1.0 - 2.0 * a) * x
        h = jnp.log(u) - jnp.log1p(-u)
        # d logit(u)/dx = (1 - 2a) / (u (1 - u))
        log_det = jnp.sum(math.log(1.0 - 2.0 * a) - jnp.log(u) - jnp.log1p(-u), axis=-1)
        masks = coupling_masks(self.height, self.width, len(self.couplings), self.mask)
        for l, layer in enumerate(self.couplings):
            h, ld = layer(h, masks[l])
            log_det = log_det + ld
        z = (h - self.shift[...]) * jnp.exp(-self.log_scale[...])
        return z, log_det - jnp.sum(self.log_scale[...])


def real_nvp(shape=(28, 28), *, depth: int = 8, hidden: int | None = None,
             mask: str = "cyclic", alpha: float = 0.05, dequantize: float = 1.0 / 256,
             coupling: str = "conv", conv: str = "auto") -> FlowModel:
    """RealNVP on images ``shape`` = (H, W) with pixel values in [0, 1 - dequantize];
    mask "cyclic" (default, [T]'s chosen setting) or "checkerboard" (standard); coupling
    networks "conv" (default; ``hidden`` channels, 32 if None; convolutions by ``conv``:
    "auto", "native" or "patches", ``models.layers``) or "mlp" (``hidden`` units, 128 if
    None)."""
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
    hidden = HIDDEN[coupling] if hidden is None else hidden
    if len(shape) != 2 or min(shape) < 2:
        raise ValueError(f"real_nvp needs an image shape (H, W) with H, W >= 2, got {shape}")
    if depth < 1 or hidden < 1:
        raise ValueError(f"depth and hidden must be >= 1, got {depth}, {hidden}")
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    resolve_conv(conv)
    h, w = shape
    kind = "" if coupling == "mlp" else f"-{coupling}"
    return _wrap(f"realnvp{h}x{w}-{mask}{kind}-d{depth}-h{hidden}",
                 lambda rngs: RealNVP(h, w, depth, hidden, mask, alpha, coupling, conv, rngs),
                 shape, dequantize)


def noisy_copies(params: Params, key, k: int, noise_std: float) -> Params:
    """[K, ...] stacked params: K copies of ``params`` plus N(0, noise_std^2) per entry
    (UIFCA's initialisation, [T] section 4.3)."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    out = [a[None] + noise_std * jax.random.normal(kk, (k,) + a.shape, a.dtype)
           for a, kk in zip(leaves, keys)]
    return jax.tree.unflatten(treedef, out)
