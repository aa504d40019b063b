"""Convolution and pooling written as slices and matrix products, for XLA's CPU backend.

XLA CPU runs convolution gradients (and max-pool gradients) many times slower inside a loop
body (``lax.scan`` / ``while`` / ``lax.map``) than at top level (JAX issue 12868), and every
local step of the simulator runs inside such loops. Matrix products keep their speed there.
``patches_conv`` computes the same function as ``lax.conv_general_dilated`` as im2col: the
kh * kw shifted (strided) slices of the padded input, stacked into patches
[n * H' * W', kh * kw * C] and multiplied by the kernel reshaped to [kh * kw * C, O]. Its
gradients are slices, pads and matrix products. ``max_pool`` takes the maximum over the
window's shifted slices and routes its gradient with a one-hot product rather than XLA's
select-and-scatter.

``conv="auto"`` resolves to "patches" when JAX's default backend is the CPU and to "native"
elsewhere (accelerators have fast convolutions); the choice is made when a model is built.
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
    """``lax.conv_general_dilated`` for 2-D NHWC inputs and HWIO kernels, as im2col + dot.

    lhs [n, H, W, C], rhs [kh, kw, C, O] -> [n, H', W', O]. Dilations and feature groups
    other than 1 are not supported (use the native convolution).
    """
    if lhs.ndim != 4 or not _is_nhwc_hwio(dimension_numbers):
        raise ValueError("patches_conv supports 2-D NHWC inputs with HWIO kernels only; "
                         "use conv='native' for other layouts")
    if feature_group_count != 1 or any(d != 1 for d in (lhs_dilation or (1, 1))) or any(
            d != 1 for d in (rhs_dilation or (1, 1))):
        raise ValueError("patches_conv supports no dilation and feature_group_count=1; "
                         "use conv='native'")
    kh, kw, c, o = rhs.shape
    strides = tuple(window_strides)
    if isinstance(padding, str):
        pads = lax.padtype_to_pads(lhs.shape[1:3], (kh, kw), strides, padding)
    else:
        pads = [tuple(p) for p in padding]
    cols = jnp.stack(_shifted_windows(lhs, (kh, kw), strides, pads, 0.0), axis=3)
    n, ho, wo = cols.shape[:3]
    out = jnp.dot(cols.reshape(n * ho * wo, kh * kw * c), rhs.reshape(kh * kw * c, o),
                  precision=precision)
    return out.reshape(n, ho, wo, o)


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
    pads = (lax.padtype_to_pads(x.shape[1:3], window, strides, padding)
            if isinstance(padding, str) else [tuple(p) for p in padding])
    return _slice_max_pool(x, window, strides, tuple(map(tuple, pads)), tuple(x.shape))


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
