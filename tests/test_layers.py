"""The package's imports flow one way (DESIGN.md section 1):

    data, models, metrics  ->  core, checkpoint  ->  attacks  ->  algorithms, loop
        ->  experiment, sweep, presets, registration  ->  cli (and __main__)

A module may import its own layer or any layer below, never one above. metrics, progress
(progress lines, chunk schedule), config_check (typed conversion of values) and describe
(what a registered thing says about itself, the registries' type) import nothing of the
package, so they sit at the bottom with data and models where every layer may use them;
contract (the Algorithm contract traced abstractly) sits at the algorithms' layer; checkpoint gathers sharded states with ``core.sharding.to_host``, so it sits
at core's layer; loop (the pure round loop) only calls the algorithm it is given, so it
sits at the algorithms' layer; presets, registration (user algorithms, datasets and
models added to the registries), registry_check (parameters checked against the
registries) and results (tables, JSON) are at experiment's level. Every ``import``
statement counts, also those
inside functions (walked with ``ast``, nothing is imported)."""

import ast
import pathlib
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "fedclust_jax"
LAYERS = {"data": 0, "models": 0, "metrics": 0, "checkpoint": 1, "core": 1, "attacks": 2,
          "algorithms": 3, "loop": 3, "registration": 4, "reproduce": 4, "config_check": 0, "registry_check": 4, "experiment": 4, "presets": 4, "progress": 0,
          "results": 4, "sweep": 4, "sweep_calls": 4, "sweep_store": 4, "plot": 4, "cli": 5,
          "__main__": 5, "hostdevices": 2, "bounds": 0, "__version__": 0, "describe": 0, "contract": 3,
          "trained": 4, "tracking": 4,
          "__init__": 5}


def layer_of(module: str) -> int:
    """Layer of 'fedclust_jax.<part>...' (the first component below the package)."""
    parts = module.split(".")
    if len(parts) == 1:
        return LAYERS["__init__"]
    if parts[1] not in LAYERS:
        raise AssertionError(f"{module}: no layer for {parts[1]!r}; add it to LAYERS")
    return LAYERS[parts[1]]


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: pathlib.Path, name: str):
    """(line, imported module) for every package import in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fedclust_jax"):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("fedclust_jax"):
                if target == "fedclust_jax":     # from fedclust_jax import checkpoint, metrics
                    for alias in node.names:
                        yield node.lineno, f"fedclust_jax.{alias.name}"
                else:
                    yield node.lineno, target


def upward_imports():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        here = layer_of(name if name != "fedclust_jax" else "fedclust_jax")
        for line, target in imports(path, name):
            if layer_of(target) > here:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports() == []


def test_the_walk_sees_imports(tmp_path, monkeypatch):
    """The checker finds an upward import, also a relative one inside a function."""
    pkg = tmp_path / "fedclust_jax"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "bad.py").write_text(
        "def f():\n    from ..algorithms import ifca\n    import fedclust_jax.cli\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert [s.split(" imports ")[1] for s in upward_imports()] == [
        "fedclust_jax.algorithms", "fedclust_jax.cli"]


@pytest.mark.parametrize("module, layer", [("fedclust_jax.data.points", 0),
                                           ("fedclust_jax.attacks", 2),
                                           ("fedclust_jax.cli", 5)])
def test_layer_of(module, layer):
    assert layer_of(module) == layer
