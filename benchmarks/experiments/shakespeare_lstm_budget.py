"""SR-FCA Table 4 Shakespeare (issue 50, row 2): can our LSTM reach the paper's ~45%, and at
what cost? Runs through ``run_experiment``: SGD lr 0.8, batch 10 (the authors' code),
2-layer LSTM 256, LEAF's split, at most --max-train / --max-test windows a speaker.

    python benchmarks/experiments/shakespeare_lstm_budget.py --data-dir /work/shared/data \
        --out benchmarks/results/experiments/shakespeare_lstm_budget.md

Runs: "central": the 10 speakers' windows pooled in one client, 6 rounds x 400 steps (one
client's budget in the paper's schedule), "central-12" 12 rounds; "fedavg-400" / "fedavg-10": FedAvg on 2 speakers
(drawn from the seed), --fedavg-rounds rounds of 400 / 10 local steps. Test accuracy after
every round. Rows of an earlier --out JSON that this command does not run are kept (each
row names its command).
"""
import argparse, json, shlex, sys, time
from pathlib import Path

import numpy as np

from fedclust_jax.data.registry import build_dataset
from fedclust_jax.experiment import ExperimentConfig, run_experiment
from fedclust_jax.loop import data_key

p = argparse.ArgumentParser()
p.add_argument("--data-dir", required=True); p.add_argument("--out", required=True)
p.add_argument("--max-train", type=int, default=500); p.add_argument("--max-test", type=int, default=100)
p.add_argument("--runs", nargs="+", default=["central", "fedavg-400", "fedavg-10"])
p.add_argument("--fedavg-rounds", type=int, default=6)
a = p.parse_args()
cut = dict(data_dir=a.data_dir, max_train=a.max_train, max_test=a.max_test)
RUNS = {"central": (dict(pool=True), 400, 6), "central-12": (dict(pool=True), 400, 12),
        "fedavg-400": (dict(num_clients=2), 400, a.fedavg_rounds), "fedavg-10": (dict(num_clients=2), 10, a.fedavg_rounds)}
out = Path(a.out)
old = json.loads(out.with_suffix(".json").read_text())["rows"] if out.with_suffix(".json").exists() else []
rows = [r for r in old if r["run"] not in a.runs]
cmd = "python benchmarks/experiments/shakespeare_lstm_budget.py " + shlex.join(sys.argv[1:])
for name in a.runs:
    data, steps, rounds = RUNS[name]
    cfg = ExperimentConfig(dataset="shakespeare-windows", data={**cut, **data}, model="shakespeare-lstm",
                           algorithm="fedavg", params=dict(lr=0.8, batch_size=10, steps=steps),
                           rounds=rounds, eval_every=1, seed=0)
    d = build_dataset(cfg.dataset, data_key(0), **cfg.data)
    yt = np.concatenate([np.asarray(d.y_test[i, :c]) for i, c in enumerate(np.asarray(d.count_test))])
    r = run_experiment(cfg, data=d, progress=False)
    rows.append(dict(run=name, command=cmd, clients=d.num_clients, train=int(np.sum(d.count)), test=len(yt),
                     steps=steps, space_rate=float(np.mean(yt == 1)), wall_s=r["wall_s"],
                     test_acc=[float(v) for v in r["curves"]["test_acc"]],
                     rounds=list(r["curves"]["round"])))
    print(rows[-1], flush=True)
    cmds = list(dict.fromkeys(x.get("command", cmd) for x in rows))
    lines = [" and ".join(f"`{c}`" for c in cmds), "", "# Shakespeare LSTM: test accuracy (%) against local steps", "",
             "SGD lr 0.8, batch 10, LSTM 2x256; test accuracy (client mean) after each round; "
             "space = the rate of the most common character (a space) in the test windows.", "",
             "| run | clients | train / test windows | rounds x local steps | "
             + " | ".join(f"round {t}" for t in range(1, 13)) + " | space | wall s |", "|---" * 18 + "|"]
    lines += [f"| {x['run']} | {x['clients']} | {x['train']} / {x['test']} | {len(x['rounds'])} x {x['steps']} | "
              + " | ".join([f"{100 * v:.2f}" for v in x["test_acc"]] + ["-"] * (12 - len(x["test_acc"])))
              + f" | {100 * x['space_rate']:.2f} | {x['wall_s']:.0f} |" for x in rows]
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(dict(command=cmd, rows=rows), indent=1) + "\n")
