"""One accelerator run: GPU tests, timings and the GPU-sized tables, under one time budget.

    python benchmarks/device_suite.py --prepare-data --data-dir .data     # once, here
    python benchmarks/device_suite.py --data-dir .data --out $OUT/suite    # on one H100 / H200
    python benchmarks/device_suite.py --dry-run --data-dir .data --out /tmp/suite  # CPU, toy

Parts, in the order of ``queue`` (each a subprocess with what is left of ``--budget``,
capped per part): first the cheapest table of ``SHORT`` still owed a full run, so that one
lent window (15 minutes, the default budget 450 s) ends at least one table; then

  tests        the precision, IFCA, SR-FCA, robust and streaming tests on the device's
               backend with full float32 matmuls
  memory       ``memory_estimate.py``: the memory pre-check's estimate against the compiled
               plan of IFCA Table 1's call program at 1, 2 and 5 points (compiled, not run)
  roofline     ``roofline.py`` in float32 and bfloat16: FLOPs, bytes, seconds and fraction
               of the probed GEMM / copy peak of every hot program
  sweep, scale ``sweep_speed.py``, ``scale.py``
  peers-scale  ``peers.py --workloads fedavg-mnist`` for ours and FedJAX at m = 1,000, 10,000
               and 100,000 clients (``--quick`` in a dry run); FedJAX runs when the device's
               Python imports it (carry its wheels: ``fedjax==0.0.17``, ``dm-haiku==0.0.17``,
               ``jmp``; the FedJAX child supplies ``jax.tree_map`` on a newer JAX), else ours
               alone (``peers_scale.md`` names the frameworks that ran)
  <table id>   every other study file (``TABLES``: the rest of ``SHORT``, then ``FIRST``, the
               long tables still owed a full run, then the rest of ``reproduce.table_ids()``)
               through ``python -m fedclust_jax.reproduce <id> --data-dir D --out
               <out>/<paper>`` (``--quick`` in a dry run); copy its ``<paper>/<name>.md``
               and ``.json`` into ``benchmarks/results/<paper>/``

Sessions are short, so the work spans runs: ``--done`` (default ``benchmarks/results`` on a
full-size run) skips a table whose ``<paper>/<name>.json`` there is a full run, a part an
earlier ``summary.json`` there records "ok". Every table runs with ``--checkpoint
<out>/checkpoints/<part>`` (``--checkpoint-every``: 60 s, one round in a dry run): its
ended points and the state of the points in flight are saved as it goes, so a table cut
by the time resumes at its last saved round on the next run. ``--resume-from ARCHIVE``
(an earlier ``--archive``, carried to the device in the checkout) unpacks it into
``--out`` first: the parts it records "ok" are kept, and its checkpoints resume.
Every part writes ``<out>/<part>.txt`` (its command and output); ``summary.md`` / ``.json``
list each part's status, reason and seconds. ``--archive FILE`` packs ``--out`` after every
part, checkpoint state files only while the archive stays within the 16 MiB a file sent back
from the device may hold (ended points always; a state file left out is named in
``summary.md``). The data travel
in the checkout (``.data/``, git-ignored; ``--prepare-data`` copies MNIST and the LEAF sets
from ``--source``, at most 64 MiB).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]   # runs from a bare checkout (no install)
from _common import output_file  # noqa: E402
from fedclust_jax.reproduce import table_ids  # noqa: E402
FIRST = ("ifca-table1", "ifca-figure3b", "ifca-figure3c", "ifca-figure3d", "ifca-table2",
         "ifca-table2code", "srfca-table4", "ifca-figure3a")
# Owed tables expected to end within one window's budget on one H100 / H200, cheapest first
# (not yet timed on a device: from their CPU runs, SR-FCA's MNIST tables 1,000-1,300 s on
# 2 cores; UIFCA Table 4.1, committed from the CPU, 13,540 s of runs on one core a part;
# their programs are small MLP / flow rounds).
SHORT = ("srfca-table3", "srfca-table2", "uifca-table41")
TABLES = SHORT + FIRST + tuple(t for t in table_ids() if t not in FIRST + SHORT)
DEVICE_PARTS = ("tests", "memory", "roofline", "roofline-bf16", "sweep", "scale", "peers-scale")
PARTS = DEVICE_PARTS + TABLES
CAPS = {"tests": 100, "memory": 60, "roofline": 90, "roofline-bf16": 60, "sweep": 120,
        "scale": 180, "peers-scale": 300}   # seconds; tables: the rest
PEERS_SCALE_CLIENTS = ("1000", "10000", "100000")
TESTS = ["tests/core/test_precision.py", "tests/algorithms/test_ifca.py",
         "tests/algorithms/test_srfca.py", "tests/core/test_robust.py", "tests/core/test_streaming.py"]
DRY_TESTS = ["tests/core/test_robust.py::test_validation"]
SWEEP_LRS = [round(0.01 * 1.25 ** i, 4) for i in range(16)]   # 16 step sizes x 4 seeds
DATA_PARTS = ("mnist", "femnist-leaf", "shakespeare-leaf/train", "shakespeare-leaf/test")
CARRY_LIMIT = 64 * 2 ** 20                       # what a device run carries in
ARCHIVE_LIMIT = 16 * 2 ** 20                     # one file a device run sends back
CHECKPOINTS = "checkpoints"                      # <out>/checkpoints/<table id>/
CADENCE, DRY_CADENCE = "60s", "1r"


def env(**extra) -> dict:
    """This checkout importable; JAX free to pick the accelerator (tests/conftest.py defaults
    an unset JAX_PLATFORMS to cpu); processes share the GPU's memory."""
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                XLA_PYTHON_CLIENT_PREALLOCATE="false",
                JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", ""), **extra)


def run(cmd: list[str], budget: float, log: Path, **extra) -> dict:
    """``cmd`` in the repository root with a timeout; command and output go to ``log``."""
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget,
                             env=env(**extra))
        out, rc = res.stdout + res.stderr, res.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = "".join(x.decode() if isinstance(x, bytes) else (x or "")
                          for x in (e.stdout, e.stderr)), None
    log.write_text(" ".join(shlex.quote(c) for c in cmd) + "\n\n" + out)
    tail = ([l for l in out.splitlines() if l.strip()] or [""])[-1]
    if rc is None:
        return dict(status="partial", reason=f"timed out after {budget:.0f} s")
    return dict(status="ok" if rc == 0 else "failed", reason=f"exit {rc}: {' '.join(tail.split())[:200]}")


class Done:
    """What earlier runs (``--done`` folders) finished."""

    def __init__(self, folders: list[Path]):
        self.tables, self.parts = set(), set()
        for folder in folders:
            for f in folder.glob("*/*.json"):
                try:
                    rec = json.loads(f.read_text())
                except (OSError, ValueError):
                    continue
                if isinstance(rec, dict) and rec.get("table") and not rec.get("quick", True):
                    self.tables.add(rec["table"])
            for f in folder.rglob("summary.json"):
                self.parts |= {p["part"] for p in json.loads(f.read_text()).get("parts", [])
                               if p.get("status") == "ok"}


def part_command(part: str, a, out: Path, done: Done, budget: float):
    """(command, extra environment) of ``part``, or a skip reason (str)."""
    py, dry, data = sys.executable, a.dry_run, a.data_dir
    if part == "tests":
        ids = DRY_TESTS if dry else TESTS
        workers = [] if dry else ["-n", "4", "--dist", "worksteal"]   # the device's 16 cores compile
        return [py, "-m", "pytest", "-x", "-o", "addopts=-q", "-p", "no:cacheprovider", *workers, *ids], \
            dict(JAX_DEFAULT_MATMUL_PRECISION="highest")
    if part == "memory":
        size = ["--num-clients", "8", "--n", "20", "--points", "1", "2"] if dry else []
        return [py, "benchmarks/memory_estimate.py", *size, "--data-dir", data, "--out",
                str(out / "memory_estimate.md")], {}
    if part == "sweep":
        size = (["--lrs", "0.05", "0.1", "--seeds", "1", "--rounds", "2", "--clients", "8", "--n",
                 "10", "--dim", "5"] if dry else ["--lrs", *map(str, SWEEP_LRS), "--seeds", "4"])
        return [py, "benchmarks/sweep_speed.py", *size, "--separate", "1", "--output",
                str(out / "sweep_speed.md")], {}
    if part == "scale":
        size = ["--quick", "--max-clients", "1000", "--rounds", "1"] if dry else []
        return [py, "benchmarks/scale.py", *size, "--data-dir", data, "--markdown",
                str(out / "scale.md"), "--json", str(out / "scale.json")], {}
    if part == "peers-scale":
        fedjax = importlib.util.find_spec("fedjax") is not None
        size = (["--quick", "--clients", "4", "--rounds", "2"] if dry else
                ["--data-dir", data, "--clients", *PEERS_SCALE_CLIENTS, "--rounds", "4"])
        return [py, "benchmarks/peers.py", "--workloads", "fedavg-mnist", "--frameworks",
                "fedclust_jax", *(["fedjax"] if fedjax else []), *size, "--repeats", "1",
                "--fedjax-python", py, "--round-limit", "60", "--startup-limit", "120",
                "--json", str(out / "peers_scale.json"), "--out", str(out / "peers_scale.md"),
                "--plot", str(out / "peers_scale.png")], {}
    if part.startswith("roofline"):
        dtype = "bfloat16" if part.endswith("bf16") else "float32"
        return [py, "benchmarks/roofline.py", *(["--quick"] if dry else []), "--dtype", dtype,
                "--json", str(out / f"{part}.json"), "--out", str(out / f"{part}.md")], {}
    if part in TABLES:
        if part in done.tables:
            return f"{part}: a full run is in --done"
        return [py, "-m", "fedclust_jax.reproduce", part, "--data-dir", data, "--out",
                str(out / part.split("-")[0]), "--no-progress", *(["--quick"] if dry else []),
                "--checkpoint", str(out / CHECKPOINTS / part),
                "--checkpoint-every", DRY_CADENCE if dry else CADENCE], \
            dict(JAX_DEFAULT_MATMUL_PRECISION="highest")    # Figure 3's threshold needs float32
    raise ValueError(f"unknown part {part!r}")


def queue(done: "Done", selected) -> list[str]:
    """Every part, in the order they run: the first table of ``SHORT`` among ``selected``
    that ``done`` holds no full run of (one window ends it), then ``PARTS`` in their order
    (``DEVICE_PARTS``, then the tables)."""
    first = [t for t in SHORT if t in selected and t not in done.tables][:1]
    return first + [p for p in PARTS if p not in first]


def summary(out: Path, command: str, records: list[dict], archive: str | None) -> None:
    left = left_out(out)
    (out / "summary.json").write_text(json.dumps(dict(command=command, parts=records), indent=1))
    lines = [f"`{command}`", "", "| part | status | seconds | reason |", "|---|---|---|---|"]
    lines += [f"| {r['part']} | {r['status']} | {r['seconds']} | {r['reason']} |" for r in records]
    if archive and left:
        lines += ["", "Checkpoint state files left out of the archive (over the "
                  f"{ARCHIVE_LIMIT // 2**20} MiB a file sent back may hold; their tables' ended "
                  "points are in): "
                  + ", ".join(f"`{p.relative_to(out)}` ({p.stat().st_size / 2**20:.1f} MiB)"
                              for p in left)]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    if archive:                       # after every part, so a killed run keeps its parts
        tmp = Path(archive + ".tmp")
        skip = {str(p) for p in left}
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(out, arcname="device_suite",
                    filter=lambda info: None if str(out / Path(info.name).relative_to(
                        "device_suite")) in skip else info)
        tmp.replace(archive)


def left_out(out: Path) -> list[Path]:
    """Checkpoint state files (.npz under <out>/checkpoints) that would take the archive's
    files past ``ARCHIVE_LIMIT`` (uncompressed, so the packed archive is within it too): the
    largest are left out first."""
    files = [f for f in out.rglob("*") if f.is_file()]
    states = [f for f in files if f.suffix == ".npz" and CHECKPOINTS in f.relative_to(out).parts]
    total = sum(f.stat().st_size for f in files)
    left = []
    for f in sorted(states, key=lambda f: -f.stat().st_size):
        if total <= ARCHIVE_LIMIT:
            break
        left.append(f)
        total -= f.stat().st_size
    return left


def resume_from(archive: Path, out: Path) -> dict[str, dict]:
    """Unpacks an earlier ``--archive`` (its ``device_suite/`` folder) into ``out``; returns
    its parts' records by part. Files of this run that exist are not replaced."""
    try:
        tar = tarfile.open(archive, "r:gz")
    except (OSError, tarfile.TarError) as e:
        raise SystemExit(f"--resume-from {archive}: not a device-suite archive ({e})")
    with tar:
        for info in tar.getmembers():
            name = Path(info.name)
            if name.parts[:1] != ("device_suite",) or ".." in name.parts or name.is_absolute():
                continue
            target = out.joinpath(*name.parts[1:])
            if info.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif info.isfile() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    try:
        earlier = json.loads((out / "summary.json").read_text())["parts"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {r["part"]: r for r in earlier if isinstance(r, dict) and "part" in r}


def prepare_data(source: Path, dest: Path) -> int:
    """Copies the suite's data folders from ``source`` to ``dest``; returns the bytes copied."""
    missing = [p for p in DATA_PARTS if not (source / p).exists()]
    if missing:
        raise SystemExit(f"--prepare-data: {missing} not found under {source}; pass --source")
    total = sum(f.stat().st_size for p in DATA_PARTS for f in (source / p).rglob("*") if f.is_file())
    if total > CARRY_LIMIT:
        raise SystemExit(f"--prepare-data: {total / 2**20:.1f} MiB exceeds the 64 MiB a run carries")
    for p in DATA_PARTS:
        shutil.rmtree(dest / p, ignore_errors=True)
        shutil.copytree(source / p, dest / p)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="device_suite_out", help="folder for every result file")
    ap.add_argument("--data-dir", default=".data", help="folder with mnist/, femnist-leaf/, shakespeare-leaf/")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all parts together")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--archive", type=output_file, default=None, help="also pack --out into this .tar.gz after every part")
    ap.add_argument("--dry-run", action="store_true", help="every part at toy size (CPU)")
    ap.add_argument("--prepare-data", action="store_true", help="copy --source into --data-dir and stop")
    ap.add_argument("--source", default="../shared/data")
    ap.add_argument("--resume-from", type=Path, default=None, metavar="ARCHIVE",
                    help="an earlier --archive: unpacked into --out first; its \"ok\" parts are "
                         "kept and its tables' checkpoints resume")
    ap.add_argument("--done", nargs="+", default=None,
                    help="folders of earlier results (default benchmarks/results on a full run; "
                         "'none' runs everything)")
    a = ap.parse_args(argv)
    if a.prepare_data:
        total = prepare_data(Path(a.source), Path(a.data_dir))
        print(f"copied {total / 2**20:.1f} MiB of {', '.join(DATA_PARTS)} to {a.data_dir}")
        return 0
    folders = [] if a.done == ["none"] or (a.done is None and a.dry_run) else \
        [Path(d) for d in (a.done or [ROOT / "benchmarks" / "results"])]
    if missing := [str(d) for d in folders if not d.is_dir()]:
        ap.error(f"--done {' '.join(missing)}: no such folder")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/device_suite.py " + " ".join(
        shlex.quote(x) for x in (sys.argv[1:] if argv is None else argv))
    earlier = {}
    if a.resume_from is not None:
        if not a.resume_from.is_file():
            ap.error(f"--resume-from {a.resume_from}: no such file")
        earlier = resume_from(a.resume_from, out)
    done, records = Done(folders), []
    deadline = time.monotonic() + (min(a.budget, 240.0) if a.dry_run else a.budget)
    for part in queue(done, a.parts):
        t0, left = time.monotonic(), deadline - time.monotonic()
        budget = left if a.dry_run else min(CAPS.get(part, left), left)
        if part not in a.parts:
            rec = dict(status="skipped", reason="not in --parts")
        elif earlier.get(part, {}).get("status") == "ok" and part not in TABLES:
            rec = dict(earlier[part], reason="ok in the run of --resume-from: "
                       + earlier[part]["reason"].removeprefix("ok in the run of --resume-from: "))
            rec.pop("part", None)
            rec.pop("seconds", None)
        elif part in done.parts and part not in TABLES:
            rec = dict(status="skipped", reason="ok in an earlier run (--done)")
        elif budget < 5:
            rec = dict(status="skipped", reason=f"no time left ({budget:.0f} s)")
        else:
            cmd = part_command(part, a, out, done, budget)
            if isinstance(cmd, str):
                rec = dict(status="skipped", reason=cmd)
            else:
                print(f"== {part} (budget {budget:.0f} s)", flush=True)
                rec = run(cmd[0], budget, out / f"{part}.txt", **cmd[1])
        records.append(dict(part=part, **rec, seconds=round(time.monotonic() - t0, 1)))
        print(f"   {part}: {rec['status']} {rec['reason']}", flush=True)
        summary(out, command, records, a.archive)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
