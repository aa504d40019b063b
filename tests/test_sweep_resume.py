"""Sweeps resume per point: a sweep interrupted inside a program resumes to the rows of the
uninterrupted sweep, with one compiled chunk program; a changed grid or setting, a folder
of other files or an output the command did not write are refused in one line.
(Processes killed with SIGKILL: tests/test_kill_resume.py.)"""

import json

import pytest

from fedclust_jax.cli import main
from fedclust_jax.progress import RunInterrupted
from fedclust_jax.sweep import run_sweep
from test_resume import TINY, interrupt_at

SWEEP = {"dataset": "synthetic-regression", "data": dict(TINY), "rounds": 6, "restarts": 2,
         "eval_every": 2, "algorithms": {"ifca": {"num_clusters": 2, "option": "gradient"},
                                         "fedavg": {"lr": 0.05}},
         "sweep": {"seed": [0, 1], "ifca.lr": [0.02, 0.1]}}


def test_an_interrupted_sweep_says_where_and_resumes_the_call_in_flight(tmp_path, monkeypatch,
                                                                        capsys):
    """Interrupted inside the second program (after round 3 of its call, saves every
    round), the sweep names the program, the points ended and what the folder holds; the
    rerun skips the first program and resumes the second from round 3, with one compiled
    chunk program. (Its rows equal the uninterrupted sweep's: tests/test_kill_resume.py.)"""
    folder, written = str(tmp_path / "ck"), []
    with monkeypatch.context() as m:
        interrupt_at(m, lambda label, done: "program 2" in label and done >= 3)
        with pytest.raises(RunInterrupted) as e:
            run_sweep(SWEEP, progress=False, checkpoint=folder, checkpoint_every="1r",
                      on_rows=lambda rows: written.append(len(rows)))
    assert written == [4]                        # the rows of program 1, when it ended
    line = e.value.line()
    assert line.startswith("sweep program 2 of 2 (fedavg, points 1, 3): interrupted at round 3 "
                           f"of 6; 4 of 6 point(s) ended in {folder}; ")
    assert line.endswith("holds round 3 (no round lost); rerun the same command to resume")
    stats = {}
    resumed = run_sweep(SWEEP, progress=True, checkpoint=folder, checkpoint_every="1r",
                        stats=stats)
    err = capsys.readouterr().err
    assert f"sweep: program 1: ifca, 4 point(s) ended in {folder}" in err
    assert "sweep program 2 of 2 (fedavg, points 1, 3): resuming from round 3 of 6" in err
    assert stats["traces"] == 1                  # the first program was not run again
    assert [r["point"] for r in resumed] == [0, 1, 2, 3, 0, 2] and written == [4]
    other = {**SWEEP, "rounds": 5}
    with pytest.raises(ValueError, match="the same grid with other settings"):
        run_sweep(other, progress=False, checkpoint=folder)
    other = {**SWEEP, "sweep": {"seed": [0, 2], "ifca.lr": [0.02, 0.1]}}
    with pytest.raises(ValueError, match=r"another grid \(4 point\(s\): seed = \[0, 1\]"):
        run_sweep(other, progress=False, checkpoint=folder)


def test_a_folder_not_ours_is_refused_before_compute(tmp_path, capsys):
    study = tmp_path / "s.json"
    study.write_text(json.dumps(SWEEP))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main(["sweep", "--config", str(study), "--checkpoint", str(tmp_path / "mine")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds files that are not a sweep checkpoint" in err and len(err.splitlines()) == 1
    assert main(["sweep", "--config", str(study), "--checkpoint-every", "5r"]) == 2
    assert "needs --checkpoint" in capsys.readouterr().err


def test_the_readme_says_how_to_resume_in_two_lines_with_the_sweep_flags():
    import pathlib
    import re

    from fedclust_jax.cli import make_parser
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Sweeps", 1)[1].split("\n## ", 1)[0]
    paragraph = "**Resume.**" + section.split("**Resume.**", 1)[1].split("\n\n", 1)[0]
    assert len(paragraph.strip().splitlines()) == 2
    assert "rerun" in paragraph and "resumes" in paragraph
    sweep = make_parser()._subparsers._group_actions[0].choices["sweep"]
    flags = {o for a in sweep._actions for o in a.option_strings}
    named = set(re.findall(r"`(--[a-z-]+)", paragraph))
    assert named >= {"--checkpoint", "--checkpoint-every"} and named <= flags


def test_a_table_folder_refuses_another_table_quick_or_seeds(tmp_path):
    from fedclust_jax import reproduce
    spec, folder = reproduce.load_spec("ifca-figure3b"), str(tmp_path / "ck")
    assert reproduce.open_checkpoint(spec, True, [0, 1], folder, "1r").rounds == 1
    assert reproduce.open_checkpoint(spec, True, [0, 1], folder, None) is None   # the same
    for quick, seeds in ((True, [0, 2]), (False, [0, 1])):
        with pytest.raises(ValueError, match="holds the runs of ifca-figure3b"):
            reproduce.open_checkpoint(spec, quick, seeds, folder, None)
    with pytest.raises(ValueError, match="holds the runs of ifca-figure3b"):
        reproduce.open_checkpoint(reproduce.load_spec("ifca-figure3a"), True, [0, 1], folder, None)
    with pytest.raises(ValueError, match="needs --checkpoint DIR"):
        reproduce.open_checkpoint(spec, True, None, None, "5r")
