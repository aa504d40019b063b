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
