"""A parameter annotated ``Literal["a", "b"]`` is shown by ``list`` with its choices and
checked (one line, exit 2, naming the choices), for a user's plugin and the built-ins."""

import dataclasses
import typing

import pytest

from fedclust_jax.cli import main
from fedclust_jax.config_check import CliText, ConfigError, convert, type_text


def test_choices_are_converted_checked_and_described():
    kind = typing.Literal["lsq", "huber"]
    assert convert("loss", CliText("huber"), kind) == "huber"
    assert type_text(kind) == "'lsq' | 'huber'"
    with pytest.raises(ConfigError, match="loss = 'l2' is not one of the choices; loss takes "
                                          "one of the strings 'lsq', 'huber'"):
        convert("loss", CliText("l2"), kind)
    chunk = typing.Annotated[int, ...] | typing.Literal["auto"] | None
    assert convert("chunk", CliText("auto"), chunk) == "auto"
    assert convert("chunk", CliText("none"), chunk) is None
    with pytest.raises(ConfigError, match="the string 'auto'"):
        convert("chunk", "autox", chunk)
    assert convert("k", 2, typing.Literal[1, 2, 4]) == 2
    with pytest.raises(ConfigError, match="k = 3 is not one of the choices; k takes one of "
                                          "1, 2, 4"):
        convert("k", 3, typing.Literal[1, 2, 4])


def test_a_plugin_dataset_and_algorithm_declare_choices(capsys):
    from fedclust_jax import register_algorithm, register_dataset
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
    from fedclust_jax.algorithms.registry import ALGORITHMS
    from fedclust_jax.data.registry import DATASETS
    from fedclust_jax.experiment import ExperimentConfig

    def shapes(key, num_clients: int = 4, kind: typing.Literal["disc", "ring"] = "disc"):
        """Points in a shape. num_clients: clients; kind: the shape, "disc" or "ring"."""

    @dataclasses.dataclass(frozen=True)
    class ServerConfig(FedAvgConfig):
        """server: how the server combines the models, "mean" or "median"."""
        server: typing.Literal["mean", "median"] = "mean"

    class Server(FedAvg):
        """A FedAvg whose server rule is a choice."""
    register_dataset("choice-shapes", shapes, replace=True)
    register_algorithm("choice-server", Server, ServerConfig, replace=True)
    try:
        assert main(["list", "choice-shapes"]) == 0
        out = capsys.readouterr().out
        assert "'disc' | 'ring'" in out
        assert main(["list", "choice-server"]) == 0
        out = capsys.readouterr().out
        assert "'mean' | 'median'" in out and "'equal' | 'samples'" in out   # inherited
        assert main(["run", "--dataset", "choice-shapes", "--data", "kind=square", "--algorithm", "fedavg",
                     "--rounds", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "kind = 'square' is not one of the choices" \
            in err and "'disc', 'ring'" in err
        assert main(["run", "--algorithm", "choice-server", "--set", "server=max",
                     "--rounds", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "'mean', 'median'" in err
        with pytest.raises(ValueError, match="server = the string 'max' is not one of"):
            ServerConfig(server="max")          # a config built in Python: the same check
        with pytest.raises(ValueError, match="'mean', 'median'"):
            ExperimentConfig(algorithm="choice-server", params={"server": "max"})
    finally:
        DATASETS.pop("choice-shapes")
        ALGORITHMS.pop("choice-server")


@pytest.mark.parametrize("name, param, shown", [
    ("ifca", "option", "'gradient' | 'model'"),
    ("ifca", "optimizer", "'sgd' | 'adam'"),
    ("fedavg", "weighting", "'equal' | 'samples'"),
    ("fedavg", "chunk", "int >= 1 | 'auto' | None"),
])
def test_builtin_choices_are_listed_and_checked(capsys, name, param, shown):
    assert main(["list", name]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.split()[:1] == [param])
    assert shown in row
    assert main(["run", "--algorithm", name, "--set", f"{param}=nope", "--rounds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{param} = 'nope' is not one of the choices" in err[0], err


def test_a_plain_member_of_the_union_frees_its_kind():
    """``str | Literal["auto"]`` takes any string; ``Size | Literal["auto"]`` only "auto"."""
    assert convert("x", "anything", str | typing.Literal["auto"]) == "anything"
    with pytest.raises(ConfigError, match="not one of the choices"):
        convert("x", "anything", int | typing.Literal["auto"])
