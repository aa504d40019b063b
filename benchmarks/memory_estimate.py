"""The memory pre-check's estimate against XLA's own plan of the compiled program.

    python benchmarks/memory_estimate.py --data-dir /work/shared/data \
        --out benchmarks/results/memory_estimate_cpu.md

For IFCA Table 1's first program (``studies/ifca/table1.toml``: IFCA on
``ifca-rotated-mnist`` at m = 4800 clients of n = 50 images, MLP 784-200-10, K = 4,
tau = 10 full-batch steps, one start) with c points of a sweep vmapped into one call,
compiles the sweep's chunk program (``sweep_calls.Programs``) for this backend in the
client layout ``--chunk`` (default none: one vmap over the clients, what "auto" picks on an
accelerator when the estimate says it fits) and prints, beside the estimate by part
(``core.memory.estimate`` as ``sweep._fit_points`` calls it), what XLA's compiled program
plans to hold (``compiled.memory_analysis()``: arguments, outputs, aliased bytes,
temporaries) and their ratio. Nothing is run: the program is only compiled, so the figures
of a GPU need no GPU memory, but they are this backend's compiler's plan.
"""

from __future__ import annotations

import argparse
import os
import sys

from _common import ROOT, data_dir_or_error, output_file, printed_to

sys.path.insert(0, ROOT)      # runs from a checkout without an install


def table1_study(m: int, n: int) -> dict:
    return {"dataset": "ifca-rotated-mnist", "data": {"num_clients": m, "n": n},
            "model": "mlp", "model_args": {"init": "torch"}, "rounds": 300,
            "algorithms": {"ifca": {"num_clusters": 4, "steps": 10, "lr": 0.1}}}


def measure(args) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from fedclust_jax.core import memory
    from fedclust_jax.experiment import (build_run_algorithm, load_study_data, stored_data,
                                         study_configs)
    from fedclust_jax.sweep_calls import CAPACITY, Programs

    (_, cfg), = study_configs(table1_study(args.num_clients, args.n))
    data = stored_data(cfg, load_study_data(cfg))
    alg = build_run_algorithm(cfg, data).with_chunk(args.chunk)
    programs = Programs(alg, cfg, None, True, {}, min(cfg.rounds, CAPACITY))
    rows = []
    for c in args.points:
        seeds = jax.ShapeDtypeStruct((c,), jnp.uint32)
        states = jax.eval_shape(programs.init, {}, data, seeds)
        compiled = programs.chunk.lower(states, {}, data, seeds, jnp.int32(0),
                                        jnp.int32(1)).compile()
        plan = compiled.memory_analysis()
        est = memory.estimate(alg, data, restarts=cfg.restarts * c, chunk=args.chunk)
        xla = {"arguments": plan.argument_size_in_bytes, "outputs": plan.output_size_in_bytes,
               "aliased": plan.alias_size_in_bytes, "temporaries": plan.temp_size_in_bytes}
        xla["total"] = xla["arguments"] + xla["outputs"] - xla["aliased"] + xla["temporaries"]
        rows.append({"points": c, "estimate": est, "xla": xla})
    return rows


def report(rows: list[dict], args) -> None:
    import jax
    gb = lambda b: f"{b / 2**30:.2f}"
    print(f"IFCA Table 1 program, m = {args.num_clients}, n = {args.n}, chunk "
          f"{args.chunk or 'none (one vmap)'}; backend {jax.default_backend()}, "
          f"jax {jax.__version__}; GiB\n")
    parts = [k for k in rows[0]["estimate"] if k != "total"]
    print("| points | " + " | ".join(f"estimate: {k}" for k in parts)
          + " | estimate total | XLA arguments | XLA outputs | XLA aliased | XLA temporaries"
            " | XLA total | XLA / estimate |")
    print("|" + "---|" * (len(parts) + 8))
    for r in rows:
        e, x = r["estimate"], r["xla"]
        print(f"| {r['points']} | " + " | ".join(gb(e[k]) for k in parts)
              + f" | {gb(e['total'])} | {gb(x['arguments'])} | {gb(x['outputs'])} | "
                f"{gb(x['aliased'])} | {gb(x['temporaries'])} | {gb(x['total'])} | "
                f"{x['total'] / e['total']:.2f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="folder holding mnist/")
    p.add_argument("--num-clients", type=int, default=4800)
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--points", type=int, nargs="+", default=[1, 2, 5],
                   help="points of the sweep vmapped into one call")
    p.add_argument("--chunk", type=lambda s: None if s == "none" else int(s), default=None,
                   help="clients per chunk (none: one vmap)")
    p.add_argument("--out", type=output_file, default=None, help="results file (markdown)")
    args = p.parse_args(argv)
    os.environ["FEDCLUST_DATA"] = data_dir_or_error(p, args.data_dir or os.environ.get(
        "FEDCLUST_DATA"))
    with printed_to(args.out, "benchmarks/memory_estimate.py"):
        report(measure(args), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
