"""Peak memory and seconds per round of IFCA on ``ifca-rotated-mnist`` with many clients and
restarts, in float32 and bfloat16.

    python benchmarks/restarts_memory.py --data-dir /work/shared/data \
        --markdown benchmarks/results/restarts_memory.md

Each dtype runs in its own subprocess (so peak RSS is that run's own) through the experiment
runner, as ``fedclust-jax run --algorithm ifca --dataset ifca-rotated-mnist --data
num_clients=4800 --data n=50 --restarts 10 --dtype D`` would: the dataset's defaults (views
over one uint8 pool, MLP 784-200-10, K = 4, option II, tau = 10 full-batch steps,
gamma = 0.1) with n = 50 images per client (the IFCA paper's pairing (m, n) = (4800, 50);
the default n = 100 fits 2,400 clients of the 60k-image whole-set construction), the client layout "auto" (on a CPU: one client at a time) and the memory
pre-check, then the evaluation of every restart. Rounds run one per compiled chunk; the
first (compilation included) is reported apart, seconds per round is the mean of the others
(``--rounds`` counts all of them, so at least 2). Peak memory: ``ru_maxrss`` of the
subprocess on a CPU (data building, compilation and evaluation included), else the largest
device ``peak_bytes_in_use``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _common import (ROOT, add_child_arguments, check_marks, child_command, child_record,
                     data_dir_or_error, load_averages, output_file, peak_memory_mb, round_marks,
                     run_child, write_markdown)


def run_one(cfg: dict) -> dict:
    import jax

    from fedclust_jax import experiment

    def report(done):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"# {cfg['dtype']}: round {done} done at {marks[-1] - start:.0f} s, "
              f"peak RSS so far {rss:.0f} MB", file=sys.stderr, flush=True)

    marks = round_marks(experiment, report)
    study = experiment.study_configs(_study(cfg))
    (_, ecfg), = study
    t0 = time.perf_counter()
    data = experiment.load_study_data(ecfg)
    build_s = time.perf_counter() - t0
    estimate_gb = _estimate_gb(experiment, ecfg, data)
    print(f"# {cfg['dtype']}: data built in {build_s:.0f} s; pre-check estimate "
          f"{estimate_gb:.2f} GB", file=sys.stderr, flush=True)
    start = time.perf_counter()
    result = experiment.run_experiment(ecfg, data=data, progress=False)
    end = time.perf_counter()
    rounds = cfg["rounds"]
    check_marks(marks, rounds, "benchmarks/restarts_memory.py")
    backend = jax.default_backend()
    peak = peak_memory_mb(backend)
    return dict(cfg, backend=backend, build_s=build_s, first_round_s=marks[0] - start,
                seconds_per_round=(marks[-1] - marks[0]) / (rounds - 1),
                evaluate_s=end - marks[-1], peak_memory_mb=peak,
                chunk=result["layout"]["chunk"],
                estimated_gb=(result["layout"]["estimated_bytes"] or {}).get("total", 0) / 2**30,
                test_acc=result["metrics"].get("test_acc"), data=result["data"])


def _estimate_gb(experiment, ecfg, data) -> float:
    """The memory pre-check's estimate (GB) for this run, as ``run_experiment`` makes it."""
    from fedclust_jax.algorithms.registry import build_algorithm
    from fedclust_jax.models.base import with_dtype
    from fedclust_jax.models.registry import build_model
    data = data.astype(ecfg.dtype)
    model = with_dtype(build_model(ecfg.model, data, **ecfg.model_args), ecfg.dtype)
    alg = build_algorithm(ecfg.algorithm, model, ecfg.params, data)
    _, layout = experiment.resolve_layout(alg, data, restarts=ecfg.restarts)
    return (layout["estimated_bytes"] or {}).get("total", 0) / 2**30


def _study(cfg: dict) -> dict:
    from fedclust_jax.presets import dataset_study
    study = dataset_study("ifca-rotated-mnist", ["ifca"])
    study["data"] = dict(study.get("data") or {}, num_clients=cfg["clients"], n=cfg["n"],
                         data_dir=cfg["data_dir"])
    study["algorithms"]["ifca"] = dict(study["algorithms"]["ifca"] or {}, restarts=cfg["restarts"])
    study.update(rounds=cfg["rounds"], rounds_per_chunk=1, dtype=cfg["dtype"])
    return study


def start(cfg: dict):
    """(process, its stdout file, its stderr file): the run in a subprocess."""
    import tempfile
    out, err = tempfile.TemporaryFile("w+"), tempfile.NamedTemporaryFile("w+", suffix=".log")
    proc = subprocess.Popen(child_command(__file__, cfg), stdout=out, stderr=err, text=True,
                            cwd=ROOT)
    return proc, out, err


def proc_status(pid: int) -> tuple[float | None, float | None]:
    """(peak RSS MB so far (VmHWM), CPU seconds used) of a live Linux process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return hwm, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return None, None


def watch(runs, deadline: float) -> list:
    """[(peak RSS MB, CPU s)] of each run, sampled every 5 s until all end or ``deadline``
    (time.time())."""
    seen = [(None, None)] * len(runs)
    while any(r[0].poll() is None for r in runs) and time.time() < deadline:
        for j, (proc, _, _) in enumerate(runs):
            hwm, used = proc_status(proc.pid)
            if hwm is not None:
                seen[j] = (hwm, used)
        time.sleep(5)
    return seen


def finish(run, cfg: dict, seen) -> dict:
    """The run's record; a run still going is stopped and the record says how far it got,
    with the peak RSS it had reached (VmHWM)."""
    proc, out, err = run
    peak, cpu = seen
    stopped = proc.poll() is None
    if stopped:
        proc.kill()
        proc.wait()
    err.seek(0)
    log = err.read()
    sys.stderr.write(log)
    if proc.returncode == 0:
        out.seek(0)
        return child_record(out.read())
    done = sum(": round " in line for line in log.splitlines())
    estimate = [line.rsplit("estimate ", 1)[1].split()[0] for line in log.splitlines()
                if "pre-check estimate" in line]
    record = dict(cfg, peak_memory_mb=peak, estimated_gb=float(estimate[0]) if estimate else None)
    if stopped:
        record["note"] = (f"stopped at the --max-minutes limit after {cpu or 0:.0f} CPU s, {done} of "
                          f"{cfg['rounds']} rounds done; peak RSS is the peak reached until then")
    else:
        why = "killed (out of memory?)" if proc.returncode in (-9, 137) else "see stderr"
        record["note"] = f"failed (exit {proc.returncode}): {why}"
    return record


def table(records) -> str:
    f = lambda r, k, spec: "-" if r.get(k) is None else format(r[k], spec)  # noqa: E731
    lines = ["| dtype | clients | n | restarts | chunk | peak RSS MB | s/round | 1st round s | "
             "evaluate s | test acc | pre-check estimate GB | note |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        lines.append(f"| {r['dtype']} | {r['clients']:,} | {r['n']} | {r['restarts']} | {r.get('chunk', '-')} | "
                     f"{f(r, 'peak_memory_mb', '.0f')} | {f(r, 'seconds_per_round', '.1f')} | "
                     f"{f(r, 'first_round_s', '.1f')} | {f(r, 'evaluate_s', '.1f')} | "
                     f"{f(r, 'test_acc', '.3f')} | {f(r, 'estimated_gb', '.2f')} | {r.get('note', '')} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_child_arguments(p)
    p.add_argument("--clients", type=int, default=4800)
    p.add_argument("--n", type=int, default=50, help="train images per client")
    p.add_argument("--restarts", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="rounds in all, the first one untimed")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                   choices=("float32", "bfloat16"))
    p.add_argument("--max-minutes", type=float, default=60,
                   help="wall minutes from the start after which unfinished runs are stopped "
                        "(their peak RSS so far and progress are reported)")
    p.add_argument("--parallel", action="store_true",
                   help="run the dtypes at the same time (peak RSS is still each run's own; "
                        "seconds per round then share the cores)")
    p.add_argument("--markdown", type=output_file,
                   help="write the command, loads and table to this path")
    args = p.parse_args(argv)
    if run_child(args, run_one):
        return
    if args.rounds < 2:
        p.error("--rounds must be >= 2 (the first round includes compilation)")
    data_dir = data_dir_or_error(p, args.data_dir)
    before, records = load_averages(), []
    cfgs = [dict(dtype=dtype, clients=args.clients, n=args.n, restarts=args.restarts, rounds=args.rounds,
                 data_dir=data_dir) for dtype in args.dtypes]
    deadline = time.time() + 60 * args.max_minutes
    groups = [cfgs] if args.parallel else [[c] for c in cfgs]
    for group in groups:
        runs = [start(c) for c in group]
        for cfg, run, seen in zip(group, runs, watch(runs, deadline)):
            records.append(finish(run, cfg, seen))
        print(json.dumps(records[-1], default=float), file=sys.stderr, flush=True)
    text = table(records)
    if args.parallel:
        text += f"\n\nThe {len(cfgs)} runs ran at the same time (--parallel), sharing the cores."
    print(text)
    if args.markdown:
        write_markdown(args.markdown, __file__, argv, before, text)


if __name__ == "__main__":
    main()
