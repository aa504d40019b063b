"""Seconds per round of SR-FCA Table 4's FEMNIST Global and IFCA, and of IFCA's loss pass
alone, to see what IFCA's round adds to Global's.

    python benchmarks/srfca_table4_round.py --data-dir ../shared/data \
        --out benchmarks/results/srfca_table4_round.md

The setting of ``srfca_table4.py --protocol code --clients 10`` on FEMNIST, seed 0's 10
writers: the FEMNIST CNN, 5 local steps of batch 100 at SGD lr 0.04; Global (FedAvg) and IFCA
(K = 4, the authors' clients_per_cluster = 10 variant) both train their 10 participants one
after another (``sequential``). IFCA's round starts with every client's training loss on
each of the K models (the re-assignment); its loss pass is timed alone through
``IFCA.objective``, which runs the same pass. Each function is compiled first, then the
three are timed in turn, --repeats times (interleaved, so a change of the shared machine's
load reaches all three); the table gives the medians. One seed, no vmap over seeds (the
table runs vmap one seed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jax  # noqa: E402

from _common import output_file  # noqa: E402
from ifca_table2 import add_conv_argument, leaf_data, uptime  # noqa: E402
from provenance import generated_by  # noqa: E402
from srfca_table4 import CODE, build_methods, per_seed_data  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="../shared/data", help="folder holding femnist-leaf/")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls of each (median)")
    ap.add_argument("--out", type=output_file, default=None, help="markdown file to write")
    add_conv_argument(ap)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if not (Path(args.data_dir) / "femnist-leaf").is_dir():
        ap.error(f"no femnist-leaf/ under --data-dir {args.data_dir}")
    from fedclust_jax.models.cnn import femnist_cnn
    start = uptime()
    s = dict(CODE["femnist"])
    full, _ = leaf_data("femnist", args.data_dir, None)
    data = jax.tree.map(lambda a: a[0], per_seed_data(full, 10, [0]))
    model = femnist_cnn(62, conv=args.conv)
    algs = build_methods("femnist", model, s, argparse.Namespace(protocol="code"), 10)
    glob, ifca = algs["Global"][0], algs["IFCA"][0]
    key = jax.random.key(0)
    g_state, i_state = glob.init(key, data), ifca.init(key, data)
    loss_pass = "IFCA loss pass (every client on the K models)"
    calls = {   # name: (function of (state, key, data), the state it takes)
        "Global round": (jax.jit(lambda st, k, d: glob.round(st, k, d)[0]), g_state),
        "IFCA round": (jax.jit(lambda st, k, d: ifca.round(st, k, d)[0]), i_state),
        loss_pass: (jax.jit(lambda st, k, d: ifca.objective(st, d)), i_state),
    }
    seconds = {name: [] for name in calls}
    compile_s = {}
    for rep in range(args.repeats + 1):       # call 0 compiles
        for name, (fn, state) in calls.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state, jax.random.fold_in(key, rep), data))
            dt = time.perf_counter() - t0
            if rep == 0:
                compile_s[name] = dt
            else:
                seconds[name].append(dt)
            print(f"  {name} call {rep}: {dt:.2f} s", flush=True)
    med = {name: statistics.median(v) for name, v in seconds.items()}
    g, i, loss = med["Global round"], med["IFCA round"], med[loss_pass]
    lines = [generated_by().rstrip("\n"), "",
             "# SR-FCA Table 4, FEMNIST: seconds per round of Global and IFCA, and IFCA's loss "
             "pass", "", f"Setting: {' '.join(__doc__.split(chr(10) + chr(10))[2].split())}", "",
             f"Backend: {jax.devices()[0].platform}, jax {jax.__version__}; {data.num_clients} "
             f"writers, {int(data.count.sum())} training samples.", "",
             f"uptime at start: {start}", "",
             "| call | median s | timed calls, s | first call (compiles), s |",
             "|---|---:|---|---:|"]
    lines += [f"| {name} | {med[name]:.2f} | {', '.join(f'{v:.2f}' for v in seconds[name])} | "
              f"{compile_s[name]:.1f} |" for name in calls]
    lines += ["", f"uptime at end: {uptime()}", "",
              f"IFCA's round minus Global's: {i - g:.2f} s; the loss pass alone: {loss:.2f} s; "
              f"Global's round plus the loss pass: {g + loss:.2f} s against IFCA's {i:.2f} s "
              f"(difference {i - g - loss:+.2f} s)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
