"""Every mistake in one line, before anything trains: an exception raised while a user's
method is traced names the algorithm, the method, the user's file:line and JAX's words
(exit 2, no traceback); two outputs on one path and a repeated algorithm or sweep point are
refused before the data is built."""

import textwrap

import pytest

from fedclust_jax.cli import main

TINY = ["--data", "num_clients=8", "--data", "dim=5", "--rounds", "3", "--no-progress"]

PLUGIN = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp
    from fedclust_jax import register_algorithm
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig


    class FloatIndex(FedAvg):
        """FedAvg keeping an assignment as float32 and indexing with it."""

        def init(self, key, data):
            return {"inner": super().init(key, data),
                    "assign": jnp.zeros(data.num_clients, jnp.float32)}

        def round(self, state, key, data):
            inner, metrics = super().round(state["inner"], key, data)
            jnp.arange(3.0)[state["assign"]]
            return {"inner": inner, "assign": state["assign"]}, metrics

        def evaluate(self, state, data):
            return super().evaluate(state["inner"], data)

        def objective(self, state, data):
            return super().objective(state["inner"], data)


    class MixedCond(FedAvg):
        """FedAvg whose round takes a lax.cond of a float32 and an int32 branch."""

        def round(self, state, key, data):
            state, metrics = super().round(state, key, data)
            jax.lax.cond(metrics["train_loss"] > 0, lambda: jnp.float32(1), lambda: jnp.int32(0))
            return state, metrics


    register_algorithm("float-index", FloatIndex, FedAvgConfig, replace=True)
    register_algorithm("mixed-cond", MixedCond, FedAvgConfig, replace=True)
    ''')


def line_of(text: str) -> int:
    """The line number of ``text`` in the plugin."""
    return next(i for i, line in enumerate(PLUGIN.splitlines(), 1) if text in line)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mistakes.py").write_text(PLUGIN)
    return ["--plugin", "mistakes.py"]


def one_line(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_an_index_of_float_type_is_the_users_line(plugin, capsys):
    err = one_line(capsys, main(["run", *plugin, "--algorithm", "float-index", *TINY]))
    assert err.startswith("fedclust-jax: error: algorithm 'float-index': round failed while "
                          "traced at "), err
    assert (f"mistakes.py:{line_of('jnp.arange(3.0)')}: TypeError: Indexer must have integer"
            in err), err


def test_cond_branches_of_two_types_name_both(plugin, capsys):
    err = one_line(capsys, main(["run", *plugin, "--algorithm", "mixed-cond", *TINY]))
    assert "algorithm 'mixed-cond': round failed while traced at " in err, err
    assert f"mistakes.py:{line_of('jax.lax.cond')}: TypeError: cond branches" in err, err
    assert "float32[]" in err and "int32[]" in err, err


def test_compare_checks_every_algorithm_before_the_first_trains(plugin, capsys):
    code = main(["compare", *plugin, "--algorithms", "fedavg,mixed-cond", *TINY])
    out = capsys.readouterr()
    assert code == 2 and out.out == "", out      # no data summary: nothing started
    assert "algorithm 'mixed-cond': round failed while traced" in out.err


def test_a_sweep_checks_every_program_before_the_first_runs(plugin, capsys, tmp_path):
    (tmp_path / "sweep.toml").write_text(textwrap.dedent('''\
        dataset = "synthetic-regression"
        rounds = 3
        data = { num_clients = 8, dim = 5 }
        algorithms.fedavg = {}
        algorithms.mixed-cond = {}
        [sweep]
        seed = [0, 1]
        '''))
    err = one_line(capsys, main(["sweep", *plugin, "--config", "sweep.toml", "--no-progress"]))
    assert "sweep point (seed = 0): algorithm 'mixed-cond': round failed while traced" in err


def test_the_user_frame_is_the_innermost_outside_the_libraries():
    import jax
    import jax.numpy as jnp
    from fedclust_jax.contract import first_line, user_frame

    def users_code(x):
        return jnp.arange(3.0)[x]
    try:
        jax.eval_shape(users_code, jnp.float32(0))
    except TypeError as e:
        where = user_frame(e)
        line = first_line(e)
    assert where.endswith(f"test_one_line_errors.py:{users_code.__code__.co_firstlineno + 1}")
    assert line.startswith("Indexer must have integer or boolean type") and "\n" not in line


@pytest.mark.parametrize("args, words", [
    (["run", "--algorithm", "ifca", "--output", "same.json", "--checkpoint", "same.json"],
     "--output 'same.json' and --checkpoint 'same.json' are one path"),
    (["run", "--algorithm", "ifca", "--save-state", "s.npz", "--checkpoint", "./s.npz"],
     "--checkpoint './s.npz' and --save-state 's.npz' are one path"),
    (["compare", "--algorithms", "fedavg,ifca", "--save-state", "a.npz", "--checkpoint",
      "a.npz"], "--checkpoint 'a.npz' and --save-state 'a.npz' are one path ('a-fedavg.npz')"),
    (["compare", "--algorithms", "ifca,ifca"], "--algorithms names 'ifca' twice"),
])
def test_outputs_on_one_path_and_a_repeated_algorithm_are_refused(args, words, capsys,
                                                                    tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = one_line(capsys, main(args + TINY))
    assert words in err, err
    assert list(tmp_path.iterdir()) == []        # nothing written


def test_a_sweep_output_inside_its_checkpoint_folder_and_a_repeated_point(capsys, tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = textwrap.dedent('''\
        dataset = "synthetic-regression"
        rounds = 3
        data = { num_clients = 8, dim = 5 }
        algorithms.ifca = {}
        [sweep]
        seed = SEEDS
        ''')
    (tmp_path / "sweep.toml").write_text(study.replace("SEEDS", "[0, 1]"))
    err = one_line(capsys, main(["sweep", "--config", "sweep.toml", "--checkpoint", "ck",
                                 "--output", "ck/rows.csv"]))
    assert "--output 'ck/rows.csv' lies inside the --checkpoint folder 'ck'" in err
    (tmp_path / "sweep.toml").write_text(study.replace("SEEDS", "[0, 1, 0]"))
    err = one_line(capsys, main(["sweep", "--config", "sweep.toml"]))
    assert "sweep point 3 (seed = 0) repeats point 1" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]


def test_reproduce_refuses_its_results_folder_as_its_checkpoint(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["reproduce", "ifca-table1", "--quick", "--out", "here", "--checkpoint", "here"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--out 'here' and --checkpoint 'here' are one path" in err, err
