"""``--dtype bfloat16``: params and data stored in bf16, losses, per-cluster sums and
optimizer state in float32; IFCA on rotated 8x8 digits reaches the float32 accuracy within
one point."""

import jax
import jax.numpy as jnp
import pytest

from fedclust_jax.algorithms.registry import build_algorithm
from fedclust_jax.cli import main
from fedclust_jax.core import memory
from fedclust_jax.core.train import LocalTraining, cluster_pass, local_train
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, run_rounds, summarize
from fedclust_jax.models.base import with_dtype
from fedclust_jax.models.registry import build_model

ROUNDS = 15
PARAMS = dict(num_clusters=4, option="model", lr=0.1, steps=10, chunk=None)


def build(dtype, views=False):
    data = build_dataset("rotated-digits", jax.random.key(0), num_clients=40, n=50, n_test=40,
                         views=views).astype(dtype)
    model = with_dtype(build_model("mlp", data, hidden=[64]), dtype)
    return data, build_algorithm("ifca", model, PARAMS, data)


@pytest.fixture(scope="module")
def runs():
    out = {}
    for dtype in ("float32", "bfloat16"):
        data, alg = build(dtype)
        states, _ = run_rounds(alg, data, jax.random.key(1), rounds=ROUNDS,
                               rounds_per_chunk=ROUNDS, progress=False)
        state = jax.tree.map(lambda a: a[0], states)
        out[dtype] = (data, alg, state, summarize(alg, jax.jit(alg.evaluate)(state, data), data))
    return out


def test_bf16_accuracy_within_one_point_of_float32(runs):
    acc32 = runs["float32"][3]["test_acc"]
    acc16 = runs["bfloat16"][3]["test_acc"]
    assert acc32 > 0.7, acc32  # the run learns: the comparison is not between two failures
    assert abs(acc16 - acc32) <= 0.01, (acc16, acc32)
    assert runs["bfloat16"][3]["misclustering"] == runs["float32"][3]["misclustering"] == 0.0


def test_state_and_data_leaves_are_bf16(runs):
    data, _, state, metrics = runs["bfloat16"]
    assert {a.dtype for a in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.bfloat16)}
    assert data.x.dtype == data.x_test.dtype == jnp.bfloat16
    assert data.y.dtype == jnp.int32
    assert isinstance(metrics["test_loss"], float)
    data32, _, state32, _ = runs["float32"]
    assert {a.dtype for a in jax.tree.leaves(state32.params)} == {jnp.dtype(jnp.float32)}
    assert data32.x.dtype == jnp.float32


def test_views_read_bf16_from_a_uint8_pool():
    data, _ = build("bfloat16", views=True)
    assert data.pool_x.dtype == jnp.uint8
    assert data.train_client(3)[0].dtype == jnp.bfloat16


def test_sums_losses_and_optimizer_state_are_float32(runs):
    data, alg, state, _ = runs["bfloat16"]
    keys = jax.random.split(jax.random.key(2), data.num_clients)
    sums, totals, loss, _ = cluster_pass(alg.model, alg.cfg.local, state.params, data, None,
                                         keys, 0.1, chunk=8)
    assert {a.dtype for a in jax.tree.leaves(sums)} == {jnp.dtype(jnp.float32)}
    assert totals.dtype == loss.dtype == jnp.float32
    # local training: the scan carry (master params and momentum) is float32, the result bf16
    cfg = LocalTraining(steps=2, lr=0.1, momentum=0.9)
    one = jax.tree.map(lambda a: a[0], state.params)
    x, y, count = data.train_client(0)
    train = lambda p: local_train(alg.model, cfg, p, x, y, count, jax.random.key(0), 0.1)
    jaxpr = jax.make_jaxpr(train)(one)
    scans = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    assert scans
    carry = [v.aval.dtype for v in scans[-1].outvars if jnp.issubdtype(v.aval.dtype, jnp.floating)]
    assert len(carry) == 2 * len(jax.tree.leaves(one))  # params and one momentum per leaf
    assert set(carry) == {jnp.dtype(jnp.float32)}
    assert {a.dtype for a in jax.tree.leaves(jax.eval_shape(train, one))} == {jnp.dtype(jnp.bfloat16)}


def test_memory_estimate_counts_bf16_bytes(runs):
    est = {d: memory.estimate(runs[d][1], runs[d][0]) for d in runs}
    assert est["bfloat16"]["data"] < 0.6 * est["float32"]["data"]
    assert est["bfloat16"]["state"] < 0.6 * est["float32"]["state"]


def test_config_normalises_and_rejects_dtype():
    assert ExperimentConfig(dtype="bfloat16").dtype == "bfloat16"
    assert ExperimentConfig().dtype == "float32"
    with pytest.raises(ValueError, match="dtype must be one of"):
        ExperimentConfig(dtype="float16")


def test_bad_dtype_exits_2_with_one_line(capsys):
    assert main(["run", "--algorithm", "ifca", "--dtype", "float16", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "float16" in err[0] and "bfloat16" in err[0], err


def test_an_algorithm_that_promotes_bf16_state_is_refused_before_compute():
    from fedclust_jax.core.memory import check_state_dtypes

    class Promotes:
        name = "promotes"

        def init(self, key, data):
            return {"w": jnp.zeros(3, jnp.bfloat16)}

        def round(self, state, key, data):
            return {"w": state["w"] + jnp.float32(1)}, {}

    with pytest.raises(ValueError, match="does not keep its state in bfloat16"):
        check_state_dtypes(Promotes(), None)
    data, alg = build("bfloat16")
    check_state_dtypes(alg, data)  # IFCA keeps bf16


def test_sweep_over_dtype_equals_runs():
    """dtype is a sweep path; each point equals the run with that dtype."""
    from fedclust_jax.experiment import ExperimentConfig, run_experiment
    from fedclust_jax.sweep import run_sweep
    data = {"num_clients": 8, "dim": 5, "samples_per_client": 10}
    study = {"dataset": "synthetic-regression", "data": data, "rounds": 2,
             "algorithms": {"ifca": {"num_clusters": 2, "steps": 2, "lr": 0.1}},
             "sweep": {"dtype": ["float32", "bfloat16"]}}
    for row in run_sweep(study, progress=False):
        cfg = ExperimentConfig(dataset="synthetic-regression", data=data, rounds=2, dtype=row["dtype"],
                               algorithm="ifca", params={"num_clusters": 2, "steps": 2, "lr": 0.1})
        assert row["test_loss"] == run_experiment(cfg, progress=False)["metrics"]["test_loss"]
