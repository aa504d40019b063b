"""Figures of runs that diverged: every point shows (a diverged one as a red x at the top
of its panel, named in the legend), a loss spanning more than two decades is on a log
axis, the figure has one legend, and `plot --metric` names the metrics a file holds."""

import json
import math

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from fedclust_jax import plot  # noqa: E402
from fedclust_jax.cli import main  # noqa: E402


def rows():
    """The README's sweep in miniature: ifca over ifca.lr (lr = 1 diverges: its losses
    explode, then become inf / NaN) and fedavg, two seeds each."""
    out = []
    for seed in (0, 1):
        for lr, curve, final in (
                (0.01, [300.0, 100.0, 55.0], 55.0 + seed),
                (0.1, [15.0, 0.4, 0.27], 0.27 + 0.01 * seed),
                (1.0, [400.0 + seed, 1e9, math.inf if seed else 2e18], math.inf if seed else 2e18)):
            out.append({"algorithm": "ifca", "seed": seed, "ifca.lr": lr, "swept": ["seed", "ifca.lr"],
                        "test_loss": final, "misclustering": 0.0,
                        "curves": {"round": [10, 20, 30], "test_loss": curve,
                                   "misclustering": [0.5, 0.0, 0.0]}})
        out.append({"algorithm": "fedavg", "seed": seed, "ifca.lr": None,
                    "swept": ["seed"], "test_loss": 0.48, "misclustering": None,
                    "curves": {"round": [10, 20, 30], "test_loss": [90.0, 6.0, 0.48]}})
    return out


def panels(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def crosses(ax):
    return [line for line in ax.lines if line.get_marker() == "x" and line.get_color() == "red"]


def test_diverged_points_are_drawn_and_named(tmp_path):
    kind, records = plot.to_records(rows())
    fig = plot.figure(kind, records)
    p = panels(fig)
    loss, final = p["test loss"], p["final test loss vs ifca.lr"]
    # the curve of lr = 1: round 10 drawn, rounds 20 and 30 diverged (exploded, then inf)
    line = next(l for l in loss.lines if l.get_label().startswith("ifca (ifca.lr=1)"))
    y = line.get_ydata()
    assert y[0] == pytest.approx(400.5) and np.isnan(y[1]) and np.isnan(y[2])
    [x_marks] = crosses(loss)
    np.testing.assert_allclose(x_marks.get_xdata(), [20, 30])
    assert x_marks.get_label() == "diverged: ifca (ifca.lr=1): test loss at 2 rounds from round 20"
    assert loss.get_yscale() == "log"          # 0.27 .. 400: more than two decades
    # the final value at lr = 1 (one seed inf): a cross at x = 1, the others a line
    [f_marks] = crosses(final)
    np.testing.assert_allclose(f_marks.get_xdata(), [1.0])
    assert f_marks.get_label() == "diverged: ifca: final test loss at ifca.lr = 1"
    ifca = next(l for l in final.lines if l.get_label() == "ifca")
    np.testing.assert_allclose(ifca.get_ydata()[:2], [55.5, 0.275])
    assert np.isnan(ifca.get_ydata()[2])
    level = next(l for l in final.lines if l.get_label() == "fedavg (no ifca.lr)")
    np.testing.assert_allclose(level.get_ydata(), [0.48, 0.48])   # fedavg, not dropped
    assert final.get_yscale() == "log" and final.get_xscale() == "log"
    # one legend, for the figure, naming every line and both divergences
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert len(legends) == 1
    names = [t.get_text() for t in legends[0].get_texts()]
    assert x_marks.get_label() in names and f_marks.get_label() in names
    assert "fedavg, 2 seeds" in names and "fedavg (no ifca.lr)" in names
    out = tmp_path / "sweep.json"
    out.write_text(json.dumps(rows()))            # inf is written as Infinity
    assert main(["plot", str(out), "-o", str(tmp_path / "f.png")]) == 0


def test_exploded_means_a_million_times_the_panel_median():
    ref = [0.3, 1.0, 2.0, 5.0, 40.0]             # median 2
    values = [1.0, 1.9e6, 2.1e6, math.nan, math.inf]
    np.testing.assert_array_equal(plot.diverged(values, ref, "test_loss"),
                                  [False, False, True, True, True])
    # accuracies and cluster counts do not explode; only non-finite values diverge there
    np.testing.assert_array_equal(plot.diverged(values, ref, "test_acc"),
                                  [False, False, False, True, True])


@pytest.mark.parametrize("top, scale", [(30.0, "linear"), (99.0, "linear"), (101.0, "log")])
def test_a_loss_axis_is_logarithmic_past_two_decades(top, scale):
    plt = plot.pyplot()
    fig, ax = plt.subplots()
    records = [{"algorithm": "a", "seed": 0, "params": {}, "final": {},
                "curves": {"round": [1, 2, 3], "test_loss": [top, 5.0, 1.0],
                           "test_acc": [0.001, 0.5, 1.0]}}]
    assert plot.plot_curves(records, "test_loss", ax=ax).get_yscale() == scale
    assert plot.plot_curves(records, "test_acc", ax=plt.subplots()[1]).get_yscale() == "linear"
    plt.close("all")


def test_a_metric_the_file_lacks_is_refused_with_those_it_holds(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    out.write_text(json.dumps(rows()))
    assert main(["plot", str(out), "-o", str(tmp_path / "f.png"), "--metric", "test_acc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("fedclust-jax: error: unknown metric 'test_acc'; the results hold: "
                   "misclustering, test_loss")
    assert not (tmp_path / "f.png").exists()
    assert main(["plot", str(out), "-o", str(tmp_path / "f.png"), "--metric", "test_loss"]) == 0
