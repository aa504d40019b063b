"""FC / MC / Myopic (threshold-clustering paper) and the threshold paper's Figure 1 examples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.fc import FCConfig, FederatedClustering, fc_direction, random_groups
from fedclust_jax.algorithms.mc import MCConfig, MomentumClustering, momentum_update
from fedclust_jax.algorithms.myopic import myopic_direction
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.linear import linear_regression

RNG = np.random.default_rng(0)


def test_fc_gram_equals_points_in_a_round():
    """FC with random subgroups, minibatches and Byzantine clients: both TC methods give the
    same models after three rounds."""
    rng = np.random.default_rng(5)
    n = 12
    x = rng.normal(size=(n, 20, 4)).astype(np.float32)
    w = np.where(np.arange(n)[:, None] < 6, 1.0, -1.0) * np.ones((n, 4))
    y = np.einsum("nsd,nd->ns", x, w).astype(np.float32)
    cnt = jnp.full(n, 20, jnp.int32)
    data = FederatedData(x=jnp.asarray(x), y=jnp.asarray(y), count=cnt, x_test=jnp.asarray(x),
                         y_test=jnp.asarray(y), count_test=cnt,
                         cluster=jnp.asarray(np.arange(n) >= 6, jnp.int32), task="regression")
    out = []
    for method in ("points", "gram"):
        alg = FederatedClustering(linear_regression(4), FCConfig(
            local=LocalTraining(steps=1, lr=0.1, batch_size=5), num_groups=2, byz_frac=0.2,
            attack="gaussian", radius_quantile=0.5, tc_iters=4, tc_method=method))
        state = alg.init(jax.random.key(0), data)
        for t in range(3):
            state = alg.round(state, jax.random.key(t), data)[0]
        out.append(np.asarray(state.params["theta"]))
    assert np.abs(out[0] - out[0][:1]).max() > 0.01         # clients moved apart
    np.testing.assert_allclose(out[1], out[0], atol=1e-5)


# ---------------------------------------------------------------- Figure 1a: Myopic

ETA = 0.1
_myopic = jax.jit(myopic_direction, static_argnums=2)
_fc = jax.jit(fc_direction, static_argnames=("iters", "radius"))


def _grads_1a(x):
    g1 = x[0] / (3 * ETA)
    x2 = x[1]
    g2 = np.where(x2 < 1, 12 * x2 * (x2 - 1) ** 2, (x2 - 1) / ETA)
    g3 = (x[2] - 2) / ETA
    return np.array([g1, g2, g3], np.float32)


def test_figure_1a_myopic_stalls_client_two():
    x = np.array([1.5, 1.5, 1.5], np.float32)
    g = _grads_1a(x)
    np.testing.assert_allclose(g * 2 * ETA, [1, 1, -1], rtol=1e-5)
    for t in range(30):
        v, _ = _myopic(jax.random.key(t), jnp.asarray(_grads_1a(x))[:, None], 2)
        x = x - ETA * np.asarray(v)[:, 0]
        if t == 0:
            np.testing.assert_allclose(x, [1, 1, 2], atol=1e-6)
            np.testing.assert_allclose(_grads_1a(x), [1 / (3 * ETA), 0, 0], atol=1e-5)
    assert x[1] == 1.0                           # client 2 never leaves the saddle at 1


def test_figure_1a_fc_one_step_and_limit():
    g = jnp.asarray([[1 / (3 * ETA)], [0.0], [-1 / ETA]])
    tau = 0.5 / ETA                              # in [1/(3 eta), 1/eta)
    v1 = _fc(g, g[1], iters=1, radius=tau)
    np.testing.assert_allclose(v1, [1 / (9 * ETA)], rtol=1e-5)
    np.testing.assert_allclose(1 - ETA * v1, [8 / 9], rtol=1e-5)
    np.testing.assert_allclose(_fc(g, g[1], iters=200, radius=tau), [1 / (6 * ETA)], rtol=1e-4)

    def grads_at(x):                             # the three clients' gradients at x (jnp)
        g2 = jnp.where(x < 1, 12 * x * (x - 1) ** 2, (x - 1) / ETA)
        return jnp.stack([x / (3 * ETA), g2, (x - 2) / ETA])[:, None]

    def step(x, _):
        g = grads_at(x)
        return x - ETA * fc_direction(g, g[1], iters=50, radius=tau)[0], None

    x2 = jax.jit(lambda x: jax.lax.scan(step, x, None, length=400)[0])(jnp.float32(1.0))
    assert abs(float(x2)) < 0.05                 # FC's client 2 reaches its minimum 0


# ---------------------------------------------------------------- Figure 1b: IFCA

def _two_quadratics():
    x = jnp.ones((2, 1, 1))
    y = jnp.asarray([[-0.5], [0.5]])
    one = jnp.ones(2, jnp.int32)
    return FederatedData(x=x, y=y, count=one, x_test=x, y_test=y, count_test=one,
                         cluster=jnp.asarray([0, 1], jnp.int32), task="regression")


@pytest.mark.parametrize("option", ["gradient", "model"])
def test_figure_1b_ifca_stuck(option):
    data = _two_quadratics()
    model = linear_regression(1)
    alg = IFCA(model, IFCAConfig(num_clusters=2, option=option, local=LocalTraining(steps=1, lr=0.1)))
    state = alg.init(jax.random.key(0), data, {"theta": jnp.asarray([[-1.5], [0.0]])})
    step = jax.jit(lambda s, k: alg.round(s, k, data)[0])
    for t in range(20):
        state = step(state, jax.random.key(t))
    np.testing.assert_allclose(state.params["theta"][:, 0], [-1.5, 0.0], atol=1e-6)
    np.testing.assert_array_equal(state.assign, [1, 1])


def test_figure_1b_fc_separates():
    data = _two_quadratics()
    alg = FederatedClustering(linear_regression(1), FCConfig(
        local=LocalTraining(steps=1, lr=0.1), tc_iters=10, radius=1.0, radius_quantile=None))
    state = alg.init(jax.random.key(0), data, {"theta": jnp.zeros((2, 1))})
    step = jax.jit(lambda s, k: alg.round(s, k, data)[0])
    for t in range(100):
        state = step(state, jax.random.key(t))
    np.testing.assert_allclose(state.params["theta"][:, 0], [-0.5, 0.5], atol=1e-3)


# ---------------------------------------------------------------- momentum, MC

def test_momentum_stationary_variance():
    sigma, chains = 2.0, 40_000
    for alpha in (0.1, 0.5):
        key = jax.random.key(int(alpha * 10))
        m = jnp.zeros(chains)
        for t in range(150):
            m = momentum_update(m, sigma * jax.random.normal(jax.random.fold_in(key, t), (chains,)), alpha)
        expected = alpha * sigma ** 2 / (2 - alpha)
        assert abs(float(m.var()) / expected - 1) < 0.04


def test_fc_and_mc_on_two_clusters():
    """Eight clients in two clusters of 1-D quadratics (minima -1 and +1): FC from spread
    starts and MC from one common start reach their own cluster's minimum; MC finds the
    clusters."""
    x = jnp.ones((8, 1, 1))
    y = jnp.asarray([[-1.0]] * 4 + [[1.0]] * 4)
    one = jnp.ones(8, jnp.int32)
    data = FederatedData(x=x, y=y, count=one, x_test=x, y_test=y, count_test=one,
                         cluster=jnp.asarray([0] * 4 + [1] * 4, jnp.int32), task="regression")
    model = linear_regression(1)
    runs = ((FederatedClustering(model, FCConfig(local=LocalTraining(steps=1, lr=0.1),
                                                 radius_quantile=0.5)),
             {"theta": jnp.linspace(-0.3, 0.3, 8)[:, None]}),
            (MomentumClustering(model, MCConfig(num_clusters=2, alpha=0.5, radius_quantile=0.3,
                                                local=LocalTraining(steps=1, lr=0.1))),
             {"theta": jnp.zeros((8, 1))}))
    for alg, start in runs:
        state = alg.init(jax.random.key(0), data, start)
        step = jax.jit(lambda s, k, alg=alg: alg.round(s, k, data)[0])
        for t in range(150):
            state = step(state, jax.random.key(t))
        np.testing.assert_allclose(state.params["theta"][:, 0], [-1] * 4 + [1] * 4, atol=0.02)
    a = np.asarray(state.assign)
    assert len(set(a[:4])) == 1 and len(set(a[4:])) == 1 and a[0] != a[4]


def test_config_validation():
    with pytest.raises(ValueError, match="exactly one"):
        FCConfig(radius=1.0, radius_quantile=0.2)
    with pytest.raises(ValueError, match="alpha"):
        MCConfig(alpha=0.0)
    with pytest.raises(ValueError, match="tc_method"):
        FCConfig(tc_method="exact")
    with pytest.raises(ValueError, match="clients"):
        MomentumClustering(linear_regression(1), MCConfig(num_clusters=3)).check_data(_two_quadratics())


# ---------------------------------------------------------------- Figure 1c: CFL

def test_figure_1c_cfl_first_split_separates_two_and_three_about_half_the_time():
    """g1 = x, g2 = x - 1/2, g3 = x or x - 1 (one of two samples per step); true clusters
    {1}, {2, 3}. Near the FedAvg optimum (1/3) the first split is {1, 3} | {2} when client 3
    drew y = 0 and {1} | {2, 3} otherwise; CFL never re-merges."""
    from fedclust_jax.algorithms.cfl import CFL, CFLConfig
    x = jnp.ones((3, 2, 1))
    y = jnp.asarray([[0.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    data = FederatedData(x=x, y=y, count=jnp.asarray([2, 2, 2], jnp.int32), x_test=x, y_test=y,
                         count_test=jnp.asarray([2, 2, 2], jnp.int32),
                         cluster=jnp.asarray([0, 1, 1], jnp.int32), task="regression")
    alg = CFL(linear_regression(1, init="zeros"), CFLConfig(
        eps1=0.05, eps2=0.05, min_size=2, warmup=30, k_max=4,
        local=LocalTraining(steps=1, lr=0.1, batch_size=1)))

    def run(seed):
        state = alg.init(jax.random.key(0), data)

        def body(s, t):
            s = alg.round(s, jax.random.fold_in(jax.random.key(seed), t), data)[0]
            return s, s.assign
        return jax.lax.scan(body, state, jnp.arange(60))[1]                 # [T, 3]

    history = np.asarray(jax.jit(jax.vmap(run))(jnp.arange(24)))
    separated_23 = []
    for h in history:
        split_at = np.argmax((h != h[0]).any(1))
        assert (h[split_at:] != h[0]).any(1).all()                           # never undone
        first = h[split_at]
        separated_23.append(first[1] != first[2])
        if first[1] != first[2]:
            assert (h[split_at:, 1] != h[split_at:, 2]).all()
    assert 0.2 <= np.mean(separated_23) <= 0.8


def test_random_groups_partition_clients():
    members, mask = random_groups(jax.random.key(3), 19, 4)
    members, mask = np.asarray(members), np.asarray(mask)
    assert members.shape == (19, 5)
    groups = {tuple(sorted(m[k])) for m, k in zip(members, mask)}
    assert sorted(i for g in groups for i in g) == list(range(19))          # a partition
    for i in range(19):
        assert i in members[i][mask[i]]                                      # own group


def _key_recorder(monkeypatch, module):
    """Replaces ``module.client_gradient`` by one that records its key and returns zeros;
    returns the list the keys go to (as uint32 pairs)."""
    seen = []

    def record(k):
        seen.extend(map(tuple, np.asarray(k).reshape(-1, 2).tolist()))

    def fake_gradient(model, local, params, x, y, count, key):
        jax.debug.callback(record, jax.random.key_data(key))
        return jax.tree.map(jnp.zeros_like, params)

    monkeypatch.setattr(module, "client_gradient", fake_gradient)
    return seen


class _NoiseKeys:
    """An attack that records the key its ``corrupt`` gets and sends the uploads unchanged."""

    def __init__(self):
        self.seen = []

    def eval_params(self, p):
        return p

    def flip_labels(self, y, byz, num_classes=0):
        return y

    def corrupt(self, key, g, assign, byz, k, num_byz=None):
        jax.debug.callback(lambda d: self.seen.extend(map(tuple, np.asarray(d).reshape(-1, 2).tolist())),
                           jax.random.key_data(key))
        return g


def test_fc_attack_noise_keys_differ_from_minibatch_keys(monkeypatch):
    """Review slip: the attack noise of client i was drawn with fold_in(keys[i], 7), the
    key of client i's minibatch at client 7's model."""
    import sys
    n = 9
    data = _regression_clients(n)
    alg = FederatedClustering(linear_regression(3), FCConfig(
        local=LocalTraining(steps=1, lr=0.1, batch_size=2), tc_iters=1))
    batch_keys = _key_recorder(monkeypatch, sys.modules[FederatedClustering.__module__])
    alg.attack = _NoiseKeys()
    alg.round(alg.init(jax.random.key(0), data), jax.random.key(1), data)
    assert len(set(batch_keys)) == n * n and len(set(alg.attack.seen)) == n
    assert not set(batch_keys) & set(alg.attack.seen)


def test_mc_runs_kmeans_in_round_zero_only(monkeypatch):
    """Review slip: MC ran k-means every round and used it only in round 0."""
    import sys
    module = sys.modules[MomentumClustering.__module__]
    calls = []
    real = module.kmeans

    def counted(*args, **kw):
        out = real(*args, **kw)
        jax.debug.callback(lambda c: calls.append(1), out[0].sum())
        return out

    monkeypatch.setattr(module, "kmeans", counted)
    data = _regression_clients(6)
    alg = MomentumClustering(linear_regression(3), MCConfig(num_clusters=2))
    step = jax.jit(alg.round)
    state = alg.init(jax.random.key(0), data)
    for t in range(3):
        state, _ = step(state, jax.random.key(t), data)
    jax.effects_barrier()
    assert len(calls) == 1


def _regression_clients(n, per_client=4, dim=3):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(n, per_client, dim)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(n, per_client)), jnp.float32)
    count = jnp.full((n,), per_client, jnp.int32)
    return FederatedData(x=x, y=y, count=count, x_test=x, y_test=y, count_test=count,
                         cluster=jnp.zeros((n,), jnp.int32), task="regression")
