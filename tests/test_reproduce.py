"""Paper tables as study files (fedclust_jax.reproduce): every table runs at CI size, a
committed results file equals what its raw rows give, a row equals the single run with
its settings and seed, a run never replaces results of a larger run or files it did not
write, bad input stops before compute."""

import json
import shutil
from argparse import Namespace
from pathlib import Path

import pytest

from fedclust_jax import reproduce
from fedclust_jax.experiment import run_experiment, study_configs
from fedclust_jax.sweep import apply_point, parse_sweep, run_sweep

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def args(table, **kw):
    return Namespace(**{**dict(table=table, list=False, quick=True, out=None, data_dir=None,
                               seeds=None, no_progress=True, overwrite=False), **kw})


def snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*")) if p.is_file()}


def test_table_ids_cover_the_study_files():
    ids = reproduce.table_ids()
    assert "srfca-table5" in ids and "brifca-figure1" in ids
    for table_id in ids:
        spec = reproduce.load_spec(table_id)
        assert spec["paper"] in reproduce.PAPERS
        for study in reproduce.studies(spec, quick=True).values():
            parse_sweep(study)            # every quick study is a valid sweep


@pytest.mark.parametrize("table_id", reproduce.table_ids())
def test_every_table_runs_quick_and_its_markdown_comes_from_its_rows(table_id, tmp_path,
                                                                     monkeypatch):
    """From the checkout with the default --out: a --quick run writes results/<paper>/
    under the working folder and leaves the committed results byte for byte."""
    spec = reproduce.load_spec(table_id)
    committed = snapshot(RESULTS / spec["paper"])
    monkeypatch.chdir(tmp_path)
    assert reproduce.main(args(table_id)) == 0
    assert snapshot(RESULTS / spec["paper"]) == committed
    out = tmp_path / "results" / spec["paper"]
    md = (out / f"{spec['name']}.md").read_text()
    record = json.loads((out / f"{spec['name']}.json").read_text())
    assert md.splitlines()[0] == f"`python -m fedclust_jax.reproduce {table_id} --quick`"
    assert record["rows"] and record["quick"] and record["verdict"].startswith("not run")
    assert reproduce.render(spec, record) == md
    numbers = [c for c in reproduce.cells(spec, record["rows"]).values()]
    assert all(c["n"] >= 1 and c["mean"] is not None for c in numbers), numbers


def committed():
    """The results files the reproduce command wrote (script-made tables have no "verdict")."""
    return sorted(p for p in RESULTS.glob("*/*.json") if p.parent.name in reproduce.PAPERS
                  and {"table", "verdict", "rows"} <= set(json.loads(p.read_text())))


@pytest.mark.parametrize("path", committed(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_results_equal_their_raw_rows(path):
    record = json.loads(path.read_text())
    spec = reproduce.load_spec(record["table"])
    assert path.with_suffix(".md").read_text() == reproduce.render(spec, record)
    assert record["verdict"] == reproduce.verdict(spec, reproduce.cells(spec, record["rows"]),
                                                  record["quick"])


def one_table_per_paper() -> list[str]:
    """The first table id of every paper (sorted), one reproduction row checked per paper."""
    ids = reproduce.table_ids()
    return [next(t for t in ids if t.startswith(p + "-")) for p in reproduce.PAPERS
            if any(t.startswith(p + "-") for t in ids)]


@pytest.mark.parametrize("table_id", one_table_per_paper())
def test_a_row_equals_the_single_run_with_its_settings_and_seed(table_id):
    """The first algorithm of the table's first quick part, at its first seed and grid
    point: the runner's row (run_sweep, or run_study for runner = "study") equals
    ``run_experiment`` of the same settings, as ``fedclust-jax run`` would run it."""
    spec = reproduce.load_spec(table_id)
    study = next(iter(reproduce.studies(spec, quick=True).values()))
    label = next(iter(study["algorithms"]))
    study = {**study, "algorithms": {label: study["algorithms"][label]},
             "sweep": {**study["sweep"], "seed": study["sweep"]["seed"][:1]}}
    spec = {**spec, "study": study, "parts": None, "quick": {}}
    runner = spec["table"].get("runner", "sweep")
    rows = run_sweep(study, progress=False) if runner == "sweep" else \
        reproduce._study_rows(study, progress=False)
    base, paths, _ = parse_sweep(study)
    (_, cfg), = study_configs(apply_point(base, {p: rows[0][p] for p in paths if p in rows[0]}))
    single = run_experiment(cfg, progress=False)
    metric = reproduce._as_list(spec["table"]["metric"])[0]
    expected = single["restarts"][metric[len("restarts."):]] if metric.startswith("restarts.") \
        else single["metrics"][metric]
    assert rows[0]["seed"] == cfg.seed
    assert rows[0][metric] == pytest.approx(expected, rel=1e-5, abs=1e-6), (metric, rows[0])


def test_cells_mean_spread_agreement_and_verdict():
    spec = {"table": {"metric": "acc", "rows": "algorithm", "columns": "part", "scale": 100.0,
                      "tolerance": 0.5},
            "paper_numbers": {"numbers": {"a": {"x": [50.0, 1.0], "y": 10.0}},
                              "claims": [{"text": "a below b", "lower": "a", "higher": "b"}]}}
    rows = [{"algorithm": "a", "part": "x", "acc": 0.50}, {"algorithm": "a", "part": "x", "acc": 0.52},
            {"algorithm": "a", "part": "y", "acc": 0.20}, {"algorithm": "b", "part": "x", "acc": 0.9},
            {"algorithm": "b", "part": "y", "acc": 0.1}]
    c = reproduce.cells(spec, rows)
    assert c[("a", "x")]["mean"] == pytest.approx(51.0) and c[("a", "x")]["spread"] == pytest.approx(1.0)
    assert c[("a", "x")]["agrees"] is True and c[("a", "y")]["agrees"] is False
    assert c[("b", "x")]["agrees"] is None
    assert [h["holds"] for h in reproduce.claims(spec, c)] == [True, False]
    assert reproduce.verdict(spec, c, quick=False).startswith("partly (2 of 4")
    assert reproduce.verdict(spec, c, quick=True).startswith("not run")


def test_bad_input_is_one_line_and_exit_2_before_compute(capsys, tmp_path):
    assert reproduce.main(args("srfca-table99")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown table 'srfca-table99'; available:") and err.count("\n") == 1
    assert reproduce.main(args("srfca-table5", seeds=[1, 1])) == 2
    assert "distinct" in capsys.readouterr().err
    (tmp_path / "f").write_text("")
    assert reproduce.main(args("srfca-table5", out=str(tmp_path / "f"))) == 2
    assert reproduce.main(args(None)) == 2


def test_default_out():
    """A full run from the checkout writes where the committed results live; a --quick run,
    and any run of an installed package, results/<paper>/ under the working folder."""
    assert reproduce.default_out("srfca", quick=False) == RESULTS / "srfca"
    assert reproduce.default_out("srfca", quick=True) == Path("results", "srfca")
    assert reproduce.checkout() == ROOT
    assert reproduce.load_spec("srfca-table5")["path"] == "fedclust_jax/studies/srfca/table5.toml"


def test_results_of_a_larger_run_and_foreign_files_are_kept(tmp_path, monkeypatch, capsys):
    """srfca-table5's committed results (5 seeds, full size) copied to --out: a --quick run
    and a full run of fewer seeds write table5-1.md / .json beside them and say so before
    they start; a run as large replaces them, and so does --overwrite; a .md that reproduce
    did not write is kept. The rows are the committed ones (the files are the subject)."""
    record = json.loads((RESULTS / "srfca" / "table5.json").read_text())
    monkeypatch.setattr(reproduce, "run_table", lambda spec, quick, seeds, data_dir, progress, **kw: [
        r for r in record["rows"] if r["seed"] in (seeds or ([0, 1] if quick else range(5)))])
    out = tmp_path / "srfca"
    shutil.copytree(RESULTS / "srfca", out)
    committed = snapshot(out)

    def run(**kw):
        code = reproduce.main(args("srfca-table5", out=str(out), **kw))
        return code, capsys.readouterr().err

    code, err = run()
    assert code == 0 and snapshot(out).items() >= committed.items()
    assert (f"{out / 'table5'}.md and .json hold the results of a larger run (full, 5 seed(s)); "
            f"they are kept and this run writes {out / 'table5-1.md'} and table5-1.json") in err
    assert f"wrote {out / 'table5-1.md'} and table5-1.json" in err
    assert json.loads((out / "table5-1.json").read_text())["quick"]
    code, err = run(quick=False, seeds=[0])        # larger than --quick: replaces table5-1
    assert code == 0 and snapshot(out).items() >= committed.items() and "table5-1.md" in err
    assert not (out / "table5-2.md").exists()
    assert not json.loads((out / "table5-1.json").read_text())["quick"]
    code, err = run(quick=False)                   # as large as the committed run
    assert code == 0 and "kept" not in err and f"wrote {out / 'table5.md'}" in err
    assert json.loads((out / "table5.json").read_text())["rows"] == record["rows"]
    code, err = run(overwrite=True)                # --quick over the full run
    assert code == 0 and f"wrote {out / 'table5.md'}" in err
    assert json.loads((out / "table5.json").read_text())["quick"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "table5.md").write_text("my notes\n")
    assert reproduce.main(args("srfca-table5", out=str(foreign))) == 0
    assert (foreign / "table5.md").read_text() == "my notes\n"
    assert "table5.md and .json were not written by reproduce" in capsys.readouterr().err
    assert (foreign / "table5-1.md").exists() and not (foreign / "table5.json").exists()


def test_a_resumed_table_gives_its_runs_own_seconds():
    """A table assembled from --checkpoint in seconds names what its runs took, each sweep
    program once (curve points repeat a program's rows), and a table run through adds
    nothing."""
    rows = [{"part": "a", "program": 1, "program_wall_s": 100.0, "round": 10},
            {"part": "a", "program": 1, "program_wall_s": 100.0, "round": 20},
            {"part": "b", "program": 1, "program_wall_s": 50.0},
            {"part": "", "point": 0, "algorithm": "ifca", "seed": 0, "wall_s": 7.0}]
    assert reproduce._resumed(rows, 4.0) == (
        " (its runs' own times sum to 157 s: resumed from --checkpoint)")
    assert reproduce._resumed(rows, 160.0) == ""
