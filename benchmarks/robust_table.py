"""Robustness table: every aggregator against every attack at byz_frac in {0, .05, .1, .2, .3}
inside BR-IFCA on one synthetic clustered task; final parameter error.

    python benchmarks/robust_table.py [--trials 3] [--rounds 100] [--out benchmarks/results/brifca/robust_table.md] \
        [--notes-file benchmarks/notes/robust_table.md]

Task: ``brifca_regression`` with k = 2, m = 120 machines, d = 10, n = 50, sigma^2 = 0.2; the
last round(byz_frac m) machines are Byzantine (own norm-3 regression data, which the
outlier attack uses). Every cluster model starts at theta*_j plus a random offset of norm
0.25 (the BR-IFCA theory's good initialisation), so the table isolates the aggregation.
BR-IFCA step theta_j -= 0.1 agg, 100 rounds, cluster choice by loss (Byzantine placement
"loss"). Settings: trim_frac 0.1; Krum's assumed fraction 0.2;
centered clipping tau = 1, 3 iterations from 0; geometric median 10 Weiszfeld steps.
Attacks: outlier (gradient at 3 theta_j), sign_flip (-1 x own gradient), scaling (x10),
gaussian (std 10), alie (Baruch's z), ipm (eps 0.1), label_flip (y -> -y).
One compiled program per (rule, attack) runs every byz_frac and trial (``BRIFCA.step``
with the Byzantine mask as data). Entry: mean over trials of (1/k) sum_j ||theta_j - theta*_j|| (Hungarian matching).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from provenance import generated_by
from _common import output_file

from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig
from fedclust_jax.attacks.byzantine import num_byzantine
from fedclust_jax.core.robust import RULES
from fedclust_jax.core.train import LocalTraining
from fedclust_jax.data.robust_synthetic import brifca_regression
from fedclust_jax.metrics import parameter_error
from fedclust_jax.models.linear import linear_regression

ATTACKS = {"outlier": {}, "sign_flip": dict(attack_scale=1.0), "scaling": dict(attack_scale=10.0),
           "gaussian": dict(attack_std=10.0), "alie": {}, "ipm": dict(attack_eps=0.1),
           "label_flip": {}}
FRACS = (0.0, 0.05, 0.1, 0.2, 0.3)
K, M, D = 2, 120, 10


def datasets(trials):
    """Per byz_frac and trial: data (stacked [F, T, ...]), Byzantine masks [F, m], counts [F]."""
    out = []
    for frac in FRACS:
        make = jax.jit(jax.vmap(lambda key, frac=frac: brifca_regression(
            key, num_clients=M, num_clusters=K, byz_frac=frac, dim=D, samples_per_client=50,
            test_samples_per_client=1)))
        keys = jax.vmap(lambda t: jax.random.fold_in(jax.random.key(1), t))(jnp.arange(trials))
        out.append(make(keys))
    data = jax.tree.map(lambda *a: jnp.stack(a), *out)
    counts = jnp.asarray([num_byzantine(M, f) for f in FRACS], jnp.int32)
    masks = jnp.arange(M)[None, :] >= M - counts[:, None]
    return data, masks, counts


def run(rule, attack, data, masks, counts, rounds):
    """[F] mean final parameter errors; one compiled program for all fractions and trials."""
    cfg = BRIFCAConfig(num_clusters=K, aggregator=rule, trim_frac=0.1, attack=attack,
                       krum_frac=0.2, clip_tau=1.0, clip_iters=3,
                       local=LocalTraining(steps=1, lr=0.1), **ATTACKS[attack])
    alg = BRIFCA(linear_regression(D), cfg)

    def trial(data, byz, nb, t):
        key = jax.random.fold_in(jax.random.key(2), t)
        off = jax.random.normal(jax.random.fold_in(key, 1), (K, D))
        init = data.true_params + 0.25 * off / jnp.linalg.norm(off, axis=1, keepdims=True)
        state = alg.init(key, data, {"theta": init})
        state = jax.lax.scan(
            lambda s, r: (alg.step(s, jax.random.fold_in(key, 10 + r), data, byz, nb)[0], None),
            state, jnp.arange(rounds))[0]
        return state.params["theta"]

    trials = jax.tree.leaves(data)[0].shape[1]
    per_frac = lambda d, b, nb: jax.vmap(lambda dd, t: trial(dd, b, nb, t))(d, jnp.arange(trials))
    est = np.asarray(jax.jit(jax.vmap(per_frac))(data, masks, counts))        # [F, T, K, D]
    truth = np.asarray(data.true_params)
    return [float(np.mean([parameter_error(e, t) for e, t in zip(est[f], truth[f])]))
            for f in range(len(FRACS))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--rules", nargs="*", default=list(RULES))
    ap.add_argument("--out", type=output_file, default=None)
    ap.add_argument("--notes-file", default=None, help="markdown appended after the tables")
    args = ap.parse_args()
    notes = open(args.notes_file).read().rstrip() + "\n" if args.notes_file else ""
    head = (generated_by() + "# Robustness table (BR-IFCA, final parameter error)\n\n" + __doc__.split("\n\n", 2)[2]
            + f"\n{args.trials} trials, {args.rounds} rounds. Columns: byz_frac. "
            "Errors above 1 (the norm of theta*) mark a breakdown.\n")
    sections = []
    data, masks, counts = datasets(args.trials)
    for rule in args.rules:
        rows = [f"\n### {rule}\n", "| attack | " + " | ".join(str(f) for f in FRACS) + " |",
                "|---|" + "---|" * len(FRACS)]
        for attack in ATTACKS:
            t0 = time.perf_counter()
            cells = run(rule, attack, data, masks, counts, args.rounds)
            rows.append(f"| {attack} | " + " | ".join(
                f"**{c:.3g}**" if c > 1 else f"{c:.3g}" for c in cells) + " |")
            print(rule, rows[-1], f"[{time.perf_counter() - t0:.1f} s]", flush=True)
        sections.append("\n".join(rows))
        if args.out:   # after every rule; the notes once every rule is in
            done = len(sections) == len(args.rules)
            with open(args.out, "w") as fh:
                fh.write(head + "\n".join(sections) + "\n" + (f"\n{notes}" if done and notes else ""))


if __name__ == "__main__":
    main()
