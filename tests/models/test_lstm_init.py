"""Batched initialisation of the Shakespeare LSTM: ``vmap(init)`` over keys equals the one-key
inits and runs one QR per key (a batched QR stalls XLA CPU with jax 0.10.2, see lstm.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.models.lstm import orthogonal_init, shakespeare_lstm

MODEL = shakespeare_lstm(12, embed=3, hidden=4, layers=2)
KEYS = jax.random.split(jax.random.key(5), 3)


@pytest.fixture(scope="module")
def batched():
    return jax.jit(jax.vmap(MODEL.init))(KEYS)


def test_vmapped_init_equals_stacked_one_key_inits(batched):
    one = jax.jit(MODEL.init)
    singles = [one(k) for k in KEYS]
    want = jax.tree.map(lambda *a: np.stack(a), *singles)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=0, atol=1e-6), batched, want)
    # the keys give different models
    k0 = batched["rnns"][0]["cell"]["dense_h"]["kernel"]
    assert not np.allclose(k0[0], k0[1])


def test_nested_vmap_equals_flat_vmap(batched):
    keys = jnp.stack([KEYS, jax.random.split(jax.random.key(6), 3)])           # [2, 3]
    nested = jax.jit(jax.vmap(jax.vmap(MODEL.init)))(keys)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g[0], w, rtol=0, atol=1e-6),
                 nested, batched)


def test_recurrent_kernels_have_orthonormal_rows(batched):
    for layer in batched["rnns"].values():
        kern = np.asarray(layer["cell"]["dense_h"]["kernel"])               # [3, 4, 16]
        for k in kern:
            np.testing.assert_allclose(k @ k.T, np.eye(4), atol=1e-5)


def qr_operand_shapes(jaxpr):
    """Operand shapes of every QR in ``jaxpr`` and its sub-jaxprs (loop bodies, calls)."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("qr", "geqrf", "householder_product"):
            shapes.append(eqn.invars[0].aval.shape)
        for p in eqn.params.values():
            for q in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(q, "jaxpr", q)
                if hasattr(inner, "eqns"):
                    shapes += qr_operand_shapes(inner)
    return shapes


def test_vmapped_init_runs_one_unbatched_qr_per_key():
    shapes = qr_operand_shapes(jax.make_jaxpr(jax.vmap(MODEL.init))(KEYS).jaxpr)
    assert shapes and all(len(s) == 2 for s in shapes), shapes
    # Flax's own orthogonal initializer would batch them (the case that stalls)
    base = jax.nn.initializers.orthogonal()
    flax_shapes = qr_operand_shapes(jax.make_jaxpr(jax.vmap(lambda k: base(k, (4, 16))))(KEYS).jaxpr)
    assert any(len(s) == 3 for s in flax_shapes), flax_shapes


def test_orthogonal_init_matches_flax_unbatched():
    got = orthogonal_init(2.0)(KEYS[0], (4, 16))
    want = jax.nn.initializers.orthogonal(2.0)(KEYS[0], (4, 16))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
