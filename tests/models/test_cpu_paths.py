"""CPU paths of the convolutional models equal XLA's native convolution and max-pool
(outputs, gradients, local steps, clients vmapped over their own kernels): the CPU
convolution (native forward and input gradient, im2col kernel gradient; im2col alone where it
must), the dense layer's kernel gradient in the kernel's layout, the slice- and
reshape-maximum pooling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

from fedclust_jax.core.train import LocalTraining, local_train
from fedclust_jax.models.cnn import cifar_cnn, femnist_cnn
from fedclust_jax.models import layers
from fedclust_jax.models.layers import max_pool, patches_conv, resolve_conv
from fedclust_jax.models.resnet9 import resnet9

KEY = jax.random.key(0)
NHWC = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("padding", ["SAME", "VALID", [(1, 2), (0, 1)]])
def test_patches_conv_equals_native_conv_and_its_gradients(stride, padding):
    x = jax.random.normal(KEY, (3, 9, 11, 4))
    k = jax.random.normal(jax.random.key(1), (5, 3, 4, 6))
    native = lambda x, k: lax.conv_general_dilated(x, k, (stride, stride), padding,
                                                   dimension_numbers=NHWC)
    patches = lambda x, k: patches_conv(x, k, (stride, stride), padding,
                                        dimension_numbers=lax.conv_dimension_numbers(
                                            x.shape, k.shape, NHWC))
    ct = jax.random.normal(jax.random.key(2), native(x, k).shape)

    @jax.jit
    def both(x, k):
        grads = [jax.grad(lambda x, k: jnp.sum(f(x, k) * ct), argnums=(0, 1))(x, k)
                 for f in (patches, native)]
        return patches(x, k), native(x, k), grads

    out_p, out_n, (g_patches, g_native) = both(x, k)
    np.testing.assert_allclose(out_p, out_n, rtol=1e-5, atol=1e-4)
    for a, b in zip(g_patches, g_native):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_patches_conv_refuses_what_it_does_not_implement():
    x, k = jnp.ones((1, 5, 5, 2)), jnp.ones((3, 3, 2, 2))
    dn = lax.conv_dimension_numbers(x.shape, k.shape, NHWC)
    with pytest.raises(ValueError, match="conv='native'"):
        patches_conv(x, k, (1, 1), "SAME", rhs_dilation=(2, 2), dimension_numbers=dn)
    with pytest.raises(ValueError, match="NHWC"):
        patches_conv(x, k, (1, 1), "SAME", dimension_numbers=None)


@pytest.mark.parametrize("window, strides, padding", [((2, 2), (2, 2), "VALID"),
                                                      ((3, 3), (2, 2), "SAME")])
def test_slice_max_pool_equals_native_and_routes_the_same_gradient(window, strides, padding):
    x = jax.random.normal(KEY, (2, 9, 9, 3))  # continuous values: no ties
    native = lambda x: nnx.max_pool(x, window, strides=strides, padding=padding)
    sliced = lambda x: max_pool(x, window, strides, padding, impl="patches")
    a, b = jax.jit(native)(x), jax.jit(sliced)(x)
    np.testing.assert_array_equal(a, b)
    ct = jax.random.normal(jax.random.key(1), a.shape)
    ga = jax.jit(jax.grad(lambda x: jnp.sum(native(x) * ct)))(x)
    gb = jax.jit(jax.grad(lambda x: jnp.sum(sliced(x) * ct)))(x)
    np.testing.assert_allclose(ga, gb, rtol=1e-6, atol=1e-6)


def test_auto_is_patches_on_cpu_and_bad_values_are_refused():
    assert jax.default_backend() != "cpu" or resolve_conv("auto") == "patches"
    assert resolve_conv("native") == "native"
    with pytest.raises(ValueError, match="conv must be one of"):
        femnist_cnn(conv="im2col")


PAIRS = {
    "femnist-cnn": (lambda c: femnist_cnn(10, size=12, conv=c), (6, 12, 12, 1)),
    "cifar-cnn": (lambda c: cifar_cnn(10, size=16, crop=12, conv=c), (6, 16, 16, 3)),
    "resnet9-page": (lambda c: resnet9(10, width=8, conv=c), (6, 8, 8, 3)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_patches_model_equals_native_model(name):
    make, shape = PAIRS[name]
    native, patches = make("native"), make("patches")
    params = native.init(KEY)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(patches.init(KEY))):
        np.testing.assert_array_equal(a, b)  # same parameters from the same key
    x = jax.random.uniform(jax.random.key(1), shape)
    y = jax.random.randint(jax.random.key(2), (shape[0],), 0, 10)
    mask = jnp.arange(shape[0]) < 5

    @jax.jit
    def outputs_and_grads(params):
        return [(m.apply(params, x), jax.grad(m.loss)(params, x, y, mask))
                for m in (patches, native)]

    (out_p, g_patches), (out_n, g_native) = outputs_and_grads(params)
    np.testing.assert_allclose(out_p, out_n, rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g_patches), jax.tree.leaves(g_native)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", ["femnist-cnn", "cifar-cnn"])
def test_local_steps_in_the_scan_agree(name):
    make, shape = PAIRS[name]
    native, patches = make("native"), make("patches")
    params = native.init(KEY)
    x = jax.random.uniform(jax.random.key(1), (20,) + shape[1:])
    y = jax.random.randint(jax.random.key(2), (20,), 0, 10)
    cfg = LocalTraining(steps=3, lr=0.05, batch_size=8)
    run = lambda m: jax.jit(lambda p: local_train(m, cfg, p, x, y, jnp.int32(17),
                                                   jax.random.key(3), 0.05))(params)
    for a, b in zip(jax.tree.leaves(run(patches)), jax.tree.leaves(run(native))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_stride_one_patches_conv_is_native_forward_and_input_gradient():
    """Stride 1 with pads <= k - 1: XLA's own forward and input-gradient convolutions (no
    im2col stack in the forward program), an im2col product for the kernel gradient; pads
    beyond k - 1 fall back to im2col and still equal the native convolution."""
    x = jax.random.normal(KEY, (2, 7, 7, 3))
    k = jax.random.normal(jax.random.key(1), (3, 3, 3, 4))
    dn = lax.conv_dimension_numbers(x.shape, k.shape, NHWC)
    fwd = jax.jit(lambda x, k: patches_conv(x, k, (1, 1), "SAME", dimension_numbers=dn))
    assert "convolution" in fwd.lower(x, k).as_text() and "concatenate" not in fwd.lower(x, k).as_text()
    for padding in ([(4, 4), (0, 0)], [(1, 1), (3, 0)]):
        native = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), padding, dimension_numbers=NHWC)
        ours = lambda x, k: patches_conv(x, k, (1, 1), padding, dimension_numbers=dn)
        np.testing.assert_allclose(ours(x, k), native(x, k), rtol=1e-5, atol=1e-4)
        ct = jax.random.normal(jax.random.key(2), native(x, k).shape)
        for a, b in zip(jax.grad(lambda x, k: jnp.sum(ours(x, k) * ct), (0, 1))(x, k),
                        jax.grad(lambda x, k: jnp.sum(native(x, k) * ct), (0, 1))(x, k)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_dense_kernel_gradient_needs_no_transpose():
    """``dense_dot_general``: the values and gradients of ``lax.dot_general``, with the
    kernel gradient formed as x^T g in the kernel's layout: its jaxpr has no transpose,
    where JAX's own rule transposes g^T x."""
    from fedclust_jax.models.layers import dense_dot_general
    x, w = jax.random.normal(KEY, (2, 5, 6)), jax.random.normal(jax.random.key(1), (6, 4))
    dims = (((2,), (0,)), ((), ()))
    ct = jax.random.normal(jax.random.key(2), (2, 5, 4))
    f = lambda dot: lambda x, w: jnp.sum(dot(x, w, dims) * ct)
    np.testing.assert_allclose(dense_dot_general(x, w, dims), lax.dot_general(x, w, dims),
                               rtol=1e-6)
    for a, b in zip(jax.grad(f(dense_dot_general), (0, 1))(x, w),
                    jax.grad(f(lax.dot_general), (0, 1))(x, w)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    jaxpr = lambda dot: str(jax.make_jaxpr(jax.grad(f(dot), 1))(x, w))
    assert "transpose" in jaxpr(lax.dot_general) and "transpose" not in jaxpr(dense_dot_general)
    # other contractions are lax.dot_general's own
    y = jax.random.normal(KEY, (6, 3))
    np.testing.assert_allclose(dense_dot_general(w.T, y, (((1,), (0,)), ((), ())),
                                                 precision=lax.Precision.HIGHEST),
                               w.T @ y, rtol=1e-5)


def test_tiling_max_pool_routes_the_gradient_to_the_first_maximum():
    """Windows that tile the input (2x2, stride 2): the reshape form's values and gradient
    equal the slice form's and the native pool's; ties go to the first maximum."""
    x = jax.random.normal(KEY, (2, 8, 6, 3))
    pools = [lambda x: nnx.max_pool(x, (2, 2), strides=(2, 2)),
             lambda x: max_pool(x, (2, 2), (2, 2), impl="patches"),
             lambda x: layers._slice_max_pool(x, (2, 2), (2, 2), ((0, 0), (0, 0)), x.shape)]
    ct = jax.random.normal(jax.random.key(1), (2, 4, 3, 3))
    outs = [jax.jit(p)(x) for p in pools]
    grads = [jax.jit(jax.grad(lambda x, p=p: jnp.sum(p(x) * ct)))(x) for p in pools]
    for o, g in zip(outs[1:], grads[1:]):
        np.testing.assert_array_equal(o, outs[0])
        np.testing.assert_allclose(g, grads[0], rtol=1e-6, atol=1e-6)
    tie = jnp.ones((1, 2, 2, 1))
    g = jax.grad(lambda x: max_pool(x, (2, 2), (2, 2), impl="patches").sum())(tie)
    np.testing.assert_array_equal(g[0, :, :, 0], [[1.0, 0.0], [0.0, 0.0]])


def test_clients_vmapped_over_their_own_kernels_equal_one_at_a_time():
    """A vmap over clients, each with its own kernels (chunks of clients), over K models
    on shared images (scoring), and both nested: the CPU path's values and gradients
    equal the native model's, with no grouped convolution in the compiled program."""
    cpu, native = femnist_cnn(10, size=12, conv="patches"), femnist_cnn(10, size=12, conv="native")
    params = jax.vmap(cpu.init)(jax.random.split(KEY, 3))
    x = jax.random.uniform(jax.random.key(1), (3, 6, 12, 12, 1))
    y = jax.random.randint(jax.random.key(2), (3, 6), 0, 10)
    mask = jnp.ones((3, 6), bool)
    per_client = lambda m: jax.jit(jax.vmap(jax.grad(m.loss)))
    for a, b in zip(jax.tree.leaves(per_client(cpu)(params, x, y, mask)),
                    jax.tree.leaves(per_client(native)(params, x, y, mask))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    text = per_client(cpu).lower(params, x, y, mask).compile().as_text()
    assert "feature_group_count" not in text
    scores = lambda m: jax.jit(jax.vmap(jax.vmap(m.apply, in_axes=(0, None)), in_axes=(None, 0)))
    np.testing.assert_allclose(scores(cpu)(params, x), scores(native)(params, x),
                               rtol=1e-5, atol=1e-5)
