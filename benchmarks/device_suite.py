"""One accelerator run: GPU tests, round timings, and the GPU-sized tables, under a time budget.

    python benchmarks/device_suite.py --prepare-data --data-dir .data   # once, here
    python benchmarks/device_suite.py --data-dir .data --out /tmp/suite \
        --archive $OUT/device_suite.tar.gz                                # on one H100 / H200
    python benchmarks/device_suite.py --dry-run --data-dir .data --out /tmp/suite  # CPU, toy

Parts, in this order, each with its own time budget (seconds, capped by what is left of
``--budget``; a part that runs out writes what it has and says so):

  tests         the precision, IFCA, SR-FCA, robust-aggregation and streaming tests on the
                device's backend, in up to 8 pytest processes at once, with full float32
                matmuls (``part_tests``); output in tests.txt
  ifca_round    one IFCA option-II round at N = 2400 (MLP 784-200-10, n = 100, tau = 10, K = 4)
                in float32 and bfloat16 (``models.base.with_dtype``: params and data in
                bf16, sums, losses and optimizer state float32)
  ifca_separation  ``benchmarks/ifca_separation.py`` at the authors' m = 2400, n = 100: how
                often IFCA separates the four rotations within 3 rounds, 20 seeds, Flax's and
                PyTorch's initialisation (a CPU run of this size takes hours)
  sweep         ``benchmarks/sweep_speed.py``: a 64-point sweep (16 step sizes x 4 seeds) as one
                ``fedclust-jax sweep`` against one ``fedclust-jax run`` (target: <= 3x)
  scale         ``benchmarks/scale.py`` full mode (IFCA rounds up to 100k / 1M clients)
  robust        ``benchmarks/robust_aggregators.py``: seconds per aggregator and sort method
  cross_loss    the [N, N] cross-loss matrix (N models on N clients' data) SR-FCA needs
  cnn_conv      seconds per IFCA Table 2 round (FEMNIST CNN, ``ifca_table2.py``, IFCA k = 2,
                75 rounds) with the native convolution and with im2col patches; the table
                parts below (and later runs, through ``--done``) use the faster one
  ifca_table1   IFCA Table 1, rotated MNIST: (m, n) in (2400, 100), (4800, 50), (1200, 200) x
                IFCA (K = 4), Global, Local x 5 seeds (one vmapped axis) x 300 rounds,
                tau = 10 full-batch steps at lr 0.1; the model initialisation is ``--init``
  ifca_figure3  ``benchmarks/ifca_figure3.py`` panels (b), (c), (d), then (a), at the paper's sizes (50
                trials, 10 initialisations, 300 rounds, the paper's step sizes), full float32
                matmuls; one JSONL line per point as it ends
  ifca_table2   ``benchmarks/ifca_table2.py --full`` (FEMNIST; skipped without femnist-leaf/)
  srfca_table4  ``benchmarks/srfca_table4.py --full`` (FEMNIST, Shakespeare; skipped without
                femnist-leaf/ and shakespeare-leaf/); both get ``--budget`` so a run cut by
                the suite's time still writes the rows it finished (status partial)
  ifca_table2_code  ``benchmarks/ifca_table2.py --protocol code --full``: Table 2 through the
                authors' code's pipeline (2000 FedAvg pre-training rounds of the whole CNN,
                then 4000 rounds of the heads alone), 5 seeds

Sessions on a device are short, so the work spans runs: ``benchmarks/device_results.py
--import`` keeps a run's archive under ``benchmarks/results/device/runs/``, and ``--done``
(default: that folder, on a full-size run; also earlier ``--out`` folders) skips the parts a
run finished ("ok"; ``tests``: ran to the end at the same code), the IFCA Table 1 rows and Table 2 / Table 4
methods it ran at full schedule and the Figure 3 points it (or a committed CPU run, in
``results/ifca/figure3.jsonl``) ran at the paper's sizes. The same
command thus continues where the last session stopped; ``benchmarks/README.md`` gives the two
calls of a session. A table row cut by the budget (IFCA Table 1, Table 2, Table 4) saves its
states under ``--checkpoints`` (default ``.suite/checkpoints``, which a warm machine keeps
between a session's calls; the files are not archived), and the session's second call
resumes it from the round it reached instead of from round 0; the code protocol's finished
pre-training (``ifca_table2_code``) is kept there too, so the second call's methods start
from it instead of pre-training again.

Every part writes ``<out>/<part>.json`` (and ``.md`` or ``.txt`` where it has a table or a
log); ``<out>/summary.json`` and ``summary.md`` list every part's status (ok, partial,
skipped, failed), reason and seconds, and the device. Scripts called by the suite take
``--full`` (device schedule) or ``--dry-run`` (toy size), and ``--out FILE``.

``--dry-run`` runs every part at toy size on the CPU (a few minutes). The data are read from
``--data-dir`` (mnist/ IDX files; femnist-leaf/ and shakespeare-leaf/ LEAF JSON): a device
run carries it inside the checkout (``.data/``, git-ignored; ``--prepare-data`` copies it
from ``--source``, checking it stays under the 64 MiB a run can carry).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # subprocesses share the GPU
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import (checkpoint_path, chunked_rounds, code_fingerprint, output_file,  # noqa: E402
                     read_jsonl)
from provenance import generated_by  # noqa: E402
import device_results  # noqa: E402

PARTS = ("tests", "ifca_round", "ifca_separation", "sweep", "scale", "robust", "cross_loss", "cnn_conv",
         "ifca_table1", "ifca_figure3", "ifca_table2", "srfca_table4", "ifca_table2_code")
BUDGETS = {"tests": 100, "ifca_round": 45, "ifca_separation": 90, "sweep": 120, "scale": 180, "robust": 45,
           "cross_loss": 20, "cnn_conv": 120, "ifca_table1": 10_000, "ifca_figure3": 10_000,
           "ifca_table2": 10_000, "srfca_table4": 10_000, "ifca_table2_code": 10_000}
FIGURE3_PANELS = ("b", "c", "d", "a")   # (a) last: the CPU ran it with gamma = 0.1 alone, a
                                         # cut that panel (c)'s m = 200, n = 50 point questions
SWEEP_LRS = [round(0.01 * 1.25 ** i, 4) for i in range(16)]   # 16 step sizes x 4 seeds
TESTS = ["tests/core/test_precision.py", "tests/algorithms/test_ifca.py", "tests/algorithms/test_srfca.py",
         "tests/core/test_robust.py", "tests/core/test_streaming.py"]
DRY_TESTS = ["tests/core/test_robust.py::test_validation"]
TEST_PROCESSES = 8   # pytest processes at once: compilation, most of a test's time, is per process
DATA_PARTS = ("mnist", "femnist-leaf", "shakespeare-leaf/train", "shakespeare-leaf/test")
CARRY_LIMIT = 64 * 2 ** 20
TABLE1 = ((2400, 100), (4800, 50), (1200, 200))
PAPER_TABLE1 = {  # IFCA paper Table 1, rotated MNIST, test accuracy %: IFCA, global, local
    (4800, 50): (94.20, 86.74, 63.32), (2400, 100): (95.05, 88.65, 73.66),
    (1200, 200): (95.25, 89.73, 80.05)}


class Suite:
    """Runs parts in order under one deadline and records each part's outcome."""

    def __init__(self, args, command: str):
        self.args, self.command = args, command
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.budget
        self.records: list[dict] = []
        self.done = (device_results.done(args.done) if args.done else
                     dict(parts={}, tests={}, table1=set(), ifca_table2=set(), srfca_table4=set(),
                          ifca_table2_code=set(),
                          ifca_figure3=[], cnn_conv=None))

    def conv(self) -> str | None:
        """The CNN convolution the table parts use: the faster one that this run's cnn_conv
        part measured, else an earlier run's (``--done``), else None (the scripts' auto)."""
        ran = [r.get("faster") for r in self.records if r["part"] == "cnn_conv"]
        return ran[-1] if ran and ran[-1] else self.done.get("cnn_conv")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def budget(self, part: str) -> float:
        return self.left() if self.args.dry_run else min(BUDGETS[part], self.left())

    def write_json(self, name: str, obj) -> None:
        (self.out / f"{name}.json").write_text(json.dumps(obj, indent=1, default=str))

    def run(self, part: str, fn) -> None:
        budget = self.budget(part)
        t0 = time.monotonic()
        if part not in self.args.parts:
            rec = dict(status="skipped", reason="not in --parts")
        elif part in self.done["parts"]:
            rec = dict(status="skipped", reason=f"done in run {self.done['parts'][part]} "
                       "(--done none reruns it)")
        elif budget < 5:
            rec = dict(status="skipped", reason=f"no time left ({budget:.0f} s of --budget)")
        else:
            print(f"== {part} (budget {budget:.0f} s)", flush=True)
            try:
                rec = fn(budget) or {}
            except Exception as e:  # a failed part must not stop the others
                rec = dict(status="failed", reason=f"{type(e).__name__}: {e}")
        rec = dict(part=part, status=rec.pop("status", "ok"), reason=rec.pop("reason", ""),
                   seconds=round(time.monotonic() - t0, 1), **rec)
        self.records.append(rec)
        print(f"   {rec['status']} {rec['seconds']} s {rec['reason']}", flush=True)
        self.summary()

    def summary(self) -> None:
        dev = jax.devices()[0]
        info = dict(command=self.command, device=f"{dev.platform}: {dev.device_kind}",
                    jax=jax.__version__, host=platform.machine(), cpus=os.cpu_count(),
                    dry_run=self.args.dry_run, load=load(), parts=self.records)
        self.write_json("summary", info)
        lines = [self.command, "", "# Device suite", "",
                 f"Device {info['device']}, jax {info['jax']}, {info['cpus']} CPUs; "
                 f"{'dry run (toy sizes)' if self.args.dry_run else 'full sizes'}; {info['load']}.",
                 "", "| part | status | seconds | reason |", "|---|---|---|---|"]
        lines += [f"| {r['part']} | {r['status']} | {r['seconds']} | {r['reason']} |"
                  for r in self.records]
        (self.out / "summary.md").write_text("\n".join(lines) + "\n")
        if self.args.archive:               # after every part, so a killed run keeps its parts
            import tarfile
            tmp = Path(str(self.args.archive) + ".tmp")
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(self.out, arcname="device_suite")
            tmp.replace(self.args.archive)


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unavailable"


def block(tree):
    return jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a,
                        tree)


def child_env() -> dict:
    """The environment of the suite's subprocesses: this checkout importable, and JAX free to
    pick the accelerator (tests/conftest.py defaults JAX_PLATFORMS to cpu only when unset)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if jax.default_backend() != "cpu":
        env["JAX_PLATFORMS"] = ""
    return env


def subprocess_part(suite: Suite, name: str, cmd: list[str], budget: float, log: str,
                    env_extra: dict | None = None) -> dict:
    """Runs ``cmd`` in the repository root with a timeout; its output goes to ``log``."""
    env = dict(child_env(), **(env_extra or {}))
    try:
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget, env=env)
        out, rc = res.stdout + res.stderr, res.returncode
        status = "ok" if rc == 0 else "failed"
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, status = None, "partial"
    (suite.out / log).write_text(" ".join(shlex.quote(c) for c in cmd) + "\n\n" + out)
    tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or [""]
    reason = f"timed out after {budget:.0f} s" if rc is None else f"exit {rc}: {' '.join(tail[0].split())[:200]}"
    return dict(status=status, reason=reason, command=cmd, log=log)


# ------------------------------------------------------------------------------ parts

def test_counts(text: str) -> dict:
    """{"passed": n, "failed": n, ...} summed over pytest summary lines in ``text``."""
    counts: dict = {}
    for line in text.splitlines():
        if re.match(r"^=*\s*\d+ (passed|failed|error|errors|skipped)\b.* in [\d.]+s", line):
            for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", line):
                counts[word] = counts.get(word, 0) + int(n)
    return counts


def part_tests(suite: Suite, budget: float) -> dict:
    """The GPU-relevant tests, their node ids dealt round-robin to up to ``TEST_PROCESSES``
    pytest processes (``-x`` each) that run at once under one deadline.

    Full float32 matmuls (``JAX_DEFAULT_MATMUL_PRECISION=highest``): the tests compare two
    routes through a model, such as batched and per-client losses, and the model's own
    matmuls keep the backend's default, TF32 on GPUs, whose rounding differs between the
    routes (1.7e-4 relative in run 2026-11-28-h200-c). ``test_precision.py`` sets its own,
    lowest, default, so the library's explicit ``Precision.HIGHEST`` contractions are still
    checked. Skipped when an earlier run (``--done``) finished the part at the same
    ``code_fingerprint``."""
    code = code_fingerprint(("fedclust_jax", "tests"))
    if code in suite.done["tests"]:
        return dict(status="skipped", reason=f"ran at this code in run {suite.done['tests'][code]} "
                    "(--done none reruns it)", code=code)
    deadline = time.monotonic() + budget
    if suite.args.dry_run:
        ids = DRY_TESTS
    else:
        listing = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-o",
                                  "addopts=", "-p", "no:cacheprovider", *TESTS], cwd=ROOT,
                                 capture_output=True, text=True, timeout=budget, env=child_env())
        ids = [line for line in listing.stdout.splitlines() if "::" in line]
        if listing.returncode != 0 or not ids:
            return dict(status="failed", reason=f"collection: exit {listing.returncode}",
                        output=listing.stdout[-2000:] + listing.stderr[-2000:])
    groups = [ids[i::TEST_PROCESSES] for i in range(min(TEST_PROCESSES, len(ids)))]
    env = dict(child_env(), JAX_DEFAULT_MATMUL_PRECISION="highest")
    # "-o addopts=-q": without the project's "-n 2" (pytest-xdist may be missing)
    cmds = [[sys.executable, "-m", "pytest", "-x", "-o", "addopts=-q", "-p", "no:cacheprovider",
             *g] for g in groups]
    logs = [suite.out / f"tests_{i}.log" for i in range(len(cmds))]
    procs = []
    for cmd, log in zip(cmds, logs):
        with open(log, "w") as fh:
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                          env=env))
    rcs = []                                 # None: killed at the deadline
    for proc in procs:
        try:
            rcs.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rcs.append(None)
    parts = [f"{' '.join(shlex.quote(c) for c in cmd)}\n\n{log.read_text()}"
             for cmd, log in zip(cmds, logs)]
    for log in logs:
        log.unlink()
    out = "\n".join(parts)
    (suite.out / "tests.txt").write_text(f"{len(ids)} tests in {len(cmds)} processes, "
                                         "JAX_DEFAULT_MATMUL_PRECISION=highest\n\n" + out)
    counts = test_counts(out)
    timed_out = rcs.count(None)
    status = ("partial" if timed_out else "failed" if any(rcs) else "ok")
    probe = ("import os; os.environ.setdefault('JAX_PLATFORMS', 'cpu'); import jax; "
             "print(jax.default_backend())")           # what tests/conftest.py leaves JAX
    try:
        backend = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                 timeout=60, env=child_env()).stdout.strip()
    except subprocess.TimeoutExpired:
        backend = "unknown (probe timed out)"
    reason = (f"backend {backend}; {len(ids)} tests in {len(cmds)} processes: "
              + ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))
              + (f"; {timed_out} processes timed out after {budget:.0f} s" if timed_out else ""))
    rec = dict(status=status, reason=reason, backend=backend, code=code, counts=counts,
               log="tests.txt")
    suite.write_json("tests", rec)
    return rec


def ifca_round_seconds(n_clients: int, n: int, dtype: str, repeats: int, chunk=None) -> float:
    """Median seconds of one IFCA option-II round (after a compile round) on random data."""
    from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.data.federated import FederatedData
    from fedclust_jax.models.mlp import mlp
    from fedclust_jax.models.base import with_dtype
    model = with_dtype(mlp((784, 200, 10)), dtype)  # params and data stored in dtype; sums,
    local = LocalTraining(steps=10, lr=0.1)         # losses and optimizer state float32
    alg = IFCA(model, IFCAConfig(num_clusters=4, option="model", local=local, chunk=chunk))
    kx, ky = jax.random.split(jax.random.key(0))
    x = jax.random.uniform(kx, (n_clients, n, 784), jnp.dtype(dtype))
    y = jax.random.randint(ky, (n_clients, n), 0, 10)
    count = jnp.full((n_clients,), n, jnp.int32)
    data = FederatedData(x=x, y=y, count=count, x_test=x[:, :1], y_test=y[:, :1],
                         count_test=jnp.ones_like(count), cluster=jnp.zeros_like(count),
                         num_classes=10)
    state = alg.init(jax.random.key(1), data)
    step = jax.jit(alg.round)
    state, _ = block(step(state, jax.random.key(2), data))
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        state, _ = block(step(state, jax.random.key(3 + r), data))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def part_ifca_round(suite: Suite, budget: float) -> dict:
    n_clients, n, repeats = (16, 20, 1) if suite.args.dry_run else (2400, 100, 5)
    flops = n_clients * n * 2 * (784 * 200 + 200 * 10) * (4 + 3 * 10)
    rows, reasons = [], []
    for dtype in ("float32", "bfloat16"):
        try:
            s = ifca_round_seconds(n_clients, n, dtype, repeats)
        except Exception as e:  # keep the float32 row when the bfloat16 path breaks
            rows.append(dict(dtype=dtype, status="failed", reason=f"{type(e).__name__}: {e}"[:300]))
            reasons.append(f"{dtype} failed: {rows[-1]['reason']}")
            continue
        rows.append(dict(dtype=dtype, clients=n_clients, seconds=s, tflops=flops / s / 1e12))
    suite.write_json("ifca_round", rows)
    md = [suite.command, "", f"IFCA round, N = {n_clients}, n = {n}, tau = 10, K = 4, MLP "
          f"784-200-10; median of {repeats} rounds after a compile round; {load()}.", "",
          "| dtype | s / round | TFLOP/s |", "|---|---|---|"]
    md += [f"| {r['dtype']} | {r.get('seconds', float('nan')):.4f} | {r.get('tflops', float('nan')):.1f} |"
           if "seconds" in r else f"| {r['dtype']} | skipped: {r['reason']} | |" for r in rows]
    (suite.out / "ifca_round.md").write_text("\n".join(md) + "\n")
    return dict(reason="; ".join(reasons), rows=rows)


def part_ifca_separation(suite: Suite, budget: float) -> dict:
    size = (["--clients", "16", "--n", "10", "--seeds", "2", "--rounds", "1", "--seed-batch", "2"]
            if suite.args.dry_run else
            ["--clients", "2400", "--n", "100", "--seeds", "20", "--rounds", "3", "--seed-batch", "4"])
    return subprocess_part(suite, "ifca_separation", [
        sys.executable, "benchmarks/ifca_separation.py", *size, "--inits", "flax", "torch",
        "--data-dir", suite.args.data_dir, "--out", str(suite.out / "ifca_separation.md")],
        budget, "ifca_separation.txt")


def part_sweep(suite: Suite, budget: float) -> dict:
    """Issue target: a 64-point sweep (16 step sizes x 4 seeds, one `fedclust-jax sweep`)
    against one `fedclust-jax run`, both as subprocesses, compilation included."""
    size = (["--lrs", "0.05", "0.1", "--seeds", "1", "--rounds", "2", "--clients", "8", "--n", "10",
             "--dim", "5"] if suite.args.dry_run else ["--lrs", *map(str, SWEEP_LRS), "--seeds", "4"])
    report = suite.out / "sweep_speed.md"
    rec = subprocess_part(suite, "sweep", [
        sys.executable, "benchmarks/sweep_speed.py", *size, "--separate", "1",
        "--output", str(report)], budget, "sweep_speed.txt")
    verdict = [l for l in (report.read_text().splitlines() if report.exists() else [])
               if l.startswith("sweep of")]
    if rec["status"] == "ok" and verdict:
        rec["reason"] = verdict[0].split(" Largest")[0]
    return rec


def part_ifca_figure3(suite: Suite, budget: float) -> dict:
    """IFCA Figure 3 panels (b)-(d), then (a), at the paper's sizes (50 trials, 10 initialisations, 300
    rounds, the paper's step sizes), points an imported run or the committed CPU runs
    (``device_results.FIGURE3_CPU``) finished at those sizes skipped; each point is
    appended to ``ifca_figure3.jsonl`` as it ends. Matmuls in full float32
    (JAX_DEFAULT_MATMUL_PRECISION=highest): success needs dist <= 0.6 sigma + 0.001."""
    import ifca_figure3 as f3
    done = device_results.figure3_done(suite.done["ifca_figure3"]
                                       + read_jsonl(device_results.FIGURE3_CPU))
    size = (["--trials", "2", "--inits", "2", "--rounds", "2", "--record", "1", "--trial-batch", "2"]
            if suite.args.dry_run else ["--trials", "50", "--trial-batch", "10"])
    # batches of 10 trials: panel (b) with 50 a batch asked for 32 GB on the CPU (0.64 GB a
    # trial), and panel (d)'s largest point (m = 800, n = 200) has 4x the data a trial
    deadline, recs = time.monotonic() + budget, []
    for panel in FIGURE3_PANELS[:1] if suite.args.dry_run else FIGURE3_PANELS:
        left = [i for i, p in enumerate(f3.PANELS[panel]["points"])
                if (panel, p["m"], p["n"], p["R"], p["sigma"]) not in done]
        if suite.args.dry_run:
            left = left[:1]
        if not left:
            continue
        if deadline - time.monotonic() < 5:
            recs.append(dict(status="partial", reason=f"no time left for panel {panel}"))
            break
        recs.append(subprocess_part(
            suite, "ifca_figure3", [sys.executable, "benchmarks/ifca_figure3.py", "--panel", panel,
                                    "--points", *map(str, left), *size,
                                    "--out", str(suite.out / "ifca_figure3.jsonl")],
            deadline - time.monotonic(), f"ifca_figure3_{panel}.txt",
            {"JAX_DEFAULT_MATMUL_PRECISION": "highest"}))
        if recs[-1]["status"] != "ok":
            break
    if not recs:
        return dict(status="skipped", reason="every point done in an earlier run (--done)")
    bad = [r for r in recs if r["status"] != "ok"]
    return dict(status=bad[0]["status"] if bad else "ok",
                reason="; ".join(r["reason"] for r in recs)[:300])


def part_scale(suite: Suite, budget: float) -> dict:
    script = ROOT / "benchmarks" / "scale.py"
    if not script.exists():
        return dict(status="skipped", reason="benchmarks/scale.py does not exist at this commit")
    # full mode: softmax and MLP on MNIST views up to 100k clients, the linear model to 1M;
    # dry run: the quick set's smallest configuration (softmax, 1k clients, one timed round)
    size = (["--quick", "--max-clients", "1000", "--rounds", "1"] if suite.args.dry_run else [])
    return subprocess_part(suite, "scale", [
        sys.executable, str(script), *size, "--data-dir", suite.args.data_dir,
        "--markdown", str(suite.out / "scale.md"), "--json", str(suite.out / "scale.json")],
        budget, "scale.txt")


def part_robust(suite: Suite, budget: float) -> dict:
    size = (["--clients", "40", "--dim", "200", "--repeats", "1"] if suite.args.dry_run
            else ["--repeats", "2"])
    return subprocess_part(suite, "robust", [sys.executable, "benchmarks/robust_aggregators.py",
                                             *size, "--out", str(suite.out / "robust.md")],
                           budget, "robust.txt")


def part_cross_loss(suite: Suite, budget: float) -> dict:
    from fedclust_jax.core.losses import loss_matrix
    from fedclust_jax.models.mlp import mlp
    model = mlp((784, 200, 10))
    rows = []
    for n_clients in ((8,) if suite.args.dry_run else (100, 1000)):
        params = jax.vmap(model.init)(jax.random.split(jax.random.key(0), n_clients))
        x = jax.random.uniform(jax.random.key(1), (n_clients, 100, 784))
        y = jax.random.randint(jax.random.key(2), (n_clients, 100), 0, 10)
        count = jnp.full((n_clients,), 100, jnp.int32)
        fn = jax.jit(lambda p, x, y, c: loss_matrix(model, p, x, y, c)[0])
        block(fn(params, x, y, count))
        t0 = time.perf_counter()
        block(fn(params, x, y, count))
        s = time.perf_counter() - t0
        rows.append(dict(clients=n_clients, seconds=s,
                         tflops=n_clients ** 2 * 100 * 2 * (784 * 200 + 200 * 10) / s / 1e12))
    suite.write_json("cross_loss", rows)
    return dict(rows=rows)


CONV_ROUNDS = 75   # three scan chunks of 25: the first compiles, the other two are timed


def part_cnn_conv(suite: Suite, budget: float) -> dict:
    """The IFCA Table 2 round (FEMNIST CNN, IFCA k = 2, 5 seeds) with each convolution:
    ``ifca_table2.py --full --rounds 75 --conv C``, seconds per round after the compiling
    chunk. The dry run times the toy MLP (no convolution): it checks the plumbing only."""
    if not (Path(suite.args.data_dir) / "femnist-leaf").is_dir():
        return dict(status="skipped", reason=f"femnist-leaf not under --data-dir "
                    f"{suite.args.data_dir} (--prepare-data copies it)")
    size = (["--dry-run", "--rounds", "4", "--per-chunk", "2"] if suite.args.dry_run else
            ["--full", "--rounds", str(CONV_ROUNDS), "--per-chunk", "25"])
    convs = ("native", "patches")
    deadline, per_round, notes, errors = time.monotonic() + budget, {}, [], []
    for i, conv in enumerate(convs):
        out = suite.out / f"cnn_conv_{conv}.md"
        # the first gets half the time: a convolution that needs more is the slower one
        left = (deadline - time.monotonic()) / (len(convs) - i)
        rec = subprocess_part(suite, "cnn_conv", [
            sys.executable, "benchmarks/ifca_table2.py", *size, "--methods", "IFCA k=2",
            "--conv", conv, "--data-dir", suite.args.data_dir, "--out", str(out)],
            left, f"cnn_conv_{conv}.txt")
        table = out.with_suffix(".json")
        rows = json.loads(table.read_text())["rows"] if table.exists() else []
        if rows and (rows[0].get("timing") or {}).get("s_per_round"):
            per_round[conv] = rows[0]["timing"]["s_per_round"]
        else:
            notes.append(f"{conv}: {rec['reason']}"[:150])
            if rec["status"] != "partial":
                errors.append(conv)
    # one that did not finish in its time (partial) is the slower; an error leaves the part
    # failed, so the next run measures again
    faster = min(per_round, key=per_round.get) if per_round else None
    suite.write_json("cnn_conv", dict(s_per_round=per_round, faster=faster, notes=notes))
    timed = ", ".join(f"{c} {s:.4f} s" for c, s in per_round.items()) or "none timed"
    what = "toy MLP (dry run)" if suite.args.dry_run else "FEMNIST CNN"
    return dict(status="failed" if errors or faster is None else "ok", faster=faster,
                s_per_round=per_round,
                reason=f"IFCA k=2 {what} round: {timed}"
                       + (f"; table parts use {faster}" if faster else "")
                       + "".join(f"; {n}" for n in notes))


def table1_methods(model, m: int, rounds_dry: bool):
    from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
    from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
    from fedclust_jax.algorithms.local import Local, LocalConfig
    from fedclust_jax.core.train import LocalTraining
    local = LocalTraining(steps=10, lr=0.1)
    return {"IFCA": IFCA(model, IFCAConfig(num_clusters=4, option="model", local=local)),
            "global": FedAvg(model, FedAvgConfig(local=local)),
            "local": Local(model, LocalConfig(local=local))}


def part_ifca_table1(suite: Suite, budget: float) -> dict:
    """IFCA Table 1 (rotated MNIST); one line of results per (setting, method) as it ends."""
    from fedclust_jax import metrics
    from fedclust_jax.data.recipes import ifca_rotated_mnist
    from fedclust_jax.models.mlp import mlp
    a = suite.args
    settings = ((16, 10),) if a.dry_run else TABLE1
    seeds, rounds, per_chunk = (2, 2, 2) if a.dry_run else (5, 300, 25)
    model = mlp((784, 200, 10), init=a.init)
    deadline = time.monotonic() + budget
    rows, status = [], "ok"
    md = [suite.command, "", "# IFCA Table 1, rotated MNIST: test accuracy %", "",
          f"K = 4 rotations, MLP 784-200-10 ({a.init} initialisation), tau = 10 full-batch steps "
          f"at lr 0.1, full participation, {seeds} seeds (init and round keys; one vmapped axis; "
          f"one data set per setting, data seed 0), up to {rounds} rounds. IFCA's test "
          "accuracy scores each test client with the model of lowest loss on its own test "
          "data (the authors' code); misclustering of the training assignment after the last "
          "round. Device: " + f"{jax.devices()[0].device_kind}; {load()}.", "",
          "| m | n | method | rounds | test acc % (mean ± std) | paper | misclustering | seconds |",
          "|---|---|---|---|---|---|---|---|"]
    for m, n in settings:
        if time.monotonic() > deadline - 5:
            status = "partial"
            break
        data = ifca_rotated_mnist(jax.random.key(0), num_clients=m, n=n, data_dir=a.data_dir)
        for name, alg in table1_methods(model, m, a.dry_run).items():
            if (m, n, name) in suite.done["table1"]:
                md.append(f"| {m} | {n} | {name} | done in an earlier run (--done) | | | | |")
                continue
            if time.monotonic() > deadline - 5:
                status = "partial"
                break
            t0 = time.monotonic()
            keys = jax.random.split(jax.random.key(1), seeds)
            states = jax.jit(jax.vmap(alg.init, in_axes=(0, None)))(keys, data)

            def chunk(states, ts, data, alg=alg):
                def one(state, key):
                    return jax.lax.scan(lambda s, t: (alg.round(s, jax.random.fold_in(key, t), data)[0],
                                                      None), state, ts)[0]
                return jax.vmap(one)(states, keys)

            timing = {}
            states, done = chunked_rounds(
                jax.jit(chunk), states, rounds, deadline - 5, per_chunk, data, log=False,
                timing=timing, checkpoint=checkpoint_path(a.checkpoints, "ifca_table1", m, n, name,
                                                          seeds, rounds, a.init, str(a.data_dir)))
            if done < rounds:
                status = "partial"
            ev = jax.jit(jax.vmap(lambda st, d, alg=alg: {k: v for k, v in alg.evaluate(st, d).items()
                                                          if k in ("test_acc", "assign")},
                                  in_axes=(0, None)))(states, data)
            acc = [100 * metrics.client_mean(np.asarray(ev["test_acc"][s]), data.count_test)
                   for s in range(seeds)]
            mis = ([metrics.misclustering(np.asarray(ev["assign"][s]), data.cluster)
                    for s in range(seeds)] if name == "IFCA" else None)
            paper = PAPER_TABLE1.get((m, n), (None,) * 3)[list(table1_methods(model, m, a.dry_run)).index(name)]
            row = dict(m=m, n=n, method=name, rounds=done, acc_mean=float(np.mean(acc)),
                       acc_std=float(np.std(acc)), acc=acc, paper=paper, misclustering=mis,
                       seconds=round(time.monotonic() - t0, 1),
                       resumed_from=timing.get("resumed_from", 0))
            rows.append(row)
            md.append(f"| {m} | {n} | {name} | {done} | {row['acc_mean']:.2f} ± {row['acc_std']:.2f} "
                      f"| {paper if paper is not None else '-'} | "
                      f"{'-' if mis is None else f'{np.mean(mis):.3f}'} | {row['seconds']} |")
            suite.write_json("ifca_table1", rows)
            (suite.out / "ifca_table1.md").write_text("\n".join(md) + "\n")
            if done < rounds:
                break
    return dict(status=status, reason="" if status == "ok" else "out of time; rows so far written",
                rows=len(rows))


# The LEAF folders each table script reads, and the methods its dry run exercises (one row
# per distinct code path; the CPU test of the suite must stay within its time)
SCRIPT_DATA = {"ifca_table2": ("femnist-leaf",), "srfca_table4": ("femnist-leaf", "shakespeare-leaf"),
               "ifca_table2_code": ("femnist-leaf",)}
DRY_METHODS = {"ifca_table2": ["IFCA k=2", "local"], "srfca_table4": ["SR-FCA", "Local"],
               "ifca_table2_code": ["IFCA k=2", "local"]}
SCRIPT_MODULE = {"ifca_table2_code": "ifca_table2"}   # parts that run a script another way


def part_script(name: str, script: str, extra: tuple = ()):
    """A table script run as ``script [extra] --full|--dry-run --data-dir D --out
    <out>/<name>.md --budget S``: S leaves the script 10% (at least 15 s) of the part's time
    to write the rows it finished before the suite's timeout; skipped when the script or its
    data is missing."""
    def part(suite: Suite, budget: float) -> dict:
        path = ROOT / "benchmarks" / script
        if not path.exists():
            return dict(status="skipped", reason=f"benchmarks/{script} does not exist at this commit")
        missing = [d for d in SCRIPT_DATA[name] if not (Path(suite.args.data_dir) / d).is_dir()]
        if missing:
            return dict(status="skipped", reason=f"{', '.join(missing)} not under --data-dir "
                        f"{suite.args.data_dir} (--prepare-data copies it)")
        if suite.args.dry_run:
            mode = ["--dry-run", "--methods", *DRY_METHODS[name]]
        else:
            left = methods_left(name, suite.done[name])
            if not left:
                return dict(status="skipped", reason="every row done in an earlier run (--done)")
            mode = ["--full", "--methods", *left]
            if suite.conv():
                mode += ["--conv", suite.conv()]
        if suite.args.checkpoints:
            mode += ["--checkpoint-dir", str(suite.args.checkpoints)]
        inner = max(1.0, budget - max(15.0, 0.1 * budget))
        rec = subprocess_part(suite, name, [sys.executable, str(path), *extra, *mode, "--data-dir",
                                            suite.args.data_dir, "--out",
                                            str(suite.out / f"{name}.md"), "--budget",
                                            f"{inner:.0f}"], budget, f"{name}.txt")
        table = suite.out / f"{name}.json"
        if rec["status"] == "ok" and table.exists() and not json.loads(table.read_text()).get(
                "complete", True):
            rec.update(status="partial", reason="--budget ran out: the table holds the rows "
                       "finished (rounds run per row)")
        return rec
    return part


def methods_left(name: str, done: set) -> list[str]:
    """The script's methods with a row (ifca_table2) or a dataset's row (srfca_table4) not
    finished at full schedule in an earlier run."""
    import importlib
    mod = importlib.import_module(SCRIPT_MODULE.get(name, name))
    datasets = getattr(mod, "DATASETS", None)
    return [m for m in mod.METHODS if (m not in done if datasets is None else
                                       not all(f"{d} / {m}" in done for d in datasets))]


# ------------------------------------------------------------------------------ data

def prepare_data(source: Path, dest: Path) -> int:
    """Copies the suite's data folders from ``source`` to ``dest``; returns the bytes copied."""
    missing = [p for p in DATA_PARTS if not (source / p).exists()]
    if missing:
        raise SystemExit(f"--prepare-data: {missing} not found under {source}; pass --source "
                         "(the folder holding mnist/, femnist-leaf/, shakespeare-leaf/)")
    total = sum(f.stat().st_size for p in DATA_PARTS for f in (source / p).rglob("*") if f.is_file())
    if total > CARRY_LIMIT:
        raise SystemExit(f"--prepare-data: {total / 2**20:.1f} MiB exceeds the 64 MiB a device "
                         "run can carry")
    for p in DATA_PARTS:
        if (dest / p).exists():
            shutil.rmtree(dest / p)
        shutil.copytree(source / p, dest / p)
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="device_suite_out", help="folder for every result file")
    ap.add_argument("--data-dir", default=".data", help="folder with mnist/, femnist-leaf/, "
                    "shakespeare-leaf/")
    ap.add_argument("--budget", type=float, default=450.0,
                    help="seconds for all parts together (default keeps the run under 8 min)")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--init", default="torch", choices=["flax", "torch"],
                    help="MLP initialisation for IFCA Table 1 (torch: the authors' code)")
    ap.add_argument("--archive", type=output_file, default=None,
                    help="also write the --out folder as this .tar.gz after every part (a device "
                         "run brings back at most 8 files: pass $OUT/device_suite.tar.gz)")
    ap.add_argument("--dry-run", action="store_true", help="every part at toy size (CPU)")
    ap.add_argument("--prepare-data", action="store_true",
                    help="copy the data from --source into --data-dir and stop")
    ap.add_argument("--source", default="../shared/data")
    ap.add_argument("--done", nargs="+", default=None,
                    help="folders of imported runs (device_results.py) or earlier --out "
                         "folders; parts and table rows finished there are skipped. Default: "
                         "benchmarks/results/device on a full-size run, nothing on --dry-run; "
                         "'none': run everything")
    ap.add_argument("--checkpoints", default=None,
                    help="folder where table rows cut by the budget save their states and a "
                         "later call resumes them (default .suite/checkpoints on a full-size run, "
                         "kept by a warm device machine between a session's calls; 'none': off)")
    args = ap.parse_args(argv)
    if args.checkpoints is None and not args.dry_run:
        args.checkpoints = str(ROOT / ".suite" / "checkpoints")
    elif args.checkpoints == "none":
        args.checkpoints = None
    if args.prepare_data:
        total = prepare_data(Path(args.source), Path(args.data_dir))
        print(f"copied {total / 2**20:.1f} MiB of {', '.join(DATA_PARTS)} to {args.data_dir}")
        return
    if args.dry_run:
        args.budget = min(args.budget, 240.0)   # + start-up and the last part's write: < 5 min
    if args.done is None:
        args.done = None if args.dry_run else [str(device_results.DEVICE_DIR)]
    elif args.done == ["none"]:
        args.done = None
    elif missing := [d for d in args.done if not Path(d).is_dir()]:
        ap.error(f"--done {' '.join(missing)}: no such folder (pass folders of imported runs or "
                 "earlier --out folders, or none)")
    command = generated_by(None if argv is None else [__file__, *argv]).strip()
    suite = Suite(args, command)
    print(f"device: {jax.devices()[0]}; budget {args.budget:.0f} s", flush=True)
    for part, fn in (("tests", part_tests), ("ifca_round", part_ifca_round),
                     ("ifca_separation", part_ifca_separation), ("sweep", part_sweep),
                     ("scale", part_scale), ("robust", part_robust),
                     ("cross_loss", part_cross_loss), ("cnn_conv", part_cnn_conv),
                     ("ifca_table1", part_ifca_table1),
                     ("ifca_figure3", part_ifca_figure3),
                     ("ifca_table2", part_script("ifca_table2", "ifca_table2.py")),
                     ("srfca_table4", part_script("srfca_table4", "srfca_table4.py")),
                     ("ifca_table2_code", part_script("ifca_table2_code", "ifca_table2.py",
                                                      ("--protocol", "code")))):
        suite.run(part, lambda budget, fn=fn: fn(suite, budget))
    print((suite.out / "summary.md").read_text())


if __name__ == "__main__":
    main()
