"""The Algorithm contract checked before compile: every built-in keeps it, and broken user
algorithms stop in one line that names the algorithm, the method and the leaf."""

import textwrap

import pytest

from fedclust_jax import loop
from fedclust_jax.algorithms.registry import ALGORITHMS
from fedclust_jax.cli import main
from fedclust_jax.contract import ContractError, check_methods
from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, build_run_algorithm

DATA = {  # the smallest data each family runs on
    "clients": ("gaussian-mixture", {"num_clients": 8, "samples_per_client": 8,
                                     "test_samples_per_client": 4, "dim": 4}),
    "regression": ("brifca-regression", {"num_clients": 11, "num_clusters": 2, "dim": 4,
                                         "samples_per_client": 6}),
    "points": ("uifca-gaussian", {"num_clients": 2, "points_per_client": 8, "dim": 2,
                                  "num_clusters": 2}),
    "images": ("uifca-mnist", {"source": "digits", "task": "digits", "digits": [2, 3],
                               "points_per_client": 8}),
}
FAMILY = {"brifca": "regression", "three-stage": "regression", "uifca": "points",
          "kfed": "points", "clustergan": "images"}
PARAMS = {"clustergan": {"width": 2, "fc_width": 4, "batch_size": 4},
          "uifca": {"num_clusters": 2}, "kfed": {"num_clusters": 2},
          "brifca": {"num_clusters": 2}, "three-stage": {"num_clusters": 2},
          "fedsoft": {"clients_per_cluster": 2}}


@pytest.mark.parametrize("name", sorted(n for n in ALGORITHMS
                                        if ALGORITHMS[n].algorithm_cls.__module__
                                        .startswith("fedclust_jax.")))
def test_every_builtin_keeps_the_contract(name):
    """The runner skips the trace for built-ins; this is where they are checked."""
    dataset, data = DATA[FAMILY.get(name, "clients")]
    model_args = {"hidden": [4]} if dataset == "gaussian-mixture" else {}
    cfg = ExperimentConfig(dataset=dataset, data=data, algorithm=name,
                           params=PARAMS.get(name, {}), model_args=model_args, rounds=1)
    d = build_dataset(cfg.dataset, loop.data_key(0), **cfg.data)
    check_methods(build_run_algorithm(cfg, d), d)


BROKEN = {
    "shape": ("round", "params", "jnp.concatenate([p, p])", "changes state leaf"),
    "dtype": ("round", "params", "p.astype(jnp.float16)", "from float32"),
    "assign": ("evaluate", None, None, "returns no 'assign'"),
    "metrics": ("round", None, None, "must return a pair (state, metrics)"),
    "branch": ("round", None, None, "branches in Python on a traced value"),
    "string": ("round", None, None, "not an array or a pytree of arrays"),
}


def _plugin(tmp_path, kind: str) -> str:
    """A user algorithm (one linear model per client group, FedAvg-like) broken one way."""
    round_body = {
        "shape": "return state.replace(params=W(w=jnp.concatenate([state.params.w] * 2))), {}",
        "dtype": "return state.replace(params=W(w=state.params.w.astype(jnp.float16))), {}",
        "assign": "return state, {}",
        "metrics": "return state",
        "branch": "return (state if state.round < 1 else state), {}",
        "string": "return state, {'note': 'text'}",
    }[kind]
    evaluate_extra = "" if kind == "assign" else ", assign=jnp.zeros(n, jnp.int32)"
    code = f'''
        import dataclasses
        import jax.numpy as jnp
        from flax import struct
        from fedclust_jax import register_algorithm
        from fedclust_jax.algorithms.base import Algorithm


        @struct.dataclass
        class W:
            w: object


        @struct.dataclass
        class S:
            params: W
            round: object


        @dataclasses.dataclass(frozen=True)
        class BrokenConfig:
            """scale: a factor of no consequence."""
            scale: float = 1.0


        class Broken(Algorithm):
            """A deliberately broken algorithm ({kind})."""
            name = "broken-{kind}"
            clusters_clients = True

            def __init__(self, model, cfg):
                self.model, self.cfg = model, cfg

            def init(self, key, data):
                return S(params=W(w=jnp.zeros((3,), jnp.float32)), round=jnp.zeros((), jnp.int32))

            def round(self, state, key, data):
                {round_body}

            def evaluate(self, state, data):
                n = data.num_clients
                return dict(test_loss=jnp.zeros(n), test_acc=jnp.zeros(n){evaluate_extra})

            def objective(self, state, data):
                return jnp.sum(state.params.w)


        register_algorithm("broken-{kind}", Broken, BrokenConfig, replace=True)
    '''
    path = tmp_path / f"broken_{kind}.py"
    path.write_text(textwrap.dedent(code))
    return str(path)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_algorithm_stops_before_training_in_one_line(kind, tmp_path, capsys):
    method, _, _, phrase = BROKEN[kind]
    code = main(["--plugin", _plugin(tmp_path, kind), "run", "--algorithm", f"broken-{kind}",
                 "--dataset", "gaussian-mixture", "--data", "num_clients=8", "--rounds", "3",
                 "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"algorithm 'broken-{kind}'" in err and method in err and phrase in err, err
    if kind in ("shape", "dtype"):
        assert ".params.w" in err and "float32[3]" in err


def test_contract_error_is_a_value_error():
    assert issubclass(ContractError, ValueError)
