"""Every client-level algorithm reads each client's data by id: on ``FederatedViews``
(one shared pool, transform on read) init, a round, the objective and the evaluation
equal the materialised arrays bit for bit, and never build every client's examples
(``x`` / ``y`` / ``x_test`` / ``y_test`` refuse)."""

import jax
import numpy as np
import pytest

from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.data import build_dataset
from fedclust_jax.data.views import FederatedViews
from fedclust_jax.models import mlp

SMALL = dict(steps=1, chunk=3)
CASES = {
    "srfca": dict(SMALL, one_shot_steps=1, rounds_per_refine=1, t=2, k_max=3),
    "cfl": dict(SMALL),
    "fedsoft": dict(SMALL, num_clusters=2, clients_per_cluster=2),
    "local-kmeans": dict(SMALL, num_clusters=2),
    "oneshot-ifca": dict(SMALL, one_shot_steps=1, t=2, k_max=3),
    "fc": dict(chunk=3, num_groups=2, tc_iters=1, byz_frac=0.25, attack="label_flip"),
    "mc": dict(chunk=3, num_clusters=2, tc_iters=1, byz_frac=0.25, attack="label_flip"),
    "ditto": dict(SMALL),
}


@pytest.fixture(scope="module")
def digit_views():
    v = build_dataset("rotated-digits", jax.random.key(0), num_clusters=2, num_clients=8, n=12,
                      n_test=4, views=True)
    return v, v.materialize()


@pytest.mark.parametrize("name", sorted(CASES))
def test_reads_views_by_client(digit_views, name, monkeypatch):
    views, data = digit_views
    alg = build_algorithm(name, mlp((64, 10)), CASES[name], data)

    def run(d):
        s = alg.init(jax.random.key(1), d)
        s = alg.round(s, jax.random.key(2), d)[0]
        return s, alg.objective(s, d), alg.evaluate(s, d)

    want = jax.jit(run)(data)

    def refuse(self):
        raise AssertionError(f"{name} read every client's data")
    for field in ("x", "y", "x_test", "y_test"):
        monkeypatch.setattr(FederatedViews, field, property(refuse))
    got = jax.jit(run)(views)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
