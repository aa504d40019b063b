"""benchmarks/roofline.py's robust-aggregation programs (the aggregator timings): each program
is the ``core.robust`` rule it names, on [N, d] uploads assigned over K = 4 clusters, and the
sorting backends (``--sort``) agree; the quick table records every rule with positive
seconds. Nothing is timed against a bound."""

import argparse
import importlib.util
import json
import math
import pathlib
import sys

import jax
import numpy as np
import pytest

_DIR = pathlib.Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
_spec = importlib.util.spec_from_file_location("roofline_robust", _DIR / "roofline.py")
roofline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roofline)

SIZE = dict(m=24, d=9)


def run(name, sort="auto"):
    opts = argparse.Namespace(chunk="auto", conv="auto", sort=sort, dtype="float32")
    fn, args, what = roofline.build(name, SIZE, opts)
    return np.asarray(jax.jit(fn)(*args)), args, what


@pytest.mark.parametrize("name", roofline.ROBUST)
def test_each_program_is_its_rule(name):
    from fedclust_jax.core import robust
    out, (values, assign, previous), what = run(name)
    assert out.shape == (4, SIZE["d"]) and np.isfinite(out).all()
    assert f"N={SIZE['m']}, d={SIZE['d']}, K=4" in what
    if name == "mean":
        want = robust.cluster_plain_mean(values, assign, previous)
    elif name == "median":   # the ordinary median of each cluster's members, per coordinate
        want = np.stack([np.median(np.asarray(values)[np.asarray(assign) == j], axis=0)
                         for j in range(4)])
    else:
        return
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["median", "trimmed_mean"])
def test_sorting_backends_agree(name):
    packed = run(name, "packed")[0]
    for sort in ("masked", "numpy"):
        np.testing.assert_allclose(run(name, sort)[0], packed, rtol=1e-5, atol=1e-6)


def test_quick_table_records_every_rule(tmp_path):
    out = tmp_path / "r.json"
    roofline.main(["--quick", "--repeats", "1", "--programs", *roofline.ROBUST[2:],
                   "--json", str(out)])
    recs = json.loads(out.read_text())["records"]
    assert [r["program"] for r in recs] == list(roofline.ROBUST[2:])
    assert all(math.isfinite(r["seconds"]) and r["seconds"] > 0 for r in recs)
