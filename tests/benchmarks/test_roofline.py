"""benchmarks/roofline.py: the quick form on a subset writes records with positive, finite
FLOPs, bytes, seconds and fractions of the probed limits, and with ``--devices 2`` a row of
the round with its client walks split over 2 host devices; the HLO recount weights a loop
body by its trip count and, unweighted, equals XLA's own count; bad flags are refused.
Nothing is timed against a bound."""

import importlib.util
import json
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest
from jax import lax

_DIR = pathlib.Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
_spec = importlib.util.spec_from_file_location("roofline", _DIR / "roofline.py")
roofline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roofline)

FIELDS = ("flops", "bytes", "seconds", "flops_per_s", "bytes_per_s", "fraction_of_gemm_peak",
          "fraction_of_bandwidth", "gemm_flops_per_s", "copy_bytes_per_s")


def test_quick_records(tmp_path):
    out = tmp_path / "r.json"
    roofline.main(["--quick", "--repeats", "1", "--programs", "ifca_mlp", "trimmed_mean",
                   "--devices", "2", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert [(r["program"], r["devices"]) for r in doc["records"]] == [
        ("ifca_mlp", 1), ("trimmed_mean", 1), ("ifca_mlp", 2)]   # no client walk: not split
    split = doc["records"][2]
    assert "walks split over 2 host devices" in split["what"]
    assert split["flops"] == doc["records"][0]["flops"]
    for r in doc["records"]:
        for f in FIELDS:
            assert math.isfinite(r[f]) and r[f] > 0, (r["program"], f, r[f])
        assert r["backend"] == jax.default_backend() and r["jax_version"] == jax.__version__
        assert r["loops_without_trip_count"] == 0
    ifca = doc["records"][0]
    # the round is a scan over 24 clients of 10 steps: far more than XLA's once-counted body
    assert ifca["flops"] > 20 * ifca["xla_flops_raw"]
    # hand count: 24 clients x (4 forward passes + 10 steps x 2 forward-equivalents) of
    # 20 examples through 784-200-10 (the first layer's input gradient is never formed)
    hand = 24 * (4 + 10 * 2) * 20 * 2 * (784 * 200 + 200 * 10)
    assert 0.95 * hand < ifca["flops"] < 1.15 * hand


def test_loop_weighting_matches_trip_counts():
    a = jnp.ones((64, 64))
    inner = lambda c, _: (lax.scan(lambda d, _: (d @ a, None), c, jnp.arange(3))[0], None)
    compiled = jax.jit(lambda a: lax.scan(inner, a, jnp.arange(5))[0]).lower(a).compile()
    c = roofline.cost(compiled)
    assert c["check_flops_unweighted"] == pytest.approx(c["xla_flops_raw"], rel=0.01)
    assert c["check_bytes_unweighted"] == pytest.approx(c["xla_bytes_raw"], rel=0.01)
    assert c["flops"] == pytest.approx(15 * 2 * 64 ** 3, rel=0.01)
    # the largest byte count is the product inside both loops: 15 x (two operands + result)
    top = c["bytes_top"][0]
    assert top["op"] in ("dot", "fusion") and top["type"].startswith("f32[64,64]")
    assert top["gb"] * 1e9 == pytest.approx(15 * 3 * 64 * 64 * 4, rel=0.01)
    assert 0 < sum(t["share"] for t in c["bytes_top"]) <= 1 + 1e-9


@pytest.mark.parametrize("flags", [["--chunk", "zero"], ["--repeats", "0"],
                                   ["--programs", "nope"], ["--devices", "1"]])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as e:
        roofline.main(flags)
    assert e.value.code == 2
