"""A sweep's memory: the points' data are built on use and never all held at once, and a
first call the device cannot hold is run again in halves, with the same rows."""

import jax
import numpy as np
import pytest

from fedclust_jax import sweep, sweep_calls
from fedclust_jax.sweep import PointData, plan, run_sweep

TINY = {"num_clients": 8, "samples_per_client": 8, "test_samples_per_client": 4, "dim": 5}


def study(sweep_table):
    return {"dataset": "synthetic-regression", "data": dict(TINY), "rounds": 3, "restarts": 2,
            "eval_every": 1, "algorithms": {"ifca": {"num_clusters": 2, "lr": 0.05,
                                                     "option": "gradient"}},
            "sweep": sweep_table}


def test_point_data_holds_within_its_limit_and_rebuilds():
    _, groups, _ = plan(study({"seed": [0, 1, 2]}))
    cfgs = [cfg for _, _, cfg in groups[0]["items"]]
    one = sum(a.nbytes for a in jax.tree.leaves(PointData().get(cfgs[0])))
    datas = PointData(limit=one)                    # room for one point's data
    first = datas.get(cfgs[0])
    assert datas.get(cfgs[0]) is first              # held: not built again
    datas.get(cfgs[1])
    assert len(datas.held) == 1                     # the older one let go ...
    again = datas.get(cfgs[0])
    assert again is not first                       # ... and built again, equal
    np.testing.assert_array_equal(np.asarray(again.x), np.asarray(first.x))
    assert set(datas.shapes) == {sweep._data_key(c) for c in cfgs[:2]}


def test_sweep_under_a_small_data_limit_equals_the_default(monkeypatch):
    grid = study({"seed": [0, 1, 2], "ifca.lr": [0.02, 0.1]})
    rows = run_sweep(grid, progress=False)
    monkeypatch.setattr(sweep, "DATA_HELD_FRACTION", 1e-12)   # one point's data at a time
    small = run_sweep(grid, progress=False)
    assert [r["test_loss"] for r in small] == [r["test_loss"] for r in rows]
    assert [r["curves"] for r in small] == [r["curves"] for r in rows]
    assert [r["misclustering"] for r in small] == [r["misclustering"] for r in rows]


@pytest.mark.parametrize("fits", [2, 1])
def test_first_call_out_of_memory_halves_the_points_per_call(monkeypatch, capsys, fits):
    grid = study({"seed": [0, 1, 2, 3, 4]})
    rows = run_sweep(grid, progress=False)
    real = sweep_calls.run_call
    sizes = []

    def device(programs, hp, data, seeds, **kw):    # a device that holds `fits` points
        sizes.append(int(seeds.shape[0]))
        if seeds.shape[0] > fits:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                               "46.67GiB\nmore lines")
        return real(programs, hp, data, seeds, **kw)
    monkeypatch.setattr(sweep_calls, "run_call", device)
    again = run_sweep(grid, progress=True)
    assert sizes == {2: [5, 2, 2, 2], 1: [5, 2, 1, 1, 1, 1, 1]}[fits]
    np.testing.assert_allclose([r["test_loss"] for r in again], [r["test_loss"] for r in rows],
                               rtol=1e-6)
    err = capsys.readouterr().err
    assert f"out of device memory (RESOURCE_EXHAUSTED: Out of memory while trying to allocate " \
           f"46.67GiB); {fits} point(s) per call" in err


def test_one_point_out_of_memory_is_one_line(monkeypatch):
    def device(*a, **kw):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1GiB")
    monkeypatch.setattr(sweep_calls, "run_call", device)
    with pytest.raises(ValueError, match=r"^sweep program 1 \(ifca\): one point does not fit "
                                         r"in the device's memory \(RESOURCE_EXHAUSTED.*--chunk"):
        run_sweep(study({"seed": [0, 1]}), progress=False)


def test_other_errors_are_not_retried(monkeypatch):
    calls = []

    def device(*a, **kw):
        calls.append(1)
        raise RuntimeError("INTERNAL: something else")
    monkeypatch.setattr(sweep_calls, "run_call", device)
    with pytest.raises(RuntimeError, match="INTERNAL"):
        run_sweep(study({"seed": [0, 1]}), progress=False)
    assert calls == [1]
