"""README.md's commands, run as a user runs them, and the numbers it states checked against
what they print (to two decimals: |stated - printed| <= 0.005).

The commands run in a subprocess of the installed ``fedclust-jax``, with the XLA flags a user
has (the suite's compile-speed flag from conftest.py is removed, since it changes rounding).
The quick examples run in the default suite. The two presets take about a minute of CPU each
on 2 cores: they are marked ``slow`` and run only with FEDCLUST_SLOW=1.
``test_every_command_is_covered`` fails when the README gains a command that no test here runs
and that is not listed, with the reason, as not runnable here.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TOLERANCE = 0.005 + 1e-9


def slow(test):
    """A README example too long for the default suite: marked ``slow``; runs with
    FEDCLUST_SLOW=1."""
    skip = pytest.mark.skipif(os.environ.get("FEDCLUST_SLOW") != "1",
                              reason="slow README example: set FEDCLUST_SLOW=1 to run it")
    return pytest.mark.slow(skip(test))


# Commands of the README that run here, each with the test that runs it.
RUN = {
    "fedclust-jax list": "test_list",
    "fedclust-jax list ifca": "test_list",
    "fedclust-jax compare --data scaling=multiply": "test_quickstart",
    "fedclust-jax compare --config study.toml": "test_study_file",
    "fedclust-jax run --config study.toml --algorithm ifca --output ifca.json": "test_study_file",
    "fedclust-jax plot ifca.json -o ifca.png": "test_study_file",
    "fedclust-jax sweep --config sweep.toml --output results.csv": "test_sweep",
    "fedclust-jax plot results.csv -o sweep.png --metric test_loss --x ifca.lr": "test_sweep",
    "fedclust-jax compare --preset mixture-classification --algorithms fedavg,ifca "
    "--participation 0.1": "test_participation",
    "fedclust-jax compare --preset mixture-classification": "test_preset_mixture (slow)",
    "fedclust-jax compare --preset rotated-digits": "test_preset_rotated_digits (slow)",
}
# Commands (or command patterns) that do not run here, and why.
NOT_RUN = {
    "pip install -e .": "installs the package this suite runs in",
    'pip install -e ".[cuda12]"': "needs an NVIDIA GPU; test_accelerator_extras checks the extra",
    'pip install -e ".[tpu]"': "needs a TPU; test_accelerator_extras checks the extra",
    "python -c \"import sys; from fedclust_jax.core.sharding import initialize_processes;":
        "needs several hosts; tests/core/test_multiprocess.py runs two processes",
    "fedclust-jax list NAME": "a pattern: `list ifca` runs",
    'pip install -e ".[tensorboard,mlflow,wandb]"': "the trackers' extras, which CI installs",
    "fedclust-jax run --preset rotated-digits --algorithm ifca --rounds 20 --eval-every 5":
        "tests/test_tracking.py runs it (FEDCLUST_SLOW=1) and reads each tracker back",
    "tensorboard --logdir runs": "starts a server; tests/test_tracking.py reads the event files",
    "python -m fedclust_jax.reproduce <paper>-<name>":
        "a pattern: tests/test_reproduce.py runs every table --quick; test_reproduce_list",
}


def code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks (comments dropped, continuation lines
    joined) and every inline `fedclust-jax ...` in its prose."""
    commands = []
    for block in code_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                commands.append(" ".join(line.split()))
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    inline = r"`((?:fedclust-jax|python -m fedclust_jax\.\w+) [^`]+)`"
    commands += [" ".join(c.split()) for c in re.findall(inline, prose)]
    return commands


def test_every_command_is_covered():
    for command in readme_commands():
        known = (command in RUN or any(command.startswith(p) for p in NOT_RUN)
                 or any(run.startswith(command + " ") for run in RUN))   # a subcommand named
        assert known, f"README command not run by tests/test_readme.py: {command!r}"


def fedclust(*args: str, cwd: pathlib.Path) -> str:
    """Run `fedclust-jax ARGS` as a user would; returns stdout, fails on a non-zero exit."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_backend_optimization_level")]
    env["XLA_FLAGS"] = " ".join(flags)
    script = pathlib.Path(sys.executable).with_name("fedclust-jax")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "fedclust_jax"]
    proc = subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (f"fedclust-jax {' '.join(args)} exited {proc.returncode}:\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def result_table(out: str) -> list[dict[str, str]]:
    """The results table a command prints: the header line that starts with "algorithm", the
    dashes under it, then one row per line until a blank line. Cells are split on runs of two
    or more spaces, so column widths and order do not matter."""
    lines = out.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.split()[:1] == ["algorithm"] and set(lines[i + 1].strip()) <= {"-", " "}:
            header = re.split(r"\s{2,}", line.strip())
            rows = []
            for row in lines[i + 2:]:
                if not row.strip():
                    break
                cells = re.split(r"\s{2,}", row.strip())
                if len(cells) != len(header):
                    break
                rows.append(dict(zip(header, cells)))
            return rows
    raise AssertionError(f"no results table (a header starting with 'algorithm') in:\n{out}")


COLUMNS = {  # what the README calls a number -> the names a results table may give its column
    "acc": ("acc", "test acc", "test_acc", "accuracy"),
    "loss": ("loss", "test loss", "test_loss"),
    "miscl": ("miscl", "misclustering"),
    "param err": ("param err", "param_error"),
    "K found": ("K found", "clusters", "num_clusters_found"),
}


def cell(row: dict[str, str], name: str) -> str:
    for key in COLUMNS.get(name, (name,)):
        if key in row:
            return row[key]
    raise AssertionError(f"no column {name!r} in the results row {row}")


def row_of(rows: list[dict[str, str]], algorithm: str) -> dict[str, str]:
    matches = [r for r in rows if r["algorithm"] == algorithm]
    assert len(matches) == 1, f"expected one row for {algorithm!r} in {rows}"
    return matches[0]


def check(stated: str, printed, what: str):
    assert abs(float(stated) - float(printed)) <= TOLERANCE, (
        f"{what}: README says {stated}, the command printed {printed}")


def readme_sentence(pattern: str) -> tuple[str, ...]:
    match = re.search(pattern, " ".join(README.split()))
    assert match, f"README no longer has a sentence matching {pattern!r}"
    return match.groups()


NUM = r"(\d+(?:\.\d+)?)"


def test_list(tmp_path):
    out = fedclust(*"list".split(), cwd=tmp_path)
    names = set(re.findall(r"^\s+([a-z0-9][a-z0-9-]*)\s", out, re.M))
    algorithms_table = README.split("## Algorithms", 1)[1].split("\n\n", 2)[1]
    for name in re.findall(r"`([a-z0-9-]+)`", "\n".join(
            line.split("|")[1] for line in algorithms_table.splitlines()[2:])):
        assert name in names, f"README's algorithm {name!r} is not in `fedclust-jax list`"
    data_table = README.split("## Data", 1)[1].split("\n\n", 2)[1]
    for name in re.findall(r"`([a-z0-9-]+)`", "\n".join(
            line.split("|")[1] for line in data_table.splitlines()[2:])):
        assert name in names, f"README's dataset {name!r} is not in `fedclust-jax list`"
    out = fedclust(*"list ifca".split(), cwd=tmp_path)
    for parameter in ("num_clusters", "option", "lr", "steps", "participation"):
        assert re.search(rf"^\s*{parameter}\s", out, re.M), f"`list ifca` lacks {parameter}"


def test_quickstart(tmp_path):
    command = "fedclust-jax compare --data scaling=multiply"
    assert command in readme_commands()
    miscl, perr, ifca, fedavg, local = readme_sentence(
        rf"IFCA finds both clusters \(misclustering {NUM}, parameter error {NUM}\), test loss "
        rf"{NUM} against FedAvg's {NUM} and Local's {NUM}")
    rows = result_table(fedclust(*command.split()[1:], cwd=tmp_path))
    check(miscl, cell(row_of(rows, "ifca"), "miscl"), "quickstart IFCA misclustering")
    check(perr, cell(row_of(rows, "ifca"), "param err"), "quickstart IFCA parameter error")
    check(ifca, cell(row_of(rows, "ifca"), "loss"), "quickstart IFCA test loss")
    check(fedavg, cell(row_of(rows, "fedavg"), "loss"), "quickstart FedAvg test loss")
    check(local, cell(row_of(rows, "local"), "loss"), "quickstart Local test loss")
    assert cell(row_of(rows, "ifca"), "K found") == "2"


def write_block(tmp_path, name: str, heading: str) -> pathlib.Path:
    """The first TOML block of the README after ``heading``, written to tmp_path / name."""
    block = README.split(heading, 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / name
    path.write_text(block)
    return path


def test_study_file(tmp_path):
    write_block(tmp_path, "study.toml", "**Study files**")
    miscl, perr, ifca, fedavg = readme_sentence(
        rf"`compare --config study.toml` prints IFCA misclustering {NUM}, parameter error {NUM} "
        rf"and test loss {NUM}, and FedAvg's test loss {NUM}")
    rows = result_table(fedclust("compare", "--config", "study.toml", cwd=tmp_path))
    check(miscl, cell(row_of(rows, "ifca"), "miscl"), "study IFCA misclustering")
    check(perr, cell(row_of(rows, "ifca"), "param err"), "study IFCA parameter error")
    check(ifca, cell(row_of(rows, "ifca"), "loss"), "study IFCA test loss")
    check(fedavg, cell(row_of(rows, "fedavg"), "loss"), "study FedAvg test loss")

    fedclust(*"run --config study.toml --algorithm ifca --output ifca.json".split(), cwd=tmp_path)
    result = json.loads((tmp_path / "ifca.json").read_text())
    if isinstance(result, list):   # older CLIs wrote a list of one result
        assert len(result) == 1
        result = result[0]
    metrics = result["metrics"]
    check(miscl, metrics["misclustering"], "run --output misclustering")
    check(perr, metrics["param_error"], "run --output parameter error")
    check(ifca, metrics["test_loss"], "run --output test loss")

    # The Python example: the same IFCA run, its metrics printed.
    printed = []
    source = code_blocks("python")[0]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(source, "README.md", "exec"), {"print": printed.append})
    finally:
        os.chdir(cwd)
    (metrics,) = printed
    check(miscl, metrics["misclustering"], "Python example misclustering")
    check(perr, metrics["param_error"], "Python example parameter error")
    check(ifca, metrics["test_loss"], "Python example test loss")

    pytest.importorskip("matplotlib")
    fedclust(*"plot ifca.json -o ifca.png".split(), cwd=tmp_path)
    assert (tmp_path / "ifca.png").stat().st_size > 0


def test_sweep(tmp_path):
    write_block(tmp_path, "sweep.toml", "## Sweeps and plots")
    numbers = readme_sentence(
        rf"final test loss {NUM}, {NUM}, {NUM} at gamma = 0\.01, 0\.1, 1 for seed 0 and "
        rf"{NUM}, {NUM}, {NUM} for seed 1 .*? runs once per seed \({NUM}, {NUM}\)")
    keys = [("ifca", lr, seed) for seed in "01" for lr in ("0.01", "0.1", "1")]
    keys += [("fedavg", "-", "0"), ("fedavg", "-", "1")]
    stated = dict(zip(keys, numbers))
    out = fedclust(*"sweep --config sweep.toml --output results.csv".split(), cwd=tmp_path)
    rows = result_table(out)
    assert len(rows) == 8 and (tmp_path / "results.csv").exists()
    for row in rows:
        key = (row["algorithm"], row["ifca.lr"], row["seed"])
        check(stated[key], cell(row, "loss"), f"sweep test loss at {key}")
        if row["algorithm"] == "ifca":
            check("0", cell(row, "miscl"), f"sweep misclustering at {key}")
    pytest.importorskip("matplotlib")
    fedclust(*"plot results.csv -o sweep.png --metric test_loss --x ifca.lr".split(), cwd=tmp_path)
    assert (tmp_path / "sweep.png").stat().st_size > 0


def preset_row(command: str) -> dict[str, str]:
    """The README's presets table row for ``command`` (its first cell may abbreviate the
    command's start with "...", or name it without ``fedclust-jax``)."""
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            shown = cells[0].strip("`")
            full = shown.startswith("...") and command.endswith(shown[3:].strip())
            if shown == command or full:
                return dict(zip(("command", "fedavg", "local", "ifca", "oracle"), cells))
    raise AssertionError(f"no row for {command!r} in the README's presets table")


def check_preset(tmp_path, args: str):
    assert f"fedclust-jax {args}" in readme_commands()
    stated = preset_row(args)
    rows = result_table(fedclust(*args.split(), cwd=tmp_path))
    acc, miscl, k = re.fullmatch(rf"{NUM} \(misclustering {NUM}, (\d+) clusters\)",
                                 stated["ifca"]).groups()
    check(acc, cell(row_of(rows, "ifca"), "acc"), f"{args}: IFCA accuracy")
    check(miscl, cell(row_of(rows, "ifca"), "miscl"), f"{args}: IFCA misclustering")
    assert cell(row_of(rows, "ifca"), "K found") == k, f"{args}: IFCA clusters found"
    for name in ("fedavg", "local", "oracle"):
        if stated[name]:
            check(stated[name], cell(row_of(rows, name), "acc"), f"{args}: {name} accuracy")
        else:
            assert not [r for r in rows if r["algorithm"] == name]


def test_participation(tmp_path):
    check_preset(tmp_path, "compare --preset mixture-classification --algorithms fedavg,ifca "
                 "--participation 0.1")


@slow
def test_preset_mixture(tmp_path):
    check_preset(tmp_path, "compare --preset mixture-classification")


@slow
def test_preset_rotated_digits(tmp_path):
    check_preset(tmp_path, "compare --preset rotated-digits")


def test_reproduce_list():
    """The reproduction command the README names lists the tables of fedclust_jax/studies/."""
    assert "`--list` names the tables" in " ".join(README.split())
    proc = subprocess.run([sys.executable, "-m", "fedclust_jax.reproduce", "--list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tables = proc.stdout.split()
    assert tables and all(re.fullmatch(r"[a-z0-9]+-[a-z0-9_-]+", t) for t in tables), tables
    for table in tables:
        paper, name = table.split("-", 1)
        assert (ROOT / "fedclust_jax" / "studies" / paper / f"{name}.toml").exists(), table


def test_accelerator_extras():
    """The install section's accelerator extras exist and pull JAX's own extras."""
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in re.findall(r'"\.\[(cuda\d+|tpu)\]"', README):
        assert any(re.match(rf"jax\[{extra}\]", d) for d in extras.get(extra, [])), (
            f"pyproject.toml has no [{extra}] extra pulling jax[{extra}]")
