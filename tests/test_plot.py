"""`fedclust-jax plot` and fedclust_jax.plot: run/compare JSON and sweep rows (JSON and CSV),
written by hand and by a real tiny run; panels, lines, bands, log axes and bad input."""

import csv
import json

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from fedclust_jax import plot  # noqa: E402
from fedclust_jax.cli import main  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--dataset", "synthetic-regression", "--data", "num_clients=8", "--data", "dim=5",
        "--data", "samples_per_client=10", "--data", "test_samples_per_client=5",
        "--rounds", "3", "--restarts", "1", "--no-progress"]


def curves(rounds, shift=0.0, ari=True):
    c = {"round": rounds,
         "test_acc": [0.5 + 0.1 * i + shift for i in range(len(rounds))],
         "test_loss": [1.0 - 0.1 * i for i in range(len(rounds))],
         "misclustering": [0.5 - 0.1 * i for i in range(len(rounds))],
         "ari": [0.1 * i for i in range(len(rounds))] if ari else None,
         "cluster_sizes": [[4, 4], [8, 0], [5, 3]][:len(rounds)]}
    return c


def run_result(alg, seed, shift=0.0, with_curves=True):
    r = {"algorithm": alg, "config": {"algorithm": alg, "seed": seed, "rounds": 3},
         "metrics": {"test_acc": 0.7 + shift, "misclustering": None},
         "history": {"train_loss": [1.0 + shift, 0.8, 0.6]}, "wall_s": 1.0, "extra": [1, 2]}
    if with_curves:
        r["curves"] = curves([1, 2, 3], shift, ari=alg != "fedavg")
    return r


def sweep_rows():
    """ifca over ifca.lr x data.num_clients x 3 seeds, fedavg over data.num_clients x 3
    seeds (no ifca.lr): 18 + 9 rows."""
    rows = []
    for n in (10, 100, 1000):
        for seed in (0, 1, 2):
            for lr in (0.1, 0.3):
                rows.append({"algorithm": "ifca", "seed": seed, "ifca.lr": lr,
                             "data.num_clients": n, "test_acc": 0.8 + 0.01 * seed + lr / 10,
                             "misclustering": 0.0, "ari": 1.0, "num_clusters_found": 2,
                             "wall_s": 3.0, "unrelated": "x",
                             "curves": curves([5, 10], 0.01 * seed)})
            rows.append({"algorithm": "fedavg", "seed": seed, "ifca.lr": None,
                         "data.num_clients": n, "test_acc": 0.5 + 0.01 * seed,
                         "misclustering": None, "ari": None, "num_clusters_found": None,
                         "wall_s": 2.0, "unrelated": "x",
                         "curves": {"round": [5, 10], "test_acc": [0.4, 0.5]}})
    return rows


def write_csv(rows, path):
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, dict) else ("" if v is None else v)
                        for k, v in r.items()})


def is_png(path):
    return path.exists() and path.stat().st_size > len(PNG) and path.read_bytes()[:8] == PNG


def panels(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """A real compare (fedavg, ifca; seed 0) and a real run (ifca, seed 1)."""
    d = tmp_path_factory.mktemp("real")
    assert main(["compare", "--algorithms", "fedavg,ifca", "--output", str(d / "cmp.json")] + TINY) == 0
    assert main(["run", "--algorithm", "ifca", "--seed", "1", "--output", str(d / "run.json")] + TINY) == 0
    return d / "cmp.json", d / "run.json"


def test_real_run_and_compare_files_plot(real_runs, tmp_path, capsys):
    cmp_, run = real_runs
    out = tmp_path / "fig.png"
    assert main(["plot", str(cmp_), str(run), "-o", str(out)]) == 0
    assert is_png(out) and "figure written" in capsys.readouterr().out
    kind, records = plot.load_results([cmp_, run])
    assert kind == "run" and [r["seed"] for r in records] == [0, 0, 1]
    fig = plot.figure(kind, records)
    loss = panels(fig)["training loss"]
    labels = [l.get_label() for l in loss.lines]
    assert labels == ["fedavg", "ifca, 2 seeds"]           # ifca pooled over both files
    np.testing.assert_allclose(loss.lines[0].get_xdata(), [1, 2, 3])
    truth = [json.loads(p.read_text()) for p in (cmp_, run)]
    want = np.mean([truth[0][1]["history"]["train_loss"], truth[1]["history"]["train_loss"]], 0)
    np.testing.assert_allclose(loss.lines[1].get_ydata(), want, rtol=1e-6)
    assert len(loss.collections) == 1                        # a band for ifca only (2 seeds)


def test_handwritten_run_files_one_panel_per_curve_metric(tmp_path):
    a, b = tmp_path / "s0.json", tmp_path / "s1.json"
    a.write_text(json.dumps([run_result("fedavg", 0), run_result("ifca", 0)]))
    b.write_text(json.dumps([run_result("fedavg", 1, 0.2), run_result("ifca", 1, 0.2)]))
    fig = plot.plot_results([a, b], str(tmp_path / "f.png"))
    p = panels(fig)
    assert list(p) == ["test accuracy", "test loss", "training loss", "misclustering", "ARI",
                       "non-empty clusters"]
    assert len(p["test accuracy"].lines) == 2 and len(p["ARI"].lines) == 1  # fedavg's ari null
    assert p["ARI"].lines[0].get_color() == p["test accuracy"].lines[1].get_color()  # ifca's
    np.testing.assert_allclose(p["test accuracy"].lines[0].get_ydata(), [0.6, 0.7, 0.8])
    np.testing.assert_allclose(p["non-empty clusters"].lines[0].get_ydata(), [2, 1, 2])
    band = p["test accuracy"].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.5) and band.max() == pytest.approx(0.9)  # mean +- 0.1
    assert is_png(tmp_path / "f.png")
    # one metric only; the count alias reaches the num_clusters trace
    fig = plot.plot_results(a, str(tmp_path / "g.png"), metric="num_clusters_found")
    assert list(panels(fig)) == ["non-empty clusters"]


def test_curves_are_optional_history_alone_plots(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps([run_result("fedavg", 0, with_curves=False)]))
    assert main(["plot", str(f), "-o", str(tmp_path / "x.png")]) == 0
    assert list(panels(plot.figure(*plot.load_results(f)))) == ["training loss"]


def test_sweep_rows_curves_and_final_metric_against_each_parameter(tmp_path):
    rows = sweep_rows()
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    write_csv(rows, tmp_path / "rows.csv")
    kind, records = plot.load_results(path)
    assert kind == "sweep" and len(records) == 27
    assert plot.load_results(tmp_path / "rows.csv") == (kind, records)  # CSV reads the same
    assert plot.swept_params(records) == ["ifca.lr", "data.num_clients"]  # not unrelated/wall_s
    out = tmp_path / "fig.png"
    assert main(["plot", str(path), "-o", str(out), "--title", "t"]) == 0 and is_png(out)
    fig = plot.figure(kind, records)
    p = panels(fig)
    assert "final test accuracy vs ifca.lr" in p and "final test accuracy vs data.num_clients" in p
    n = p["final test accuracy vs data.num_clients"]
    assert n.get_xscale() == "log" and p["final test accuracy vs ifca.lr"].get_xscale() == "linear"
    assert len(n.lines) == 3                       # ifca at each lr, fedavg
    fed = next(l for l in n.lines if l.get_label() == "fedavg")
    np.testing.assert_allclose(fed.get_xdata(), [10, 100, 1000])
    np.testing.assert_allclose(fed.get_ydata(), [0.51] * 3)  # mean over seeds 0, 1, 2
    by_lr = p["final test accuracy vs ifca.lr"]
    assert len(by_lr.lines) == 4                   # ifca per num_clients, fedavg's level
    level = next(l for l in by_lr.lines if l.get_label() == "fedavg (no ifca.lr)")
    np.testing.assert_allclose(level.get_ydata(), [0.51, 0.51])  # over its 9 rows
    assert len(p["test accuracy"].lines) == 9      # 6 ifca points + 3 fedavg points
    assert len(p["ARI"].lines) == 6


def test_plot_functions_on_given_axes(tmp_path):
    plt = plot.pyplot()
    fig, (a, b) = plt.subplots(1, 2)
    rows = sweep_rows()
    assert plot.plot_sweep(rows, "ifca.lr", "test_acc", ax=a, by=[]) is a
    assert [l.get_label() for l in a.lines] == ["ifca", "fedavg (no ifca.lr)"]  # pooled
    np.testing.assert_allclose(a.lines[0].get_ydata(), [0.82, 0.84])
    plot.plot_curves([run_result("ifca", 0), run_result("ifca", 1)], "test_loss", ax=b)
    assert len(b.lines) == 1 and b.get_xlabel() == "round"
    plt.close(fig)
    # string-valued parameters are categories
    cat = [dict(r, **{"ifca.option": ["gradient", "model"][r["seed"] % 2]}) for r in rows]
    ax = plot.plot_sweep(cat, "ifca.option", "test_acc", by=[])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gradient", "model"]


@pytest.mark.parametrize("case", ["missing", "folder", "garbage", "not-results", "metric", "x",
                                  "format"])
def test_bad_input_exit_2_one_line(tmp_path, capsys, case):
    good = tmp_path / "r.json"
    good.write_text(json.dumps([run_result("ifca", 0)]))
    argv = {"missing": [str(tmp_path / "none.json")],
            "folder": [str(tmp_path)],
            "garbage": [str(tmp_path / "bad.json")],
            "not-results": [str(tmp_path / "list.json")],
            "metric": [str(good), "--metric", "accuracy"],
            "x": [str(good), "--x", "ifca.lr"],
            "format": [str(good)]}[case]
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    out = tmp_path / ("fig.xyz" if case == "format" else "fig.png")
    assert main(["plot", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedclust-jax: error:")
    assert not out.exists()


def test_missing_matplotlib_gives_the_pip_command(tmp_path, capsys, monkeypatch):
    import builtins
    good = tmp_path / "r.json"
    good.write_text(json.dumps([run_result("ifca", 0)]))
    real = builtins.__import__

    def no_mpl(name, *a, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert main(["plot", str(good), "-o", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'fedclust_jax[plot]'" in err


def test_a_folder_as_figure_path_suggests_a_png(tmp_path, capsys):
    good = tmp_path / "r.json"
    good.write_text(json.dumps([run_result("ifca", 0)]))
    assert main(["plot", str(good), "-o", str(tmp_path)]) == 2
    assert ("is a folder; give a file name, e.g. " + repr(str(tmp_path / "figure.png"))
            in capsys.readouterr().err)


def test_real_sweep_rows_average_over_seeds(tmp_path):
    """Rows written by `sweep` name their swept paths: the plot groups by ifca.lr alone and
    averages the two seeds, from the rows, the JSON and the CSV alike."""
    from fedclust_jax.results import save_rows
    from fedclust_jax.sweep import run_sweep
    study = {"dataset": "synthetic-regression", "rounds": 4, "eval_every": 2,
             "data": {"num_clients": 8, "dim": 5, "samples_per_client": 10},
             "algorithms": {"ifca": {"num_clusters": 2, "lr": 0.05}},
             "sweep": {"seed": [0, 1], "ifca.lr": [0.05, 0.1]}}
    rows = run_sweep(study, progress=False)
    for source in (rows, save_rows(rows, str(tmp_path / "r.json")), save_rows(rows, str(tmp_path / "r.csv"))):
        records = plot._records(source)
        assert plot.swept_params(records) == ["ifca.lr"]
        curves = plot.mean_curves(records, "misclustering")
        assert len(curves) == 2 and all(c[-1] == 2 for c in curves)   # two seeds per line
