"""The package is the product: a wheel built from the checkout, installed (not editable) into a
fresh virtual environment, runs what the README shows from a folder outside the checkout:
`reproduce --list` names every table, `reproduce threshold-table1 --quick` runs (with --out
and with its default, results/<paper>/ under the working folder) and the quickstart runs
at a tiny size.

No network: the wheel is built with the installed setuptools (``--no-build-isolation``,
``--no-index``) and installed with ``--no-deps --no-index``; the environment sees the
dependencies already installed here (jax, flax, ...) through a .pth file naming this
interpreter's site-packages, whose own .pth files (an editable install of the checkout) it
does not read. One test, about 60 s on 2 cores, most of it compiling the table's programs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from fedclust_jax import reproduce

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TINY = ["--data", "num_clients=8", "--data", "dim=5", "--data", "samples_per_client=10",
        "--rounds", "2", "--restarts", "1", "--no-progress"]


def setuptools_needed() -> str | None:
    """Why the build backend here cannot build the wheel offline, or None."""
    want = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())
                ["build-system"]["requires"] if r.startswith("setuptools"))
    least = tuple(int(x) for x in re.findall(r"\d+", want.split(">=")[1])[:2])
    try:
        import setuptools
    except ImportError:
        return f"no setuptools here; the wheel build needs {want} (the [test] extra brings it)"
    have = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
    if have < least:
        return (f"setuptools {setuptools.__version__} here; the wheel build needs {want} "
                "(the [test] extra brings it: pip install -e '.[test]')")
    return None


def run(*command, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(map(str, command))} exited {proc.returncode}:\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def test_wheel_installs_and_runs_the_readme(tmp_path):
    why = setuptools_needed()
    if why:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FEDCLUST_PLUGINS")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1", PYTHONNOUSERSITE="1",
               JAX_PLATFORMS="cpu")
    pip = [sys.executable, "-m", "pip"]

    # build from a copy of what the wheel is made of (the checkout gets no build/ folder)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fedclust_jax", src / "fedclust_jax",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run(*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", tmp_path / "dist", src, cwd=tmp_path, env=env)
    (wheel,) = (tmp_path / "dist").glob("fedclust_jax-*.whl")

    # a fresh environment, the wheel installed into it, the dependencies seen from here
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    run(*pip, "--python", python, "install", "-q", "--no-deps", "--no-index", wheel,
        cwd=tmp_path, env=env)
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp_path, env=env).stdout.strip())
    here = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")
            and Path(p).is_dir() and not Path(p).resolve().is_relative_to(ROOT)]
    here = here or [sysconfig.get_path("purelib")]
    (site / "_fedclust_test_deps.pth").write_text("\n".join(here) + "\n")

    work = tmp_path / "work"            # a user's folder, outside the checkout
    work.mkdir()
    where = run(python, "-c", "import fedclust_jax.reproduce as r; print(r.__file__); "
                "print(r.checkout())", cwd=work, env=env).stdout.split()
    assert Path(where[0]).is_relative_to(site) and where[1] == "None", where

    script = venv / "bin" / "fedclust-jax"
    listed = run(script, "reproduce", "--list", cwd=work, env=env).stdout.split()
    assert listed == reproduce.table_ids()

    out = tmp_path / "tables"
    run(script, "reproduce", "threshold-table1", "--quick", "--out", out, "--no-progress",
        cwd=work, env=env)
    md = (out / "table1.md").read_text()
    assert md.splitlines()[0] == f"`python -m fedclust_jax.reproduce threshold-table1 --quick --out {out}`"
    assert "Study file `fedclust_jax/studies/threshold/table1.toml`" in md
    assert "package commit unknown (installed fedclust_jax " in md and (out / "table1.json").exists()
    proc = run(script, "reproduce", "threshold-table1", "--quick", "--no-progress", cwd=work,
               env=env)
    assert (work / "results" / "threshold" / "table1.md").read_text().splitlines()[0] == \
        "`python -m fedclust_jax.reproduce threshold-table1 --quick`"
    assert "wrote results/threshold/table1.md and table1.json" in proc.stderr

    quickstart = re.search(r"## Quickstart\n\n```bash\n(.*?)\n```", README, re.S).group(1)
    assert quickstart == "fedclust-jax compare --data scaling=multiply", quickstart
    printed = run(script, *quickstart.split()[1:], *TINY, cwd=work, env=env).stdout
    assert all(re.search(rf"^{alg}\s", printed, re.M) for alg in ("fedavg", "local", "ifca")), printed
