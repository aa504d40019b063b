"""Every notebook in notebooks/ executes top to bottom without error.

All notebooks run in one kernel (one kernel start and one JAX import for the whole file, so
each further notebook costs only its own cells). Before each notebook the kernel's
namespace is cleared (``%reset -f``: names defined or imported by an earlier notebook are
gone) and its working directory is set to notebooks/. The kernel imports this checkout of
the package (the repository root is put first on its PYTHONPATH), installed or not."""

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from nbclient.util import run_sync  # noqa: E402

ROOT = pathlib.Path(__file__).parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TIMEOUT_S = 600  # per cell


def client(nb, km=None):
    return nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOK_DIR)}})


@pytest.fixture(scope="module")
def kernel():
    """One started kernel manager shared by every notebook of this file."""
    starter = client(nbformat.v4.new_notebook())
    starter.km = starter.create_kernel_manager()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    starter.start_new_kernel(env=env, cwd=str(NOTEBOOK_DIR))
    yield starter.km
    run_sync(starter.km.shutdown_kernel)(now=True)
    run_sync(starter.km.cleanup_resources)()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, kernel):
    nb = nbformat.read(path, as_version=4)
    fresh = f"%reset -f\nimport os\nos.chdir({str(path.parent)!r})"
    nb.cells.insert(0, nbformat.v4.new_code_cell(fresh))  # in memory only
    runner = client(nb, km=kernel)
    try:
        runner.execute()
    finally:
        if runner.kc is not None:
            runner.kc.stop_channels()


COLAB_URL = 'FEDCLUST_SOURCE = "git+https://github.com/<you>/fedclust_jax"'
NOT_INSTALLED = (
    'fedclust_jax is not installed: upload the repository (its folder or a .zip of it) and set '
    'FEDCLUST_SOURCE = "/content/fedclust_jax.zip" (its path) in this cell, or set '
    'FEDCLUST_SOURCE = "git+https://github.com/<you>/fedclust_jax" with the repository\'s git '
    'URL; then run this cell again.')


@pytest.fixture
def missing_package(monkeypatch):
    """An IPython shell (as a notebook's kernel runs cells) in which fedclust_jax cannot be
    found and FEDCLUST_SOURCE is unset."""
    import importlib.util
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "fedclust_jax" else real(name, *a))
    monkeypatch.delenv("FEDCLUST_SOURCE", raising=False)
    shell = interactiveshell.InteractiveShell.instance()
    yield shell
    interactiveshell.InteractiveShell.clear_instance()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_says_how_to_install_on_colab_and_stops_with_it(path, missing_package,
                                                                     capsys):
    """The first cell tells a Colab user to upload the repository or fill in its git URL;
    the install cell, without the package and FEDCLUST_SOURCE, stops with that sentence
    and no traceback."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and COLAB_URL in first.source
    assert "upload the repository" in first.source
    install = next(c for c in nb.cells if c.cell_type == "code")
    assert COLAB_URL in install.source
    result = missing_package.run_cell(install.source)
    assert type(result.error_in_exec).__name__ == "NotInstalled"
    shown = capsys.readouterr()
    assert shown.out.strip() == NOT_INSTALLED and "Traceback" not in shown.out + shown.err
