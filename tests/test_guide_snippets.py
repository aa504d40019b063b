"""docs/extending.md's Python examples run as printed: every ```python block that parses and
holds no ``...`` placeholder (the skeletons and signature lists do) is executed on its own,
and the dataset plugin it shows behaves on the command line as the guide says."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


def runnable(block: str) -> bool:
    try:
        tree = ast.parse(block)
    except SyntaxError:
        return False
    return not any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree))


RUNNABLE = [b for b in BLOCKS if runnable(b)]


def test_the_guide_shows_each_mechanism_in_a_runnable_block():
    text = "\n".join(RUNNABLE)
    for used in ("load_digits_images", "Literal[", "head_mask", "with_head", "rebuild_data"):
        assert used in text, used
    assert len(BLOCKS) > len(RUNNABLE)           # the skeletons are left out, not run


def named(block: str) -> str:
    return next((w for w in ("dealt_digits", "head_mask", "rebuild_data") if w in block), "block")


@pytest.mark.parametrize("block", RUNNABLE, ids=named)
def test_a_guide_block_runs(block, tmp_path, monkeypatch):
    from fedclust_jax.data.registry import DATASETS
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(block, str(GUIDE), "exec"), {"__name__": "guide_block"})
    finally:
        DATASETS.pop("dealt-digits", None)


def test_the_dataset_plugin_does_what_the_guide_says(tmp_path, capsys):
    from fedclust_jax.cli import main
    from fedclust_jax.data.registry import DATASETS
    plugin = tmp_path / "digits.py"
    plugin.write_text(next(b for b in RUNNABLE if "dealt_digits" in b))
    try:
        assert main(["--plugin", str(plugin), "list", "dealt-digits"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines()
                   if line.split()[:1] == ["split"])
        assert "'iid' | 'by-label'" in row and row.endswith(
            'how the images are dealt ("iid": shuffled; "by-label": client i gets the digits d '
            'with d % num_clients == i)')
        run = ["--plugin", str(plugin), "run", "--dataset", "dealt-digits", "--algorithm",
               "fedavg", "--rounds", "1", "--no-progress"]
        assert main(run + ["--data", "split=by-label"]) == 0
        capsys.readouterr()
        assert main(run + ["--data", "split=label"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "split takes one of the strings 'iid', 'by-label'" in err[0]
    finally:
        DATASETS.pop("dealt-digits", None)
