"""CFL: bipartition, splitting opposite clusters, not splitting one cluster."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax import metrics
from fedclust_jax.algorithms.cfl import CFL, CFLConfig, bipartition
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.models.linear import linear_regression
from helpers import orthogonal_design


@pytest.mark.parametrize("linkage", ["single", "complete"])
def test_bipartition_separates_opposite_groups(linkage):
    v = jnp.asarray([[1.0, 0.1], [1.0, 0.0], [0.9, -0.1], [-1.0, 0.0], [-1.0, 0.2], [0.0, 5.0]])
    u = v / jnp.linalg.norm(v, axis=1, keepdims=True)
    member = jnp.asarray([1, 1, 1, 1, 1, 0], bool)
    side = np.asarray(bipartition(u @ u.T, member, linkage))
    np.testing.assert_array_equal(side, [0, 0, 0, 1, 1, 0])
    assert not np.asarray(bipartition(u @ u.T, jnp.asarray([0, 1, 0, 0, 0, 0], bool), linkage)).any()


def largest_cross(sim, side, member=None):
    """The largest similarity between the two groups of a split of ``member`` (all: None)."""
    other = ~side if member is None else member & ~side
    return float(np.max(np.asarray(sim)[np.ix_(side, other)]))


def optimal_largest_cross(sim, member):
    """min over all bipartitions of the members of the largest cross similarity (brute force)."""
    idx = np.flatnonzero(member)
    best = np.inf
    for bits in itertools.product([False, True], repeat=len(idx) - 1):
        side = np.zeros(len(member), bool)
        side[idx[1:]] = bits
        if side.any():
            best = min(best, float(np.max(np.asarray(sim)[np.ix_(side, member & ~side)])))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_default_bipartition_is_the_optimal_one(seed):
    # Sattler et al.'s optimal bipartition: no split has a smaller largest cross similarity
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(8, 3))
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    sim = jnp.asarray(u @ u.T, jnp.float32)
    member = np.ones(8, bool)
    member[seed % 8] = False
    side = np.asarray(bipartition(sim, jnp.asarray(member)))
    assert side.any() and (member & ~side).any() and not (side & ~member).any()
    assert largest_cross(sim, side, member) == pytest.approx(optimal_largest_cross(sim, member),
                                                          abs=1e-6)


def test_complete_linkage_need_not_be_optimal():
    # a chain 0..6 a unit apart and a point 1.5 beyond it: the optimal split cuts the 1.5 gap,
    # complete linkage (Sattler et al.'s released code) cuts the chain
    x = np.r_[np.arange(7.0), 7.5]
    sim = jnp.asarray(-np.abs(x[:, None] - x[None, :]), jnp.float32)
    member = jnp.ones(8, bool)
    single = np.asarray(bipartition(sim, member, "single"))
    complete = np.asarray(bipartition(sim, member, "complete"))
    np.testing.assert_array_equal(single, [0] * 7 + [1])
    assert largest_cross(sim, single) == pytest.approx(-1.5)
    assert largest_cross(sim, complete) > largest_cross(sim, single) + 0.4


def run(theta_star, per_cluster, rounds, **kw):
    data = orthogonal_design(jnp.asarray(theta_star, jnp.float32), per_cluster)
    model = linear_regression(theta_star.shape[1], init="zeros")
    cfg = CFLConfig(**dict(dict(eps1=0.2, eps2=0.5, warmup=3, k_max=4,
                                local=LocalTraining(steps=2, lr=0.05)), **kw))
    alg = CFL(model, cfg)
    state = alg.init(jax.random.key(0), data)
    step = jax.jit(alg.round)
    for t in range(rounds):
        state, m = step(state, jax.random.key(t), data)
    return alg, state, data


def test_cfl_splits_opposite_update_directions():
    theta = np.ones((1, 6)) * 2.0
    alg, state, data = run(np.concatenate([theta, -theta]), 5, 12)
    assert int(state.active.sum()) == 2
    assert metrics.misclustering(state.assign, data.cluster) == 0.0
    ev = alg.evaluate(state, data)
    assert float(np.mean(ev["assigned_test_loss"])) < 1.0


def test_cfl_does_not_split_one_cluster():
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(1, 6)) * 2.0
    alg, state, data = run(theta, 10, 25)
    assert int(state.active.sum()) == 1
    assert (np.asarray(state.assign) == 0).all()


def test_cfl_forced_split_to_target():
    # the third cluster leans towards the first (cosine 1/3, not 0), so the first split puts
    # them together without an exact tie, and the forced second split separates them
    theta = np.ones((1, 6)) * 2.0
    alg, state, data = run(np.concatenate([theta, -theta, theta * 0.5 * np.r_[1, -1, 1, -1, 1, 1]]),
                           4, 10, target_clusters=3)
    assert int(state.active.sum()) == 3
    assert metrics.misclustering(state.assign, data.cluster) == 0.0


def test_cfl_bad_config():
    with pytest.raises(ValueError, match="target_clusters"):
        CFLConfig(target_clusters=9, k_max=8)
    with pytest.raises(ValueError, match="eps1"):
        CFLConfig(eps1=-1.0)
    with pytest.raises(ValueError, match="linkage"):
        CFLConfig(linkage="average")
    with pytest.raises(ValueError, match="linkage"):
        bipartition(jnp.eye(3), jnp.ones(3, bool), "average")
