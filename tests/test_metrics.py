"""Clustering and parameter metrics against definitions and brute-force references."""

import itertools

import numpy as np
import pytest

from fedclust_jax.metrics import (adjusted_rand_index, matched_distances, misclustering,
                                  parameter_error)


def brute_force_ari(a, b):
    pairs = list(itertools.combinations(range(len(a)), 2))
    same_a = np.array([a[i] == a[j] for i, j in pairs])
    same_b = np.array([b[i] == b[j] for i, j in pairs])
    n11 = np.sum(same_a & same_b)
    total = len(pairs)
    expected = same_a.sum() * same_b.sum() / total
    top = (same_a.sum() + same_b.sum()) / 2
    return 1.0 if top == expected else (n11 - expected) / (top - expected)


def test_ari_matches_pair_counting_reference():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = rng.integers(2, 15)
        a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
        assert adjusted_rand_index(a, b) == pytest.approx(brute_force_ari(a, b), abs=1e-12)


def test_invariant_to_relabelling():
    rng = np.random.default_rng(1)
    true = rng.integers(0, 3, 40)
    found = np.where(rng.random(40) < 0.8, true, rng.integers(0, 4, 40))
    relabel = np.array([3, 0, 2, 1])[found]
    assert misclustering(relabel, true) == pytest.approx(misclustering(found, true))
    assert adjusted_rand_index(relabel, true) == pytest.approx(adjusted_rand_index(found, true))


def test_misclustering_known_answers():
    true = np.array([0, 0, 0, 1, 1, 1])
    assert misclustering(np.array([1, 1, 1, 0, 0, 0]), true) == 0.0
    assert misclustering(np.array([0, 0, 2, 1, 1, 1]), true) == pytest.approx(1 / 6)  # extra cluster
    assert misclustering(np.array([0, 0, -1, 1, 1, 1]), true) == pytest.approx(1 / 6)  # unassigned
    assert misclustering(np.array([0, 0, 0, 0, 0, 0]), true) == pytest.approx(0.5)
    assert misclustering(np.array([0, 1, 5]), np.array([-1, 0, 0])) == pytest.approx(0.5)  # -1 truth ignored
    assert adjusted_rand_index(np.array([4, 4, 4, 7, 7, 7]), true) == pytest.approx(1.0)


def test_parameter_error_matchings():
    truth = np.array([[0.0, 0.0], [10.0, 0.0]])
    est = np.array([[10.0, 1.0], [0.0, 2.0]])
    assert parameter_error(est, truth) == pytest.approx(1.5)
    np.testing.assert_allclose(matched_distances(est, truth), [2.0, 1.0])  # in truth order
    both_near_first = np.array([[0.0, 1.0], [0.0, 3.0]])
    assert parameter_error(both_near_first, truth, "nearest") == pytest.approx(2.0)
    assert parameter_error(both_near_first, truth, "hungarian") > 5
    with pytest.raises(ValueError, match="matching"):
        parameter_error(est, truth, "closest")
