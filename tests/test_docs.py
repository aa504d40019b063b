"""The API reference (docs/, Sphinx): it builds with warnings as errors, as README.md says,
and documents every name of ``fedclust_jax.__all__``, the Algorithm protocol, ``Trained``
and every building block docs/extending.md lists. Skipped only where the [docs] extra is
not installed (under CI, CI set, a missing one fails instead)."""

import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def need(module: str):
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the HTML folder, {documented object name}) of ``python -m sphinx -W -b html docs``."""
    need("sphinx")
    need("myst_parser")
    out = tmp_path_factory.mktemp("reference")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    from sphinx.util.inventory import InventoryFile
    with open(out / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", os.path.join)
    names = {name for kind in inventory.data.values() for name in kind} if hasattr(
        inventory, "data") else {name for kind in inventory.values() for name in kind}
    return out, names


def test_the_reference_builds_with_warnings_as_errors_and_has_its_pages(built):
    out, _ = built
    for page in ("index.html", "readme.html", "extending.html", "api.html"):
        assert (out / page).exists(), page
    api = (out / "api.html").read_text()
    assert 'id="fedclust_jax.register_algorithm"' in api
    assert "A name already taken is refused" in api         # registration's docstring


def test_every_public_name_is_documented(built):
    import fedclust_jax
    _, names = built
    for name in fedclust_jax.__all__:
        if name == "__version__":
            continue
        assert f"fedclust_jax.{name}" in names or any(
            n.startswith("fedclust_jax.") and n.endswith(f".{name}") for n in names), name
    for name in ("fedclust_jax.algorithms.base.Algorithm", "fedclust_jax.Trained",
                 "fedclust_jax.Trained.predict", "fedclust_jax.experiment.run_experiment",
                 "fedclust_jax.sweep.run_sweep", "fedclust_jax.tracking.loggers"):
        assert name in names, name


def test_every_building_block_of_the_guide_is_documented(built):
    """The functions the guide's "Building blocks" block names (name followed by "(")."""
    _, names = built
    guide = (ROOT / "docs" / "extending.md").read_text()
    block = re.search(r"\*\*Building blocks\*\*.*?```python\n(.*?)```", guide, re.S)[1]
    wanted = set(re.findall(r"^(\w+)\(", block, re.M))
    assert len(wanted) >= 8
    documented = {n.rsplit(".", 1)[-1] for n in names}
    assert not wanted - documented, sorted(wanted - documented)
