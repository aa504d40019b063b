"""Normalizing flows: exact densities, change of variables, masks, shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from fedclust_jax.models.base import num_params
from fedclust_jax.models.flows import (affine_flow, coupling_masks, noisy_copies, real_nvp)


def _perturbed(flow, key, scale=0.3):
    params = flow.init(key)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    return jax.tree.unflatten(treedef, [a + scale * jax.random.normal(k, a.shape)
                                        for a, k in zip(leaves, keys)])


@pytest.mark.parametrize("structure", ["triangular", "full"])
def test_affine_flow_is_the_gaussian_density(structure):
    d = 4
    flow = affine_flow(d, structure=structure)
    params = _perturbed(flow, jax.random.key(0))
    a = np.tril(params["lower"], -1) + np.diag(np.exp(params["log_scale"])) \
        if structure == "triangular" else np.asarray(params["weight"])
    w = np.linalg.inv(a)                                   # x = W z + b
    x = np.asarray(jax.random.normal(jax.random.key(3), (7, d))) * 2.0
    expected = multivariate_normal(mean=np.asarray(params["shift"]), cov=w @ w.T).logpdf(x)
    np.testing.assert_allclose(flow.log_prob(params, jnp.asarray(x)), expected, rtol=1e-4,
                               atol=1e-4)


def test_affine_flow_integrates_to_one_in_1d():
    flow = affine_flow(1)
    params = dict(shift=jnp.array([0.7]), log_scale=jnp.array([-0.4]), lower=jnp.zeros((1, 1)))
    grid = jnp.linspace(-15.0, 15.0, 20001)[:, None]
    dens = jnp.exp(flow.log_prob(params, grid))
    assert float(jnp.trapezoid(dens, grid[:, 0])) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("mask,coupling", [("checkerboard", "mlp"), ("cyclic", "mlp"),
                                           ("checkerboard", "conv")])
def test_realnvp_log_det_is_the_jacobian(mask, coupling):
    """forward's log|det| equals slogdet of autodiff's Jacobian of the data -> latent map,
    and log_prob = log N(z) + log|det J|."""
    flow = real_nvp((2, 2), depth=4, hidden=8, mask=mask, dequantize=0.0, coupling=coupling)
    params = _perturbed(flow, jax.random.key(1), scale=0.5)
    x = jax.random.uniform(jax.random.key(2), (3, 4), minval=0.05, maxval=0.95)
    for xi in x:
        jac = jax.jacrev(lambda v: flow.forward(params, v.reshape(1, 2, 2))[0][0])(xi)
        z, log_det = flow.forward(params, xi.reshape(1, 2, 2))
        assert float(log_det[0]) == pytest.approx(float(jnp.linalg.slogdet(jac)[1]), abs=1e-3)
        expected = -0.5 * jnp.sum(z * z) - 2.0 * np.log(2 * np.pi) + log_det[0]
        assert float(flow.log_prob(params, xi.reshape(1, 2, 2))[0]) == pytest.approx(
            float(expected), abs=1e-4)


@pytest.mark.parametrize("coupling", ["conv", "mlp"])
def test_realnvp_density_integrates_to_one_on_the_unit_cube(coupling):
    """Images live in (0, 1)^D, so E_{u ~ U(0,1)^D}[p(u)] = integral of p (Monte Carlo),
    which is the prior mass of the cube's image: the logit of alpha + (1 - 2 alpha) x maps
    the cube onto a box (+-2.9 at the default alpha = 0.05, where the mass outside reaches
    0.30 for a perturbed checkerboard conv flow); at alpha = 1e-3 (+-6.9) it is 1 up to
    the noise."""
    flow = real_nvp((2, 2), depth=2, hidden=8, mask="cyclic", dequantize=0.0, alpha=1e-3,
                    coupling=coupling, conv="native")     # lax convolutions (as on a GPU)
    params = _perturbed(flow, jax.random.key(5), scale=0.2)
    u = jax.random.uniform(jax.random.key(6), (400_000, 2, 2))
    dens = jnp.exp(jax.jit(flow.log_prob)(params, u))
    mean, se = float(dens.mean()), float(dens.std() / np.sqrt(u.shape[0]))
    assert abs(mean - 1.0) < 5 * se + 0.02


def test_coupling_masks():
    cb = coupling_masks(4, 4, 2, "checkerboard")
    np.testing.assert_array_equal(cb[0] + cb[1], np.ones(16))
    cy = np.asarray(coupling_masks(4, 4, 4, "cyclic")).reshape(4, 4, 4)
    assert cy[0, :2].all() and not cy[0, 2:].any()          # top half conditions
    assert cy[1, :, 2:].all() and not cy[1, :, :2].any()    # then right half
    assert cy.sum() == 4 * 8
    with pytest.raises(ValueError):
        coupling_masks(4, 4, 2, "diagonal")


def test_realnvp_parameter_count_matches_docstring():
    assert num_params(real_nvp().init(jax.random.key(0))) == 91_312         # 8 conv, h = 32
    assert num_params(real_nvp(coupling="mlp").init(jax.random.key(0))) == 2_561_952
    conv = real_nvp(depth=1, hidden=32, coupling="conv").init(jax.random.key(0))
    assert num_params(conv) - 2 * 784 == 11_218     # one coupling + the per-pixel affine


@pytest.mark.parametrize("coupling", ["conv", "mlp"])
def test_conv_coupling_is_local(coupling):
    """One conv coupling (three 3x3 convolutions) moves a pixel by a function of the
    conditioning pixels at most 3 rows and 3 columns away; an MLP coupling by pixels
    anywhere. Pixel (0, 1) is moved by the first checkerboard coupling."""
    flow = real_nvp((9, 9), depth=1, hidden=4, mask="checkerboard", dequantize=0.0,
                    coupling=coupling)
    params = _perturbed(flow, jax.random.key(3), scale=0.5)
    x = jax.random.uniform(jax.random.key(4), (81,), minval=0.1, maxval=0.9)
    jac = jax.jacrev(lambda v: flow.forward(params, v.reshape(1, 9, 9))[0][0])(x)
    dep = np.abs(np.asarray(jac)).reshape(9, 9, 9, 9)[0, 1] > 0
    window = np.zeros((9, 9), bool)
    window[:4, :5] = True
    others = dep.copy()
    others[0, 1] = False
    assert others[window].any()                  # moved by its neighbours
    assert dep[~window].any() == (coupling == "mlp")


def test_noisy_copies():
    params = affine_flow(3).init(jax.random.key(0))
    stacked = noisy_copies(params, jax.random.key(1), 4, 0.01)
    assert stacked["shift"].shape == (4, 3)
    diff = np.asarray(stacked["shift"] - params["shift"][None])
    assert 0 < np.abs(diff).max() < 0.1
    assert np.abs(diff[0] - diff[1]).max() > 0


def test_bad_config():
    with pytest.raises(ValueError):
        affine_flow(3, structure="planar")
    with pytest.raises(ValueError):
        real_nvp((28, 28), mask="channel")
    with pytest.raises(ValueError):
        real_nvp((28, 28), coupling="resnet")
