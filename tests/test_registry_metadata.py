"""What describes a dataset, model or algorithm lives beside it: the registry walk (built-ins
and the example plugins), the docstring convention, and the one door users share."""

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from fedclust_jax import DatasetDefaults, register_dataset, register_model
from fedclust_jax.algorithms.registry import (ALGORITHMS, LOCAL_KEYS, config_keys, field_docs,
                                             param_fields)
from fedclust_jax.cli import list_everything, main
from fedclust_jax.config_check import check_fields, signature_fields
from fedclust_jax.data.registry import DATASETS
from fedclust_jax.describe import meanings, summary
from fedclust_jax.models.registry import MODELS
from fedclust_jax.registration import load_plugins

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def plugins():
    """Every example plugin registered (their registrations use replace=True)."""
    return load_plugins(sorted(str(p) for p in EXAMPLES.glob("*.py")))


def _flat(text: str) -> str:
    return " ".join(text.split())


def _own_docs(owner) -> str:
    """The docstrings a parameter's meaning may come from: the owner's, its dataclass
    bases' and, for an algorithm config with ``local``, LocalTraining's."""
    if inspect.isclass(owner):
        from fedclust_jax.core.train import LocalTraining
        docs = [k.__doc__ or "" for k in owner.__mro__ if dataclasses.is_dataclass(k)]
        return _flat(" ".join(docs + [LocalTraining.__doc__]))
    return _flat(owner.__doc__ or "")


def _described(kind: str, name: str) -> tuple[dict, object, list]:
    if kind == "algorithm":
        cls = ALGORITHMS[name].config_cls
        return field_docs(cls), cls, config_keys(cls)
    registry = DATASETS if kind == "dataset" else MODELS
    fields, _ = signature_fields(registry[name])
    return meanings(registry[name].__doc__, fields), registry[name], list(fields)


def test_every_registered_parameter_has_its_own_meaning(plugins):
    """Every parameter of every registered name (example plugins included) has a meaning
    of at least three words read from its own docstring, not a pointer elsewhere."""
    assert {"fesem", "swapped-labels", "resmlp"} <= set(ALGORITHMS) | set(DATASETS) | set(MODELS)
    bad = []
    for kind, registry in (("algorithm", ALGORITHMS), ("dataset", DATASETS), ("model", MODELS)):
        for name in registry:
            docs, owner, params = _described(kind, name)
            source = _own_docs(owner)
            for p in params:
                text = docs.get(p, "")
                own = _flat(text) in source or _flat(text).rsplit(" (", 1)[0] in source
                if (len(text.split()) < 2 and not re.search(r"\w{4,}", text)) \
                        or text.lower().startswith(("see ", "as ``")) or not own:
                    bad.append(f"{kind} {name}.{p}: {text!r}")
    assert bad == []


def test_every_registered_name_has_a_one_line_help(plugins):
    for registry in (ALGORITHMS, DATASETS, MODELS):
        for name in registry:
            text = registry.help[name]
            assert text and "\n" not in text and len(text) > 10, (registry.kind, name)
    assert ALGORITHMS.help["fedavg"] == summary(ALGORITHMS["fedavg"].algorithm_cls.__doc__)
    assert DATASETS.help["femnist"] == summary(DATASETS["femnist"].__doc__)


def test_a_plugin_parameter_is_never_described_by_another_models_text():
    """A plugin model's ``width`` is not ResNet9's "channels of the first block": an
    undescribed parameter is shown as such, with where to describe it."""
    def wide(data, width: int = 8):
        """A model whose parameter the docstring leaves undescribed."""
    register_model("undescribed-width", wide, replace=True)
    try:
        text = list_everything("undescribed-width")
        assert "channels" not in text and "(undescribed)" in text
        assert "undescribed: width: add `name: meaning` entries to" in text
    finally:
        MODELS.pop("undescribed-width")


@pytest.mark.parametrize("doc, names, expected", [
    ("a: first; b: second.", ["a", "b"], {"a": "first", "b": "second"}),
    ("Intro.\n\n    a / b: shared\n    c: own line\n    d (traced): with note",
     ["a", "b", "c", "d"], {"a": "shared", "b": "shared", "c": "own line",
                            "d": "with note (traced)"}),
    ("x: runs over\n  two lines; y: next", ["x", "y"], {"x": "runs over two lines", "y": "next"}),
    ("x: stops at the paragraph.\n\nMore prose here.", ["x"], {"x": "stops at the paragraph"}),
    ("p: before; static (shapes): not a field", ["p"], {"p": "before"}),
    ("p: text (rotated: inner, not a head)", ["p"], {"p": "text (rotated: inner, not a head)"}),
    ("d: folder;\n    other: a name not taken", ["d"], {"d": "folder"}),
    ("chunk (\"auto\": chosen per\n    backend, None: all)", ["chunk"], {}),
])
def test_docstring_convention_known_answers(doc, names, expected):
    assert meanings(doc, names) == expected


def test_a_registered_dataset_runs_with_dataset_flag(tmp_path, capsys):
    """``--dataset NAME`` works for a user's dataset: its declared defaults, or the
    builder's own with FedAvg and Local."""
    import numpy as np
    from fedclust_jax.data.federated import from_client_lists

    def two_blobs(key, num_clients: int = 4):
        """Two blobs, one per cluster.

        num_clients: number of clients."""
        rng = np.random.default_rng(0)
        xs = [rng.normal(i % 2, 1, (6, 3)).astype(np.float32) for i in range(num_clients)]
        ys = [(x[:, 0] > i % 2).astype(np.int32) for i, x in enumerate(xs)]
        return from_client_lists(xs, ys, xs, ys, np.arange(num_clients) % 2,
                                 task="classification", num_classes=2)

    register_dataset("two-blobs", two_blobs, replace=True)
    try:
        assert DATASETS.defaults["two-blobs"] is None
        from fedclust_jax.presets import dataset_study
        study = dataset_study("two-blobs")
        assert list(study["algorithms"]) == ["fedavg", "local"] and study["model"] is None
        register_dataset("two-blobs", two_blobs, replace=True, defaults=DatasetDefaults(
            rounds=1, model_args={"hidden": [2]}, algorithms={"ifca": {"num_clusters": 2}},
            source="a test's settings"))
        assert "ifca: {'num_clusters': 2}" in list_everything("two-blobs")
        assert main(["run", "--dataset", "two-blobs", "--no-progress"]) == 0
        assert "ifca" in capsys.readouterr().out
    finally:
        DATASETS.pop("two-blobs")


def test_the_one_door_refuses_what_it_cannot_describe():
    def nameless(data):
        pass
    with pytest.raises(ValueError, match="give help="):
        register_model("nameless", nameless)
    with pytest.raises(ValueError, match="DatasetDefaults"):
        register_dataset("bad-defaults", lambda key: None, defaults={"rounds": 3}, help="x")
    assert "nameless" not in MODELS and "bad-defaults" not in DATASETS


def test_builtins_register_through_the_public_calls():
    """The built-in registries are filled by ``register_*``: every entry has its help and,
    for algorithms, the class it was registered with."""
    for name, factory in ALGORITHMS.items():
        assert hasattr(factory, "algorithm_cls") and name in ALGORITHMS.help
    assert set(DATASETS.help) == set(DATASETS) and set(MODELS.help) == set(MODELS)
    assert LOCAL_KEYS[0] == "steps"


def test_a_plugin_parameter_is_never_held_to_another_parameters_rule():
    """Ranges live in annotations, not in a table of names: a plugin's plain ``beta`` of
    0.9 and ``width`` of 0 pass (the built-in ``beta`` is SR-FCA's trimming fraction in
    [0, 0.5), ``width`` a size >= 1), while its type, finiteness and the 32-bit bound are
    still checked, and the built-ins keep their ranges."""
    from fedclust_jax.config_check import ConfigError
    from fedclust_jax.registry_check import check_algorithm, check_data, check_model_args

    def plugin_model(data, width: int = 8, beta: float = 0.5):
        """A plugin model. width: filters of its one layer; beta: its own mixing weight"""
    register_model("plugin-rules", plugin_model, replace=True)
    try:
        assert check_model_args("plugin-rules", {"width": 0, "beta": 0.9}) == {
            "width": 0, "beta": 0.9}
        assert check_model_args("plugin-rules", {"width": -3})["width"] == -3
        for bad, why in (({"beta": float("nan")}, "not finite"),
                         ({"width": 2 ** 31}, "too large"), ({"width": -2 ** 31 - 1}, "too small"),
                         ({"width": 1.5}, "not an integer")):
            with pytest.raises(ConfigError, match=why):
                check_model_args("plugin-rules", bad)
    finally:
        MODELS.pop("plugin-rules")
    with pytest.raises(ConfigError, match=r"beta = 0.9 is out of range; beta takes a finite "
                                          r"number in \[0, 0.5\)"):
        check_algorithm("srfca", {"beta": 0.9})
    with pytest.raises(ConfigError, match="num_clients = 0 is too small"):
        check_data("synthetic-regression", {"num_clients": 0})


def test_a_plugin_declares_its_ranges_through_the_public_names(capsys):
    """A user's builder and config state ranges as the built-ins do (``Size``,
    ``Fraction``, ``Bounds``): refused in one line, shown by ``list``, and inherited
    fields keep theirs."""
    from typing import Annotated

    from fedclust_jax import Bounds, Fraction, Size
    from fedclust_jax.algorithms.fedavg import FedAvgConfig
    from fedclust_jax.config_check import ConfigError
    from fedclust_jax.registry_check import check_model_args

    def ranged_model(data, width: Size = 8, share: Fraction = 0.5,
                     tilt: Annotated[float, Bounds(-1, 1, high_open=True)] = 0.0):
        """A plugin model. width: filters; share: a share; tilt: a tilt"""
    register_model("ranged", ranged_model, replace=True)
    try:
        assert check_model_args("ranged", {"width": 3, "share": 1, "tilt": -1}) == {
            "width": 3, "share": 1.0, "tilt": -1.0}
        for bad, words in (({"width": 0}, "width = 0 is too small; width takes an integer >= 1"),
                           ({"share": 0.0}, r"share takes a finite number in \(0, 1\]"),
                           ({"tilt": 1.0}, r"tilt = 1.0 is out of range; tilt takes a finite "
                                           r"number in \[-1, 1\)")):
            with pytest.raises(ConfigError, match=words):
                check_model_args("ranged", bad)
        assert main(["list", "ranged"]) == 0
        shown = capsys.readouterr().out
        assert "int >= 1" in shown and "float in (0, 1]" in shown and "float in [-1, 1)" in shown
    finally:
        MODELS.pop("ranged")

    @dataclasses.dataclass(frozen=True)
    class Mine(FedAvgConfig):
        beta: float = 0.5
    fields = param_fields(Mine)
    for name, value in (("lr", 0.0), ("steps", 0), ("participation", 1.5)):
        with pytest.raises(ConfigError, match=f"{name} = "):
            check_fields({name: value}, fields, "mine: ", "parameter")
    assert check_fields({"beta": 7.0}, fields, "mine: ", "parameter") == {"beta": 7.0}


def test_every_builtin_integer_declares_its_range():
    """Every integer parameter of a built-in dataset, model or algorithm carries
    ``Bounds`` (``Size``, ``Count``, ``Seed``, ...): none falls back to the bare 32-bit
    range by being forgotten."""
    from fedclust_jax.bounds import bounds_of
    from fedclust_jax.config_check import _accepts

    ours = lambda obj: obj.__module__.startswith("fedclust_jax.")   # plugins of other tests aside

    def owners():
        for reg in (DATASETS, MODELS):
            for name, builder in reg.items():
                if ours(builder):
                    yield name, signature_fields(builder)[0]
        for name, factory in ALGORITHMS.items():
            if ours(factory.config_cls):
                yield name, param_fields(factory.config_cls)
    bare = [(owner, k) for owner, fields in owners() for k, (a, d) in fields.items()
            if int in _accepts(a, d).kinds and int not in _accepts(a, d).bounds]
    assert not bare, bare
    assert bounds_of(int) == (int, None)
