"""End of run without redundant work: the one-pass training + test loss matrices, and
``objective_and_evaluate`` (IFCA, BR-IFCA, one-shot IFCA) equal to the objective and the
evaluation computed separately, in two passes, as before it existed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.base import evaluate_clusters
from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig
from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.oneshot_ifca import OneShotIFCA, OneShotIFCAConfig, OneShotIFCAState
from fedclust_jax.core.losses import loss_matrix_ids, train_test_loss_matrices
from fedclust_jax.experiment import end_of_run
from fedclust_jax.models.mlp import mlp
from helpers import small_classification

MODEL = mlp((6, 4, 3))
CHUNKS = (None, 5)   # one vmap; chunks of 5 over 12 clients (a padded last chunk)


def close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def data():
    return small_classification()


def cluster_params(key, k=3):
    return jax.vmap(MODEL.init)(jax.random.split(jax.random.key(key), k))


@pytest.mark.parametrize("chunk", CHUNKS)
def test_one_pass_equals_the_train_and_test_passes(data, chunk):
    params = cluster_params(0)
    one, two = jax.jit(lambda p: (
        train_test_loss_matrices(MODEL, p, data, chunk=chunk),
        (loss_matrix_ids(MODEL, p, data, None, chunk=chunk)[0],
         *loss_matrix_ids(MODEL, p, data, None, chunk=chunk, test=True))))(params)
    assert all(a.shape == (data.num_clients, 3) for a in one)
    close(one, two)


def two_pass(alg, state, data, active=None):
    """The evaluation as computed before ``objective_and_evaluate``: re-assignment from a
    training pass (masked to ``active``), then a separate test pass."""
    train = loss_matrix_ids(MODEL, state.params, data, None, chunk=alg.cfg.chunk)[0]
    if active is not None:
        train = jnp.where(active[None, :], train, jnp.inf)
    assign = jnp.argmin(train, axis=1).astype(jnp.int32)
    return dict(evaluate_clusters(MODEL, state.params, assign, data, chunk=alg.cfg.chunk,
                                  active=active), assign=assign, cluster_params=state.params)


def cases(data, chunk):
    ifca = IFCA(MODEL, IFCAConfig(num_clusters=3, chunk=chunk))
    brifca = BRIFCA(MODEL, BRIFCAConfig(num_clusters=3, byz_frac=0.25, chunk=chunk))
    oneshot = OneShotIFCA(MODEL, OneShotIFCAConfig(k_max=3, chunk=chunk))
    active = jnp.array([True, False, True])   # an inactive cluster never takes a client
    oneshot_state = OneShotIFCAState(params=cluster_params(2), active=active,
                                     assign=jnp.full((data.num_clients,), -1, jnp.int32),
                                     round=jnp.zeros((), jnp.int32))
    return [(ifca, ifca.init(jax.random.key(1), data), None),
            (brifca, brifca.init(None, data, params=cluster_params(3)), None),
            (oneshot, oneshot_state, active)]


def test_objective_and_evaluate_equal_the_separate_passes(data):
    """Chunks of 5 (one vmap: the one-pass test above)."""
    for alg, state, active in cases(data, 5):
        (objective, ev), want, objective_alone, ev_alone = jax.jit(lambda s: (
            alg.objective_and_evaluate(s, data), two_pass(alg, s, data, active),
            alg.objective(s, data), alg.evaluate(s, data)))(state)
        assert set(ev) == set(want) | ({"num_clusters"} if active is not None else set())
        np.testing.assert_array_equal(ev["assign"], want["assign"])
        close({k: ev[k] for k in want}, want)
        close(objective, objective_alone)
        close(ev_alone, ev)


def test_ifca_frozen_assignment_keeps_its_clusters(data):
    alg = IFCA(MODEL, IFCAConfig(num_clusters=2, assignment="oracle"))
    state = alg.init(jax.random.key(4), data)
    (objective, ev), ev_alone, objective_alone = jax.jit(lambda s: (
        alg.objective_and_evaluate(s, data), alg.evaluate(s, data), alg.objective(s, data)))(state)
    np.testing.assert_array_equal(ev["assign"], data.cluster)
    close(ev, ev_alone)
    close(objective, objective_alone)


@pytest.mark.parametrize("make", [
    lambda: IFCA(MODEL, IFCAConfig(num_clusters=3, chunk=5)),      # objective_and_evaluate
    lambda: FedAvg(MODEL, FedAvgConfig(chunk=5)),                  # objective, evaluate
])
def test_end_of_run_equals_objective_and_evaluate_per_restart(data, make):
    alg = make()
    states = jax.vmap(alg.init, in_axes=(0, None))(jax.random.split(jax.random.key(5), 2), data)
    objective, evaluation = end_of_run(alg, states, data, 2)
    want_objective, want = jax.jit(lambda s: (jax.vmap(alg.objective, in_axes=(0, None))(s, data),
                                              jax.vmap(alg.evaluate, in_axes=(0, None))(s, data)))(states)
    close(objective, want_objective)
    for r in range(2):
        ev = evaluation(r)
        assert evaluation(r) is ev   # computed once
        close(ev, jax.tree.map(lambda a: a[r], want))
