"""SR-FCA: trimmed mean, cross-cluster loss, ONE_SHOT / REFINE / MERGE on a separated mixture."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax import metrics
from fedclust_jax.algorithms.srfca import SRFCA, SRFCAConfig
from fedclust_jax.core import pairwise
from fedclust_jax.core.losses import loss_matrix
from fedclust_jax.core.pytree import flatten_stacked
from fedclust_jax.core.robust import cluster_trimmed_mean
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.synthetic import gaussian_mixture_classification
from fedclust_jax.models.mlp import mlp


def numpy_trimmed_mean(v, beta):
    s = np.sort(v, axis=0)
    t = int(np.floor(beta * len(v)))
    return s[t:len(v) - t].mean(axis=0)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.15, 0.25, 0.4])
def test_cluster_trimmed_mean_matches_numpy(beta):
    rng = np.random.default_rng(3)
    sizes = [1, 2, 3, 4, 7, 10]                       # one cluster per size, plus an empty one
    assign = np.concatenate([np.full(s, j) for j, s in enumerate(sizes)] + [np.full(3, -1)])
    rng.shuffle(assign)
    values = rng.normal(size=(len(assign), 5, 3)).astype(np.float32)
    values[rng.uniform(size=values.shape) < 0.05] *= 100.0        # outliers
    previous = rng.normal(size=(len(sizes) + 1, 5, 3)).astype(np.float32)
    out = np.asarray(cluster_trimmed_mean(jnp.asarray(values), jnp.asarray(assign, jnp.int32),
                                          jnp.asarray(previous), beta))
    for j in range(len(sizes)):
        np.testing.assert_allclose(out[j], numpy_trimmed_mean(values[assign == j], beta),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[-1], previous[-1])          # empty cluster kept
    if beta == 0.0:
        for j in range(len(sizes)):
            np.testing.assert_allclose(out[j], values[assign == j].mean(0), rtol=1e-5, atol=1e-5)


def test_cross_cluster_loss_definition_pair_by_pair():
    data = gaussian_mixture_classification(jax.random.key(0), num_clients=5, num_clusters=1,
                                           samples_per_client=7, test_samples_per_client=3,
                                           dim=3, num_classes=3)
    data = data.replace(count=jnp.asarray([7, 5, 7, 3, 6], jnp.int32))
    model = mlp((3, 3))
    init = jax.jit(jax.vmap(model.init))    # jitted: one program each, not one per operation
    w = init(jax.random.split(jax.random.key(1), 5))      # client models
    omega = init(jax.random.split(jax.random.key(2), 2))  # cluster models
    member = jnp.asarray([[1, 0, 1, 0, 0], [0, 1, 0, 1, 1]], bool)

    loss = jax.jit(model.loss)                        # one program per client size n

    def f(i, params):                                 # f_i(w): client i's empirical loss
        n = int(data.count[i])
        return float(loss(params, data.x[i, :n], data.y[i, :n], jnp.ones(n, bool)))

    one = lambda tree, j: jax.tree.map(lambda a: a[j], tree)
    losses = jax.jit(lambda p: loss_matrix(model, p, data.x, data.y, data.count)[0])
    L, Lc = losses(w), losses(omega)
    dcc = np.asarray(jax.jit(pairwise.client_cross_loss)(L))
    dic = np.asarray(jax.jit(pairwise.client_cluster_cross_loss)(L, Lc, member))
    dkk = np.asarray(jax.jit(pairwise.cluster_cross_loss)(Lc, member))
    groups = [np.flatnonzero(m) for m in np.asarray(member)]
    for i in range(5):
        for j in range(5):
            want = 0.5 * (f(i, one(w, j)) + f(j, one(w, i)))
            assert dcc[i, j] == pytest.approx(want, rel=1e-4)
        for c, g in enumerate(groups):
            f_c = np.mean([f(k, one(w, i)) for k in g])
            assert dic[i, c] == pytest.approx(0.5 * (f(i, one(omega, c)) + f_c), rel=1e-4)
    for c, g in enumerate(groups):
        for c2, g2 in enumerate(groups):
            a = np.mean([f(k, one(omega, c2)) for k in g])
            b = np.mean([f(k, one(omega, c)) for k in g2])
            assert dkk[c, c2] == pytest.approx(0.5 * (a + b), rel=1e-4)


@functools.lru_cache(maxsize=None)
def mixture():
    return gaussian_mixture_classification(
        jax.random.key(0), num_clients=24, num_clusters=3, samples_per_client=60,
        test_samples_per_client=30, dim=8, num_classes=4, class_separation=4.0)


def make(**kw):
    params = dict(lam=1.5, t=2, beta=0.1, one_shot_steps=100, rounds_per_refine=10,
                  local=LocalTraining(steps=5, lr=0.1), k_max=6)
    params.update(kw)
    return SRFCA(mlp((8, 4)), SRFCAConfig(**params))


@pytest.mark.parametrize("kw", [dict(), dict(metric="l2", lam=None, lam_quantile=0.25,
                                              clients_per_cluster=5, graph="pivot"),
                                dict(refine_init="fresh", drop_small=True, clients_per_cluster=4,
                                     max_participants=8),
                                dict(one_shot_init="independent", sequential=True,
                                     clients_per_cluster=4, refine_init="fresh"),
                                dict(sequential=True)])
def test_srfca_recovers_clusters_without_k(kw):
    data = mixture()
    alg = make(**kw)
    state = jax.jit(alg.init)(jax.random.key(1), data)
    if "graph" not in kw:          # greedy pivots may split a cluster; MERGE then joins it
        assert metrics.misclustering(state.one_shot_assign, data.cluster) == 0.0
    step = jax.jit(alg.round)
    for r in range(2):
        state, m = step(state, jax.random.key(10 + r), data)
        assert int(m["num_clusters"]) == 3
        assert metrics.misclustering(state.assign, data.cluster) == 0.0
    ev = jax.jit(alg.evaluate)(state, data)
    local = jax.jit(alg.evaluate_local)(state, data)
    assert np.nanmean(ev["assigned_test_acc"]) > 0.85
    assert np.nanmean(ev["assigned_test_acc"]) > np.mean(local["test_acc"]) - 0.02
    assert int(ev["num_clusters"]) == 3


def test_merge_joins_a_split_cluster_and_reassigns_unassigned():
    data = mixture()
    alg = make()
    state = jax.jit(alg.init)(jax.random.key(1), data)
    split = np.asarray(state.one_shot_assign).copy()
    first = np.flatnonzero(split == split[0])
    split[first[: len(first) // 2]] = 3                  # true cluster 0 split in two proxies
    split[first[-1]] = -1                                # and one client left unassigned
    state = state.replace(assign=jnp.asarray(split), active=jnp.arange(6) < 4)
    state, m = jax.jit(alg.round)(state, jax.random.key(5), data)
    assert int(m["num_clusters"]) == 3
    assert int(m["unassigned"]) == 0
    assert metrics.misclustering(state.assign, data.cluster) == 0.0
    np.testing.assert_array_equal(np.asarray(state.active), [1, 1, 1, 0, 0, 0])


def test_zero_lambda_leaves_everyone_unassigned_and_refine_keeps_no_cluster():
    data = mixture()
    alg = make(lam=0.0, one_shot_steps=5)
    state = jax.jit(alg.init)(jax.random.key(1), data)
    assert (np.asarray(state.one_shot_assign) == -1).all()
    assert not np.asarray(state.active).any()
    state, m = jax.jit(alg.round)(state, jax.random.key(2), data)
    assert int(m["num_clusters"]) == 0 and int(m["unassigned"]) == data.num_clients


@pytest.mark.parametrize("bad, match", [
    (dict(beta=0.5), "beta"), (dict(t=0), "t = 0 is too small"), (dict(lam=None), "lambda"),
    (dict(lam_quantile=1.5), "lam_quantile"), (dict(metric="cos"), "distance"),
    (dict(graph="x"), "graph"), (dict(refine_init="x"), "refine_init"),
    (dict(clients_per_cluster=0), "clients_per_cluster"), (dict(k_max=0), "k_max"),
    (dict(one_shot_init="shared"), "one_shot_init")])
def test_bad_config_is_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        SRFCAConfig(**bad)


def test_srfca_through_the_experiment_runner():
    from fedclust_jax.experiment import ExperimentConfig, run_experiment
    cfg = ExperimentConfig(
        dataset="gaussian-mixture",
        data=dict(num_clients=12, num_clusters=2, samples_per_client=40, dim=6, num_classes=3,
                  class_separation=4.0),
        model="mlp", model_args=dict(hidden=()), algorithm="srfca",
        params=dict(lam=1.0, t=2, beta=0.1, one_shot_steps=60, rounds_per_refine=5, steps=5,
                    lr=0.1, k_max=4),
        rounds=2, seed=0)
    out = run_experiment(cfg, progress=False)
    assert out["metrics"]["num_clusters_found"] == 2
    assert out["metrics"]["misclustering"] == 0.0


def test_independent_one_shot_init_gives_each_client_its_own_start():
    data = mixture()
    common = jax.jit(make(one_shot_steps=1, local=LocalTraining(steps=1, lr=1e-6)).init)(
        jax.random.key(1), data)
    indep = jax.jit(make(one_shot_steps=1, local=LocalTraining(steps=1, lr=1e-6),
                         one_shot_init="independent").init)(jax.random.key(1), data)
    w_common = np.asarray(flatten_stacked(common.local))
    w_indep = np.asarray(flatten_stacked(indep.local))
    np.testing.assert_allclose(w_common, w_common[:1].repeat(len(w_common), 0), atol=1e-5)
    assert np.abs(w_indep[1:] - w_indep[:1]).max(1).min() > 1e-2


def test_refine_uses_lr_decay():
    """Review slip: REFINE trained with lr and ignored lr_decay. With one FedAvg round per
    REFINE, REFINE 1 under (lr 0.1, decay 0.5) equals REFINE 1 under (lr 0.05, no decay)
    from the same state, and differs from (lr 0.1, no decay)."""
    data = mixture()
    small = dict(one_shot_steps=20, rounds_per_refine=1)
    decayed = make(local=LocalTraining(steps=2, lr=0.1, lr_decay=0.5), **small)
    state = jax.jit(decayed.init)(jax.random.key(1), data)
    state, _ = jax.jit(decayed.round)(state, jax.random.key(2), data)
    assert int(state.round) == 1
    halved = make(local=LocalTraining(steps=2, lr=0.05), **small)
    plain = make(local=LocalTraining(steps=2, lr=0.1), **small)
    got, want, undecayed = (jax.jit(a.round)(state, jax.random.key(3), data)[0].params
                            for a in (decayed, halved, plain))
    for g, w, u in zip(jax.tree.leaves(got), jax.tree.leaves(want), jax.tree.leaves(undecayed)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-7)
    assert any(np.abs(np.asarray(g) - np.asarray(u)).max() > 1e-4
               for g, u in zip(jax.tree.leaves(got), jax.tree.leaves(undecayed)))


def test_variant_sets_the_code_choices_and_flags_override_it():
    paper = SRFCAConfig().resolved()
    assert (paper.graph, paper.refine_init, paper.one_shot_init, paper.sequential,
            paper.drop_small) == ("components", "continue", "common", False, False)
    code = SRFCAConfig(variant="authors-code").resolved()
    assert (code.graph, code.refine_init, code.one_shot_init, code.sequential,
            code.drop_small) == ("pivot", "fresh", "independent", True, True)
    ablation = SRFCAConfig(variant="authors-code", graph="components").resolved()
    assert ablation.graph == "components" and ablation.sequential is True
    assert make(variant="authors-code").cfg.sequential is True
    with pytest.raises(ValueError, match="variant"):
        SRFCAConfig(variant="code")
