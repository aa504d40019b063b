"""Convolution, dense and pooling layers for XLA's CPU backend, where every local step runs
inside a loop body (``lax.scan`` / ``while`` / ``lax.map``).

XLA CPU runs some convolution gradients many times slower inside a loop body than at top
level (JAX issue 12868): the kernel gradient that JAX's transpose rule forms (a convolution
contracting the batch) runs far below GEMM speed in a scan. Its forward
convolution, and the input gradient written as a forward convolution of the canonical NHWC /
HWIO form, keep GEMM speed there (YNNPACK), and so do matrix products.

- ``patches_conv`` (``conv="patches"``): stride 1 with pads <= k - 1 (every convolution of the
  models) is ``split_conv``: native forward, native input gradient (the flipped kernel), and
  the kernel gradient as one matrix product of the im2col patches [kh * kw * C, n * H' * W']
  with the output gradient. Other strides or pads: ``im2col_conv`` (the kh * kw shifted,
  strided slices stacked into patches times the reshaped kernel; gradients by slices, pads and
  products). A batching rule keeps clients vmapped over their own kernels plain convolutions
  (``_plain_conv``). No im2col forward: its gradient scatters kh * kw padded copies back
  every step.
- ``dense_dot_general`` (``linear_kwargs``): ``nnx.Linear``'s product with its kernel gradient
  formed as x^T g in the kernel's layout; JAX's rule forms g^T x and a transpose that XLA CPU
  keeps as a strided pass over the whole kernel in every optimizer update.
- ``max_pool(impl="patches")``: windows that tile the input (2x2 stride 2) by a reshape and a
  maximum; other windows by the maximum over shifted slices; the gradient routed to the
  first maximum of each window by a kept argmax and a one-hot select, never XLA's
  select-and-scatter (slow inside XLA CPU loops).

These define reverse-mode derivatives (custom VJPs): ``jax.grad`` / ``jax.vjp`` / ``jacrev``
work through them, forward mode (``jax.jvp``, ``jacfwd``) does not; build a model with
``conv="native"`` for forward mode. Measurements: ``benchmarks/notes/performance.md``, "The
FEMNIST FedAvg round on the CPU".

``conv="auto"`` resolves to "patches" when JAX's default backend is the CPU and to "native"
elsewhere (accelerators have fast convolutions and take none of the above); the choice is
made when a model is built.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

CONV_IMPLS = ("auto", "native", "patches")


def resolve_conv(conv: str) -> str:
    """"auto" -> "patches" on the CPU backend, "native" elsewhere; others unchanged."""
    if conv not in CONV_IMPLS:
        raise ValueError(f"conv must be one of {CONV_IMPLS}, got {conv!r}")
    if conv == "auto":
        return "patches" if jax.default_backend() == "cpu" else "native"
    return conv


def conv_kwargs(conv: str) -> dict:
    """``nnx.Conv`` keyword arguments for ``conv`` ("auto" resolved first): patches or native."""
    return {"conv_general_dilated": patches_conv} if resolve_conv(conv) == "patches" else {}


def _shifted_windows(x, window, strides, pads, fill):
    """x [n, H, W, C] -> list of kh * kw arrays [n, H', W', C]: the input under each window
    offset (row-major over (i, j)), after padding with ``fill``."""
    (kh, kw), (sh, sw) = window, strides
    x = jnp.pad(x, ((0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)), constant_values=fill)
    ho = (x.shape[1] - kh) // sh + 1
    wo = (x.shape[2] - kw) // sw + 1
    return [lax.slice(x, (0, i, j, 0), (x.shape[0], i + (ho - 1) * sh + 1,
                                        j + (wo - 1) * sw + 1, x.shape[3]), (1, sh, sw, 1))
            for i in range(kh) for j in range(kw)]


def _is_nhwc_hwio(dimension_numbers) -> bool:
    if dimension_numbers is None:
        return False
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return (tuple(dimension_numbers.lhs_spec) == (0, 3, 1, 2)
                and tuple(dimension_numbers.rhs_spec) == (3, 2, 0, 1)
                and tuple(dimension_numbers.out_spec) == (0, 3, 1, 2))
    return tuple(dimension_numbers) == ("NHWC", "HWIO", "NHWC")


def patches_conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                 dimension_numbers=None, feature_group_count=1, precision=None, **kwargs):
    """``lax.conv_general_dilated`` for 2-D NHWC inputs and HWIO kernels, with gradients that
    stay fast inside XLA CPU loops.

    lhs [n, H, W, C], rhs [kh, kw, C, O] -> [n, H', W', O]. Stride 1 with pads <= k - 1 (the
    "SAME" and "VALID" convolutions of the models): ``split_conv`` (native forward and input
    gradient, im2col weight gradient). Other strides and pads: ``im2col_conv``. Dilations
    and feature groups other than 1 are not supported (use the native convolution).
    """
    if lhs.ndim != 4 or not _is_nhwc_hwio(dimension_numbers):
        raise ValueError("patches_conv supports 2-D NHWC inputs with HWIO kernels only; "
                         "use conv='native' for other layouts")
    if feature_group_count != 1 or any(d != 1 for d in (lhs_dilation or (1, 1))) or any(
            d != 1 for d in (rhs_dilation or (1, 1))):
        raise ValueError("patches_conv supports no dilation and feature_group_count=1; "
                         "use conv='native'")
    kh, kw = rhs.shape[:2]
    strides = tuple(window_strides)
    pads = _pads(lhs.shape, (kh, kw), strides, padding)
    if strides == (1, 1) and all(0 <= p <= k - 1 for (lo, hi), k in zip(pads, (kh, kw))
                                 for p in (lo, hi)):
        return split_conv(lhs, rhs, pads, precision)
    return im2col_conv(lhs, rhs, strides, pads, precision)


def _pads(shape, window, strides, padding):
    """((lo, hi), (lo, hi)) of ``padding`` ("SAME", "VALID" or explicit pairs)."""
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(shape[1:3], window, strides, padding)
    return tuple(tuple(int(v) for v in p) for p in padding)


def _im2col(x, window, strides, pads):
    """Patches of x [n, H, W, C] -> ([n * H' * W', kh * kw * C], (n, H', W')), the kh * kw
    window offsets row-major, then the channels."""
    cols = jnp.stack(_shifted_windows(x, window, strides, pads, 0.0), axis=3)
    n, ho, wo = cols.shape[:3]
    return cols.reshape(n * ho * wo, -1), (n, ho, wo)


def im2col_conv(lhs, rhs, strides, pads, precision=None):
    """The convolution as im2col + one matrix product: the kh * kw shifted (strided) slices
    of the padded input stacked into patches [n * H' * W', kh * kw * C] times the kernel
    reshaped to [kh * kw * C, O]; its gradients are slices, pads and matrix products."""
    kh, kw, c, o = rhs.shape
    cols, (n, ho, wo) = _im2col(lhs, (kh, kw), strides, pads)
    out = jnp.dot(cols, rhs.reshape(kh * kw * c, o), precision=precision)
    return out.reshape(n, ho, wo, o)


def _native_nhwc(x, w, pads, precision):
    """XLA's stride-1 convolution x [n, H, W, C] * w [kh, kw, C, O], with a batching rule
    that keeps it a plain convolution under ``vmap`` (``_plain_conv``)."""
    return _plain_conv(pads, precision)(x, w)


@functools.lru_cache(maxsize=None)
def _plain_conv(pads, precision):
    """The convolution for static ``pads`` and ``precision`` as a ``custom_vmap`` function.
    JAX batches a convolution whose kernel is batched (one kernel per client: a vmap over
    clients) into a grouped convolution, which XLA's CPU backend runs slower than the plain
    convolutions it stands for. The rule here: a batched input alone is folded
    into the image axis; a batched kernel alone into the output channels (every model on
    the same images, as scoring K cluster models does); both batched: one plain
    convolution per batch element (``lax.map``)."""
    dn = ("NHWC", "HWIO", "NHWC")
    conv = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), pads, dimension_numbers=dn,
                                                 precision=precision)
    plain = jax.custom_batching.custom_vmap(conv)

    @plain.def_vmap
    def rule(axis_size, in_batched, x, w):
        xb, wb = in_batched
        if xb and not wb:
            y = plain(x.reshape((-1,) + x.shape[2:]), w)
            return y.reshape((axis_size, -1) + y.shape[1:]), True
        if wb and not xb:
            kh, kw, c, o = w.shape[1:]
            y = plain(x, jnp.moveaxis(w, 0, 3).reshape(kh, kw, c, axis_size * o))
            return jnp.moveaxis(y.reshape(y.shape[:3] + (axis_size, o)), 3, 0), True
        if axis_size == 1:
            return plain(x[0], w[0])[None], True
        return lax.map(lambda a: plain(*a), (x, w)), True

    return plain


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def split_conv(x, w, pads, precision=None):
    """Stride-1 convolution of x [n, H, W, C] by w [kh, kw, C, O] with ``pads`` (each <= k - 1).

    Forward: XLA's convolution. Input gradient: XLA's convolution of the output gradient with
    the flipped kernel (inputs and outputs swapped), padded by k - 1 - pad: both are
    forward convolutions of the canonical NHWC / HWIO form, which XLA's CPU backend runs at
    GEMM speed inside loop bodies. Weight gradient: the im2col patches of x, transposed,
    times the output gradient, one matrix product [kh * kw * C, n * H' * W'] x
    [n * H' * W', O]; XLA's own weight-gradient convolution is the one that runs many times
    slower inside XLA CPU loops (JAX issue 12868). Same values as ``lax.conv_general_dilated``
    up to float summation order."""
    return _native_nhwc(x, w, pads, precision)


def _split_conv_fwd(x, w, pads, precision):
    return _native_nhwc(x, w, pads, precision), (x, w)


def _split_conv_bwd(pads, precision, res, dy):
    x, w = res
    kh, kw, c, o = w.shape
    back = tuple((k - 1 - lo, k - 1 - hi) for (lo, hi), k in zip(pads, (kh, kw)))
    dx = _native_nhwc(dy, jnp.flip(w, (0, 1)).transpose(0, 1, 3, 2), back, precision)
    return dx.astype(x.dtype), _kernel_gradient(x, dy, (kh, kw), pads, precision).astype(w.dtype)


def _kernel_gradient(x, dy, window, pads, precision):
    """dL/dw [kh, kw, C, O] of a stride-1 convolution: sum over images and positions of the
    input under each window offset times the output gradient dy [n, H', W', O].

    C = 1: the kh * kw shifted images stacked first ([kh * kw, n * H' * W'], contiguous
    copies) and one product. C > 1: im2col along the width only, one slab per input row:
    A_r [kw * C, W' * n] for each row r of the padded input (its kw column shifts, then the
    channels) and D_h [O, W' * n] for each output row h; kernel row i is
    sum_h A_{i+h} D_h^T, kh * H' products whose operands are contiguous along the contracted
    axis (``_kernel_gradient_operands``, ``_kernel_gradient_products``). XLA's CPU dot runs
    these products at 0.79 of its GEMM speed on 2 cores, where kh products contracting the
    leading axis of [H' * n * W', kw * C] ran at 0.39 (``benchmarks/cnn_ops.py``, FEMNIST's
    conv2); the width-only im2col holds kw, not kh * kw, copies of the input. The program
    holds kh * H' products, unrolled."""
    (kh, kw), c, o = window, x.shape[3], dy.shape[3]
    dy = dy.astype(x.dtype)
    if c == 1:
        cols = jnp.stack(_shifted_windows(x, window, (1, 1), pads, 0.0)).reshape(kh * kw, -1)
        dw = lax.dot_general(cols, dy.reshape(-1, o), (((1,), (0,)), ((), ())),
                             precision=precision)
        return dw.reshape(kh, kw, c, o)
    rows, dyr = _kernel_gradient_operands(x, dy, window, pads)
    return _kernel_gradient_products(rows, dyr, window, precision)


def _kernel_gradient_operands(x, dy, window, pads):
    """``_kernel_gradient``'s operands for C > 1, one array per row: A_r [kw * C, W' * n] for
    each row r of the padded input, its kw column shifts (A_r[j * C + c, (w, m)] = x_pad[m,
    r, w + j, c]), and D_h [O, W' * n] for each output row h (D_h[o, (w, m)] = dy[m, h, w,
    o]). The images are the minor axis, so each shift copies runs of W' * n values; each
    operand is its own array (products on slices of one array had XLA copy each slice
    first)."""
    kw = window[1]
    n, ho, wo, o = dy.shape
    xt = jnp.pad(x.transpose(1, 3, 2, 0), (pads[0], (0, 0), pads[1], (0, 0)))
    a = [jnp.stack([xt[r, :, j:j + wo] for j in range(kw)]).reshape(-1, wo * n)
         for r in range(xt.shape[0])]
    return a, [dy[:, h].transpose(2, 1, 0).reshape(o, wo * n) for h in range(ho)]


def _kernel_gradient_products(a, d, window, precision):
    """dL/dw [kh, kw, C, O] from ``_kernel_gradient_operands``: kernel row i is
    sum_h A_{i+h} D_h^T over the H' output rows, kh * H' products [kw * C, W' * n] x
    [W' * n, O], each contracting the minor axis of both operands."""
    kh, kw = window
    nt = (((1,), (1,)), ((), ()))
    dw = []
    for i in range(kh):
        row = lax.dot_general(a[i], d[0], nt, precision=precision)
        for h in range(1, len(d)):
            row = row + lax.dot_general(a[i + h], d[h], nt, precision=precision)
        dw.append(row)
    return jnp.stack(dw).reshape(kh, kw, a[0].shape[0] // kw, d[0].shape[0])


split_conv.defvjp(_split_conv_fwd, _split_conv_bwd)


@jax.custom_vjp
def _dense(x, w):
    return lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


def _dense_fwd(x, w):
    return _dense(x, w), (x, w)


def _dense_bwd(res, g):
    x, w = res
    dx = lax.dot_general(g, w, (((g.ndim - 1,), (1,)), ((), ())))
    dw = lax.dot_general(x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1]),
                         (((0,), (0,)), ((), ())))
    return dx.astype(x.dtype), dw.astype(w.dtype)


_dense.defvjp(_dense_fwd, _dense_bwd)


def dense_dot_general(lhs, rhs, dimension_numbers, precision=None,
                      preferred_element_type=None, **kwargs):
    """``lax.dot_general`` for ``nnx.Linear`` (x [..., in] . kernel [in, out]) whose kernel
    gradient is computed in the kernel's own layout, x^T g [in, out]. JAX's transpose rule
    gives g^T x [out, in] and a transpose; XLA's CPU backend keeps that transpose, a strided
    pass over the whole kernel fused into the optimizer's update at every local step (the
    largest single instruction of a FEMNIST round, 14% of its time). Other contractions,
    precisions or output types go to ``lax.dot_general``."""
    (lc, rc), (lb, rb) = dimension_numbers
    if (tuple(lc) != (lhs.ndim - 1,) or tuple(rc) != (0,) or lb or rb or rhs.ndim != 2
            or precision is not None or preferred_element_type is not None
            or kwargs.get("out_sharding") is not None or lhs.dtype != rhs.dtype):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type, **kwargs)
    return _dense(lhs, rhs)


def linear_kwargs(conv: str) -> dict:
    """``nnx.Linear`` keyword arguments beside a model's ``conv`` ("auto" resolved first):
    with "patches" (the CPU path) the kernel gradient in the kernel's layout
    (``dense_dot_general``); with "native" none."""
    return {"dot_general": dense_dot_general} if resolve_conv(conv) == "patches" else {}


def max_pool(x, window, strides, padding="VALID", *, impl: str = "native"):
    """Max pooling of x [n, H, W, C] (padding "VALID" or "SAME", as ``flax.nnx.max_pool``).

    impl "native": ``nnx.max_pool``; "patches": the maximum over the window's stacked shifted
    slices, same values and gradient (to the first maximum of each window, as XLA's
    select-and-scatter), through a custom VJP that keeps the argmax from the forward pass and
    scatters with a one-hot product and the transpose of the slicing, so the gradient has no
    select-and-scatter (slow inside XLA CPU loops). Routing the gradient by comparing values
    with the maximum (``jnp.max``'s own rule) gave wrong ResNet9 gradients on XLA CPU when
    two gradients were compiled into one program (each alone was right); a likely cause is
    the input recomputed in another fusion with different rounding, so that the comparison
    finds no maximum. Keeping the argmax avoids comparing values at all.
    """
    if impl == "native":
        from flax import nnx
        return nnx.max_pool(x, tuple(window), strides=tuple(strides), padding=padding)
    window, strides = tuple(window), tuple(strides)
    pads = _pads(x.shape, window, strides, padding)
    if (window == strides and all(p == 0 for pair in pads for p in pair)
            and x.shape[1] % window[0] == 0 and x.shape[2] % window[1] == 0):
        return _block_max_pool(x, window)
    return _slice_max_pool(x, window, strides, pads, tuple(x.shape))


def _blocks(x, window):
    """x [n, H, W, C] -> [n, H / kh, W / kw, C, kh * kw]: each window's values, row-major."""
    (kh, kw), (n, h, w, c) = window, x.shape
    return (x.reshape(n, h // kh, kh, w // kw, kw, c).transpose(0, 1, 3, 5, 2, 4)
            .reshape(n, h // kh, w // kw, c, kh * kw))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _block_max_pool(x, window):
    """Max pooling over windows that tile the input (window = strides, no padding): a
    reshape and a maximum; its gradient goes to the first maximum of each window (the
    argmax kept from the forward pass, as ``_slice_max_pool``) through a one-hot select and
    the inverse reshape, with no padded copies."""
    return _blocks(x, window).max(axis=-1)


def _block_max_pool_fwd(x, window):
    blocks = _blocks(x, window)
    first = jnp.argmax(blocks, axis=-1)
    return jnp.take_along_axis(blocks, first[..., None], axis=-1)[..., 0], (first, x.shape)


def _block_max_pool_bwd(window, res, ct):
    first, (n, h, w, c) = res
    (kh, kw), k = window, window[0] * window[1]
    spread = jnp.where(first[..., None] == jnp.arange(k, dtype=first.dtype), ct[..., None],
                       jnp.zeros((), ct.dtype))
    return (spread.reshape(n, h // kh, w // kw, c, kh, kw).transpose(0, 1, 4, 2, 5, 3)
            .reshape(n, h, w, c),)


_block_max_pool.defvjp(_block_max_pool_fwd, _block_max_pool_bwd)


def _stacked_windows(x, window, strides, pads, fill):
    return jnp.stack(_shifted_windows(x, window, strides, pads, fill))  # [kh * kw, n, H', W', C]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4))
def _slice_max_pool(x, window, strides, pads, shape):
    return _stacked_windows(x, window, strides, pads, -jnp.inf).max(axis=0)


def _slice_max_pool_fwd(x, window, strides, pads, shape):
    stacked = _stacked_windows(x, window, strides, pads, -jnp.inf)
    first = jnp.argmax(stacked, axis=0)  # first maximum of each window
    return jnp.take_along_axis(stacked, first[None], axis=0)[0], first


def _slice_max_pool_bwd(window, strides, pads, shape, first, ct):
    k = window[0] * window[1]
    onehot = first[None] == jnp.arange(k, dtype=first.dtype).reshape((k,) + (1,) * first.ndim)
    spread = jnp.where(onehot, ct[None], jnp.zeros((), ct.dtype))
    transpose = jax.linear_transpose(
        lambda a: _stacked_windows(a, window, strides, pads, 0.0),
        jax.ShapeDtypeStruct(shape, ct.dtype))
    return transpose(spread)


_slice_max_pool.defvjp(_slice_max_pool_fwd, _slice_max_pool_bwd)
