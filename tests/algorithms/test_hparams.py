"""Traced hyperparameters: a vmapped grid equals the concrete runs, for every algorithm."""

import os
import types
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedclust_jax.algorithms import hparams
from fedclust_jax.bounds import bounds_of
from fedclust_jax.algorithms.registry import (ALGORITHMS, build_algorithm, make_config,
                                             param_fields)
from fedclust_jax.core.robust import cluster_aggregate
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.data.points import points_from_pools
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.models.registry import build_model


def tiny_classification(num_clients=8, n=10, n_test=4, dim=4, classes=3):
    """Two clusters of clients whose labels are shifted by the cluster (numpy-built: no
    compilation)."""
    rng = np.random.default_rng(0)
    centres = 3 * rng.normal(size=(classes, dim)) / np.sqrt(dim)
    cluster = np.arange(num_clients) % 2

    def draw(m):
        c = rng.integers(0, classes, (num_clients, m))
        x = centres[c] + rng.normal(size=(num_clients, m, dim))
        return jnp.asarray(x, jnp.float32), jnp.asarray((c + cluster[:, None]) % classes, jnp.int32)

    (x, y), (xt, yt) = draw(n), draw(n_test)
    return FederatedData(x=x, y=y, count=jnp.full(num_clients, n, jnp.int32), x_test=xt,
                         y_test=yt, count_test=jnp.full(num_clients, n_test, jnp.int32),
                         cluster=jnp.asarray(cluster, jnp.int32), task="classification",
                         num_classes=classes)


@pytest.fixture(scope="module")
def setting():
    data = tiny_classification()
    return data, build_model("mlp", data, hidden=())


def one_round(alg, data):
    state = alg.init(jax.random.key(1), data)
    state, _ = alg.round(state, jax.random.key(2), data)
    return jax.tree.leaves(state.params)[0]


def test_local_training_grid_equals_concrete_runs(setting):
    data, model = setting
    base = {"num_clusters": 2, "momentum": 0.5, "weight_decay": 0.01}
    grid = {"lr": [0.02, 0.08], "momentum": [0.0, 0.5], "weight_decay": [0.0, 0.01]}
    concrete = [jax.jit(one_round, static_argnums=0)(
        build_algorithm("ifca", model, {**base, **{k: v[i] for k, v in grid.items()}}, data), data)
        for i in range(2)]
    alg = build_algorithm("ifca", model, base, data)
    traced = jax.jit(jax.vmap(lambda hp: one_round(hparams.rebuild(alg, hp), data)))(
        {k: jnp.asarray(v, jnp.float32) for k, v in grid.items()})
    np.testing.assert_allclose(np.asarray(traced), np.stack(concrete), rtol=1e-5, atol=1e-6)


def test_untraceable_field_is_refused(setting):
    data, model = setting
    alg = build_algorithm("ifca", model, {"num_clusters": 2}, data)
    with pytest.raises(ValueError, match="cannot trace \\['num_clusters'\\]"):
        hparams.with_values(alg.cfg, {"num_clusters": jnp.int32(3)})
    local = {"lr", "lr_decay", "momentum", "weight_decay"}
    assert set(hparams.traced_names(type(alg.cfg))) >= local


# ---------------------------------------------------------------- every algorithm

def _is_float(annotation) -> bool:
    """float, or float | None, with or without declared bounds."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (
        typing.Union, types.UnionType) else (annotation,)
    return float in [bounds_of(a)[0] for a in members]


def test_traced_names_are_float_fields_of_every_config():
    for name, builder in ALGORITHMS.items():
        fields = param_fields(builder.config_cls)
        traced = hparams.traced_params(name)
        assert traced == hparams.traced_names(builder.config_cls)
        assert len(set(traced)) == len(traced), name
        for p in traced:
            assert p in fields, (name, p)
            assert _is_float(fields[p][0]), (name, p, fields[p][0])
    with pytest.raises(ValueError, match="unknown algorithm"):
        hparams.traced_params("nope")


LOCAL_GRID = {"lr": [0.05, 0.2], "lr_decay": [1.0, 0.8], "momentum": [0.0, 0.5],
              "weight_decay": [0.0, 0.01]}
BYZ = {"byz_frac": 0.25}
ATTACK_GRID = {"attack_scale": [1.0, 3.0], "attack_std": [0.5, 2.0], "attack_eps": [0.1, 1.0],
               "attack_z": [0.5, 1.5]}

# name, dataset ("cls" | "points" | "images"), static base parameters, grid (2 values each)
CASES = [
    ("fedavg", "cls", {"steps": 2}, LOCAL_GRID),
    ("local", "cls", {"steps": 2}, LOCAL_GRID),
    ("oneshot-kmeans", "cls", {"steps": 2, "erm_steps": 3, "kmeans_iters": 3},
     {"erm_lr": [0.1, 0.4], **LOCAL_GRID}),
    ("srfca", "cls", {"steps": 2, "one_shot_steps": 3, "rounds_per_refine": 1, "k_max": 4},
     {"lam": [0.3, 3.0], "beta": [0.0, 0.3], **LOCAL_GRID}),
    ("cfl", "cls", {"steps": 2, "warmup": 0, "k_max": 4},
     {"eps1": [0.0, 10.0], "eps2": [10.0, 0.0], **LOCAL_GRID}),
    ("local-kmeans", "cls", {"steps": 2, "kmeans_iters": 3, "n_init": 1}, LOCAL_GRID),
    ("oneshot-ifca", "cls", {"steps": 2, "one_shot_steps": 3, "k_max": 4},
     {"lam": [0.3, 3.0], **LOCAL_GRID}),
    ("fedsoft", "cls", {"steps": 2, "clients_per_cluster": 3},
     {"sigma": [0.0, 0.4], **LOCAL_GRID}),
    ("brifca", "cls", {**BYZ, "attack": "gaussian", "projection_radius": 1.0},
     {"trim_frac": [0.0, 0.3], "projection_radius": [0.5, 2.0], **ATTACK_GRID, **LOCAL_GRID}),
    ("three-stage", "cls", {**BYZ, "attack": "sign_flip", "erm_steps": 3, "kmeans_iters": 3,
                            "kmeans_restarts": 2},
     {"erm_lr": [0.1, 0.4], "trim_frac": [0.0, 0.3], **ATTACK_GRID, **LOCAL_GRID}),
    ("fc", "cls", {**BYZ, "attack": "ipm", "tc_iters": 2},
     {"radius_quantile": [0.3, 0.8], **ATTACK_GRID, **LOCAL_GRID}),
    ("mc", "cls", {**BYZ, "attack": "scaling", "tc_iters": 2, "radius": 1.0,
                   "radius_quantile": None},
     {"alpha": [0.1, 0.9], "radius": [0.1, 1.0], **ATTACK_GRID, **LOCAL_GRID}),
    ("myopic", "cls", {**BYZ, "attack": "alie", "kmeans_iters": 3},
     {**ATTACK_GRID, **LOCAL_GRID}),
    ("ditto", "cls", {"steps": 2, "personal_steps": 2},
     {"lam": [0.0, 1.0], "personal_lr": [0.05, 0.2], **LOCAL_GRID}),
    ("knn-per", "cls", {"steps": 2, "neighbors": 3}, {"lam": [0.2, 0.9], **LOCAL_GRID}),
    ("uifca", "points", {"num_clusters": 2, "comm_rounds": 1, "local_steps": 2,
                         "batch_size": 8},
     {"lr": [1e-3, 1e-2], "init_noise": [0.01, 0.1]}),
    ("clustergan", "images", {"num_clusters": 2, "noise_dim": 3, "local_steps": 1,
                              "critic_steps": 1, "batch_size": 8, "width": 8, "fc_width": 32},
     {"noise_std": [0.1, 0.5], "beta_n": [1.0, 10.0], "beta_c": [1.0, 10.0],
      "gp_weight": [1.0, 10.0], "lr": [1e-3, 5e-3]}),
]


def _stripes():
    rng = np.random.default_rng(0)
    horiz = np.broadcast_to((np.arange(8) % 2 == 0).astype(np.float32)[:, None], (8, 8))
    pools = [np.clip(p + 0.15 * rng.normal(size=(40, 8, 8)), 0, 1).astype(np.float32)
             for p in (horiz, horiz.T)]
    return points_from_pools(jax.random.key(0), pools, num_clients=2, points_per_client=8,
                             heterogeneity=0.5)


@pytest.fixture(scope="module")
def datasets(setting):
    cls, _ = setting
    points = build_dataset("uifca-gaussian", jax.random.key(0), num_clients=2,
                           points_per_client=12, num_clusters=2, dim=2)
    images = _stripes()
    return {"cls": setting,
            "points": (points, build_model("affine-flow", points)),
            "images": (images, None)}


def two_rounds(alg, data):
    """Final state (and, for kNN-Per, whose lam only mixes predictions, the evaluation)
    after init and two rounds (lr_decay acts from the second)."""
    state = alg.init(jax.random.key(1), data)
    state = jax.lax.scan(lambda s, r: (alg.round(s, jax.random.fold_in(jax.random.key(2), r),
                                                 data)[0], None), state, jnp.arange(2))[0]
    if alg.name == "knn-per":
        return state, alg.evaluate(state, data)["test_loss"]
    return state


def _arrays(tree):
    """The tree's leaves as numpy arrays (random keys as their key data)."""
    return [np.asarray(jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key)
                       else a) for a in jax.tree.leaves(tree)]


# Compiling three programs per algorithm costs seconds each on a CPU, so by default the
# numerical comparison runs for the algorithms whose traced fields take their own code paths
# (ONE_SHOT and REFINE, trimmed means and costs, attacks and projection, the flows' own lr);
# the others are traced (the vmapped grid builds as one program, no compilation).
# FEDCLUST_ALL_GRIDS=1 compares every algorithm (several minutes on a CPU).
COMPARED = {"srfca", "three-stage", "brifca", "uifca"}
ALL_GRIDS = os.environ.get("FEDCLUST_ALL_GRIDS") == "1"


def _grid_case(datasets, name, dataset, base, grid):
    data, model = datasets[dataset]
    assert set(grid) <= set(hparams.traced_params(name))
    base = {**base, "chunk": None}   # one vmap over the clients: the smallest program
    points = [{k: v[i] for k, v in grid.items()} for i in range(2)]
    alg = build_algorithm(name, model, {**base, **points[0]}, data)
    values = {k: jnp.asarray(v, jnp.float32) for k, v in grid.items()}
    return data, model, base, points, alg, values


@pytest.mark.parametrize("name,dataset,base,grid", CASES, ids=[c[0] for c in CASES])
def test_traced_grid_builds_one_program(datasets, name, dataset, base, grid):
    """Every algorithm's vmapped grid over all its traced fields traces (no Python branch
    or shape depends on them); the traced values reach the program."""
    data, _, _, _, alg, values = _grid_case(datasets, name, dataset, base, grid)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda hp: two_rounds(hparams.rebuild(alg, hp), data)))(values)
    assert len(jaxpr.in_avals) == len(values)


@pytest.mark.parametrize("name,dataset,base,grid",
                         [c for c in CASES if ALL_GRIDS or c[0] in COMPARED],
                         ids=[c[0] for c in CASES if ALL_GRIDS or c[0] in COMPARED])
def test_traced_grid_equals_concrete_runs(datasets, name, dataset, base, grid):
    data, model, base, points, alg, values = _grid_case(datasets, name, dataset, base, grid)
    run = jax.jit(two_rounds, static_argnums=0)
    concrete = [run(build_algorithm(name, model, {**base, **p}, data), data) for p in points]
    traced = jax.jit(jax.vmap(lambda hp: two_rounds(hparams.rebuild(alg, hp), data)))(values)
    concrete = [_arrays(c) for c in concrete]
    for i, want in enumerate(concrete):
        got = [a[i] for a in _arrays(traced)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name} at {points[i]}")
    # the grid's two points give different results, so the comparison can fail
    assert any(not np.allclose(a, b) for a, b in zip(*concrete))


@pytest.mark.parametrize("rule,option,values", [
    ("multi_krum", "krum_frac", [0.0, 0.3]), ("centered_clipping", "clip_tau", [0.1, 1.0])])
def test_robust_rule_options_trace(rule, option, values):
    """BR-IFCA's other aggregation rules (its test above runs the trimmed mean): a vmapped
    grid over the rule's option equals the concrete calls."""
    rng = np.random.default_rng(1)
    g = {"w": jnp.asarray(rng.normal(size=(10, 3)), jnp.float32)}
    assign = jnp.asarray([0, 0, 0, 0, 0, 1, 1, 1, 1, -1], jnp.int32)
    prev = {"w": jnp.ones((2, 3), jnp.float32)}
    agg = lambda v: cluster_aggregate(rule, g, assign, prev, **{option: v})["w"]
    traced = jax.jit(jax.vmap(agg))(jnp.asarray(values, jnp.float32))
    concrete = np.stack([agg(v) for v in values])
    np.testing.assert_allclose(np.asarray(traced), concrete, rtol=1e-5, atol=1e-6)
    assert not np.allclose(concrete[0], concrete[1])


def test_make_config_keeps_own_lr_batch_size_and_optimizer():
    """UIFCA and ClusterGAN have no local training: lr, batch_size and optimizer are their
    own fields (a sweep point must equal the single run with the same settings)."""
    for name in ("uifca", "clustergan"):
        cfg = make_config(ALGORITHMS[name].config_cls,
                          {"lr": 0.05, "batch_size": 4, "optimizer": "adam"}, name)
        assert (cfg.lr, cfg.batch_size, cfg.optimizer) == (0.05, 4, "adam")

