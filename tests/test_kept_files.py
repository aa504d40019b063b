"""Nothing a user made is replaced: `run` / `compare --output`, `sweep --output` and `plot -o`
replace a file only when it holds what that command writes, or with --overwrite; otherwise
the output goes to <stem>-<n><suffix> beside it and the message names that file."""

import json

import pytest

from fedclust_jax import results
from fedclust_jax.cli import main

TINY = ["--data", "num_clients=8", "--data", "samples_per_client=10", "--data", "dim=5",
        "--rounds", "2", "--restarts", "1", "--no-progress"]
MINE = '{"my": "notes"}\n'


def test_run_keeps_a_foreign_output_file_and_says_where_the_results_went(tmp_path, capsys):
    mine = tmp_path / "results.json"
    mine.write_text(MINE)
    assert main(["run", "--algorithm", "ifca", *TINY, "--output", str(mine)]) == 1
    err = capsys.readouterr().err
    went = tmp_path / "results-1.json"
    assert mine.read_text() == MINE
    assert f"the output will go to {went}" in err and f"output written to {went}" in err
    written = json.loads(went.read_text())
    assert written["algorithm"] == "ifca" and written["command"].startswith("fedclust-jax run")
    assert results.written_kind(str(went)) == "results"
    # what run wrote is run's to replace; --overwrite replaces the foreign file
    assert results.save_results(written, str(went)) == str(went)
    assert results.save_results(written, str(mine), overwrite=True) == str(mine)
    assert json.loads(mine.read_text())["algorithm"] == "ifca"


def test_each_writer_replaces_only_its_own_kind(tmp_path, capsys):
    result = {"algorithm": "ifca", "config": {}, "metrics": {"test_acc": 0.5}}
    rows = [{"algorithm": "ifca", "point": 0, "seed": 0, "test_acc": 0.5}]
    path = str(tmp_path / "r.json")
    assert results.save_results([result, result], path) == path      # compare: a list
    assert results.save_rows(rows, path) == str(tmp_path / "r-1.json")  # rows over results: no
    assert results.save_rows(rows, path) == str(tmp_path / "r-1.json")  # again: its own file
    assert results.written_kind(path) == "results"
    assert f"output written to {tmp_path / 'r-1.json'}; {path} is kept" in capsys.readouterr().err
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text("name,value\na,1\n")
    assert results.check_rows_path(str(csv_path), overwrite=False) == str(tmp_path / "rows-1.csv")
    assert results.save_rows(rows, str(csv_path)) == str(tmp_path / "rows-1.csv")
    assert csv_path.read_text() == "name,value\na,1\n"
    assert results.written_kind(str(tmp_path / "rows-1.csv")) == "rows"
    assert results.save_rows(rows, str(csv_path), overwrite=True) == str(csv_path)


def test_plot_keeps_a_foreign_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rows = [{"algorithm": "ifca", "point": i, "swept": ["ifca.lr"], "ifca.lr": lr, "seed": 0,
             "test_loss": 1.0 - lr} for i, lr in enumerate((0.1, 0.2))]
    src = tmp_path / "rows.json"
    src.write_text(json.dumps(rows))
    fig = tmp_path / "fig.png"
    fig.write_bytes(b"my picture")
    assert main(["plot", str(src), "-o", str(fig)]) == 1
    out = capsys.readouterr()
    assert fig.read_bytes() == b"my picture"
    assert f"figure written to {tmp_path / 'fig-1.png'}" in out.out and "fig-1.png" in out.err
    assert results.written_kind(str(tmp_path / "fig-1.png")) == "figure"
    assert main(["plot", str(src), "-o", str(tmp_path / "fig-1.png")]) == 0   # its own figure
    assert main(["plot", str(src), "-o", str(fig), "--overwrite"]) == 0
    assert results.written_kind(str(fig)) == "figure"
