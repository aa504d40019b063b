"""UIFCA, k-FED, purity and the point-level heterogeneity recipe."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.kfed import kfed
from fedclust_jax.algorithms import uifca
from fedclust_jax.algorithms.uifca import (UIFCA, UIFCAConfig, assign_points,
                                           learn_cluster_models, point_nll, standardize_points)
from fedclust_jax.data.points import true_points
from fedclust_jax.data.points import (dominant_count, gaussian_clusters,
                                      heterogeneous_clusters, points_from_pools,
                                      subspace_clusters)
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.metrics import purity
from fedclust_jax.models.flows import affine_flow


# ---- purity ---------------------------------------------------------------------------

def test_purity_perfect_relabelled_and_floor():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 4, size=(5, 40))
    assert purity(true, true) == 1.0
    perm = np.array([2, 0, 3, 1])
    assert purity(perm[true], true) == 1.0
    share = np.bincount(true.ravel()).max() / true.size
    for _ in range(5):
        found = rng.integers(0, 3, size=true.shape)
        assert purity(found, true) >= share - 1e-12
    assert purity(np.zeros_like(true), true) == pytest.approx(share)


def test_purity_known_value_and_ignored_entries():
    true = np.array([0, 0, 0, 1, 1, 2, -1])
    found = np.array([0, 0, 1, 1, 1, 1, 5])
    # cluster 0: {0,0} -> 2; cluster 1: {0,1,1,2} -> 2; the -1 truth is left out
    assert purity(found, true) == pytest.approx(4 / 6)
    assert purity(np.array([-1, 0, 0]), np.array([0, 1, 1])) == pytest.approx(2 / 3)


# ---- heterogeneity recipe -------------------------------------------------------------

@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_recipe_composition(p):
    n, s, k = 8, 400, 4
    labels = np.asarray(heterogeneous_clusters(jax.random.key(0), n, s, k, p))
    n_dom = dominant_count(s, p)
    assert n_dom == round(s * p)
    dominant = np.arange(n) % k
    assert (labels[:, :n_dom] == dominant[:, None]).all()
    rest = labels[:, n_dom:]
    if rest.size:
        counts = np.bincount(rest.ravel(), minlength=k) / rest.size
        np.testing.assert_allclose(counts, 1.0 / k, atol=0.05)
    # expected share of the dominant cluster: p + (1 - p) / K
    share = (labels == dominant[:, None]).mean()
    assert share == pytest.approx(p + (1 - p) / k, abs=0.03)


def test_recipe_bad_config():
    with pytest.raises(ValueError, match="p must be in"):
        heterogeneous_clusters(jax.random.key(0), 4, 10, 2, 1.5)
    with pytest.raises(ValueError, match="K must be"):
        gaussian_clusters(jax.random.key(0), num_clusters=0)
    with pytest.raises(ValueError):
        subspace_clusters(jax.random.key(0), subspace_dim=40)


def test_generators_shapes_and_registry():
    g = build_dataset("uifca-gaussian", jax.random.key(0), num_clients=3,
                      points_per_client=50, heterogeneity=0.5)
    assert g.x.shape == (3, 50, 32) and g.point_cluster.shape == (3, 50)
    assert (np.asarray(g.cluster) == -1).all()
    s = build_dataset("uifca-subspace", jax.random.key(0), num_clients=4,
                      points_per_client=30, heterogeneity=1.0, jitter=0.0)
    np.testing.assert_array_equal(s.cluster, np.arange(4))
    # with no jitter every point lies in its cluster's 16-dim subspace
    bases = np.asarray(s.true_params)[np.asarray(s.point_cluster)]          # [N, s, d, r]
    x = np.asarray(s.x)
    proj = np.einsum("nsdr,nsr->nsd", bases, np.einsum("nsdr,nsd->nsr", bases, x))
    np.testing.assert_allclose(proj, x, atol=1e-4)


def test_points_from_pools():
    pools = [np.full((50, 2, 2), c, np.float32) for c in range(3)]
    d = points_from_pools(jax.random.key(0), pools, num_clients=3, points_per_client=20,
                          heterogeneity=0.5)
    np.testing.assert_array_equal(np.asarray(d.x)[..., 0, 0], np.asarray(d.point_cluster))
    with pytest.raises(ValueError, match="pool"):
        points_from_pools(jax.random.key(0), pools, num_clients=3, points_per_client=100,
                          heterogeneity=1.0)


# ---- k-FED ----------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.0, 1.0])
def test_kfed_recovers_gaussians(p):
    d = gaussian_clusters(jax.random.key(1), num_clients=4, points_per_client=300,
                          heterogeneity=p)
    r = kfed(jax.random.key(2), d.x, d.count, 4, iters=20, restarts=5)
    assert purity(r.assign, true_points(d)) == 1.0


def test_kfed_fails_on_subspaces():
    d = subspace_clusters(jax.random.key(1), num_clients=4, points_per_client=300,
                          heterogeneity=0.0)
    r = kfed(jax.random.key(2), d.x, d.count, 4, iters=20, restarts=5)
    assert purity(r.assign, true_points(d)) < 0.5


def test_kfed_padding_and_errors():
    d = gaussian_clusters(jax.random.key(1), num_clients=2, points_per_client=40)
    d = d.replace(count=jnp.array([40, 25], jnp.int32))
    r = kfed(jax.random.key(2), d.x, d.count, 2, iters=10, restarts=2)
    assert (np.asarray(r.assign)[1, 25:] == -1).all()
    with pytest.raises(ValueError):
        kfed(jax.random.key(2), d.x, d.count, 0)


# ---- UIFCA ----------------------------------------------------------------------------

def _two_gaussians(p, n=2, s=200):
    return gaussian_clusters(jax.random.key(3), num_clients=n, points_per_client=s,
                             num_clusters=2, dim=4, separation=10.0, heterogeneity=p)


SMALL = dict(num_clusters=2, comm_rounds=10, local_steps=20, lr=0.01)


def run(d, rounds, restarts=1, **params):
    """UIFCA through the runner on the given points, with purity curves every round."""
    cfg = ExperimentConfig(dataset="uifca-gaussian", algorithm="uifca",
                           params={**SMALL, **params}, rounds=rounds, restarts=restarts,
                           eval_every=1)
    return run_experiment(cfg, data=d, progress=False)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_uifca_separates_two_gaussians(p):
    d = _two_gaussians(p)
    alg = UIFCA(affine_flow(4), UIFCAConfig(**SMALL))
    start = alg.init(jax.random.key(0), d)
    assert purity(start.assign, true_points(d)) < 0.6   # the noisy copies' random split
    out = run(d, rounds=10)
    assert out["curves"]["round"] == list(range(1, 11))
    assert out["curves"]["purity"][-1] == 1.0 == out["metrics"]["purity"]


def test_kfed_then_uifca_keeps_a_perfect_start():
    d = _two_gaussians(0.5)
    start = kfed(jax.random.key(5), d.x, d.count, 2).assign
    assert purity(start, true_points(d)) == 1.0
    out = run(d, rounds=2, init_assign="kfed")
    assert out["curves"]["purity"] == [1.0, 1.0]


def test_oracle_start_is_the_true_clusters():
    d = _two_gaussians(0.5, s=50)
    alg = UIFCA(affine_flow(4), UIFCAConfig(**dict(SMALL, init_assign="oracle")))
    np.testing.assert_array_equal(alg.init(jax.random.key(0), d).assign, true_points(d))
    with pytest.raises(ValueError, match="oracle"):
        alg.init(jax.random.key(0), d.replace(point_cluster=None))


def test_assignment_is_argmin_nll_and_masks_padding():
    flow = affine_flow(2)
    p0 = flow.init(jax.random.key(0))
    params = jax.tree.map(lambda a: jnp.stack([a, a]), p0)
    params["shift"] = jnp.array([[0.0, 0.0], [10.0, 10.0]])
    x = jnp.array([[[0.1, 0.0], [9.0, 11.0], [5.0, 5.0]]])
    a = assign_points(flow, params, x, jnp.array([2]))
    np.testing.assert_array_equal(a, [[0, 1, -1]])


def test_point_nll_in_blocks_equals_all_at_once(monkeypatch):
    """Scoring 7 points per client in blocks of 3 (the last one padded) gives the NLLs of
    scoring them together."""
    flow = affine_flow(2)
    params = jax.vmap(flow.init)(jax.random.split(jax.random.key(1), 2))
    x = jax.random.normal(jax.random.key(2), (3, 7, 2))
    whole = point_nll(flow, params, x)
    monkeypatch.setattr(uifca, "POINT_BLOCK", 3)
    blocked = point_nll(flow, params, x)
    assert blocked.shape == (3, 7, 2)
    np.testing.assert_allclose(blocked, whole, rtol=1e-6)


def test_learning_weights_clients_by_subset_size():
    """tau = 1, M = 1, SGD: the new model is the |S_ik|-weighted mean of the client
    models; a flow with no points keeps its params."""
    flow = affine_flow(2)
    cfg = UIFCAConfig(num_clusters=2, comm_rounds=1, local_steps=1, batch_size=64, lr=0.1)
    params = jax.tree.map(lambda a: jnp.stack([a, a]), flow.init(jax.random.key(0)))
    x = jax.random.normal(jax.random.key(1), (2, 10, 2)) + jnp.array([[[3.0, 0]], [[-3.0, 0]]])
    assign = jnp.array([[0] * 8 + [-1] * 2, [0] * 2 + [-1] * 8]).astype(jnp.int32)
    new = learn_cluster_models(flow, cfg, params, x, assign, jax.random.key(2))
    grad = jax.grad(lambda p, xi: -flow.log_prob(p, xi).mean())
    p0 = jax.tree.map(lambda a: a[0], params)
    c0 = jax.tree.map(lambda a, g: a - 0.1 * g, p0, grad(p0, x[0, :8]))
    c1 = jax.tree.map(lambda a, g: a - 0.1 * g, p0, grad(p0, x[1, :2]))
    expected = jax.tree.map(lambda a, b: 0.8 * a + 0.2 * b, c0, c1)
    for k in expected:
        np.testing.assert_allclose(new[k][0], expected[k], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(new[k][1], params[k][1])


def test_options_restarts_and_errors():
    d = _two_gaussians(1.0, s=50)
    opts = dict(model_init="reinit", assign_with="previous", init_assign="random",
                optimizer="adam", lr=0.01, comm_rounds=1, local_steps=2)
    out = run(d, rounds=2, restarts=2, **opts)
    objective = out["restarts"]["objective"]
    assert len(objective) == 2 and out["restarts"]["chosen"] == int(np.argmin(objective))
    assert out["curves"]["objective"][-1] == pytest.approx(min(objective), rel=1e-5)
    assert out["curves"]["purity"][-1] == out["metrics"]["purity"]
    # assign_with="previous": the first round's assignment uses the initial flows
    cfg = UIFCAConfig(**dict(SMALL, **opts))
    alg = UIFCA(affine_flow(4), cfg)
    s0 = alg.init(jax.random.key(1), d)
    s1, _ = alg.round(s0, jax.random.key(2), d)
    np.testing.assert_array_equal(s1.assign, assign_points(alg.flow, s0.params, d.x, d.count))
    with pytest.raises(ValueError):
        UIFCAConfig(num_clusters=0)
    with pytest.raises(ValueError):
        UIFCAConfig(model_init="cold")
    with pytest.raises(ValueError):
        UIFCA(affine_flow(3)).init(jax.random.key(0), d)


def test_standardize_points_uses_real_points_only():
    d = gaussian_clusters(jax.random.key(0), num_clients=2, points_per_client=30, dim=3)
    d = d.replace(count=jnp.array([30, 20], jnp.int32))
    s = standardize_points(d)
    real = np.concatenate([np.asarray(s.x)[0], np.asarray(s.x)[1, :20]])
    np.testing.assert_allclose(real.mean(0), 0.0, atol=1e-5)
    assert real.var() == pytest.approx(1.0, rel=1e-4)
    assert (np.asarray(s.x)[1, 20:] == 0).all()
