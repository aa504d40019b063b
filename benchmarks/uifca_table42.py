"""UIFCA Table 4.2 ([T] 4.3): likelihood assignment by two RealNVPs (digits 2 and 3).

One RealNVP is trained (centrally) on the training images of digit 2, one on digit 3; every
test image of digits 2 and 3 goes to the flow of higher likelihood; the table reports the
accuracy of that assignment for the four settings of [T]'s ablation:
  Default: checkerboard masks;  RB: random background (pixels < 0.01 replaced by U[0, 1],
  train and test);  CM: cyclic masks;  RB+CM: both.
Pixels are uint8 / 256 with uniform dequantization noise of width 1/256 in training and
bin centres at scoring. [T] gives neither architecture nor training: here RealNVP with
``--depth`` couplings of MLP width ``--hidden`` (see ``fedclust_jax.models.flows``), Adam
``--lr`` batch 64 for ``--steps`` steps.

``--seeds S`` repeats every setting with S training seeds (seed s: flow keys 10 + j + 1000 s,
which also draw the batches and the dequantization noise; random background from numpy seed
s; seed 0 is the single run of earlier versions). A flow whose mean training NLL over its
last 100 steps is more than 100 nats above its best 100 steps' (or not finite) is marked
diverged: its accuracy measures the failed training, not the setting. The table gives every
seed's accuracy, the mean over seeds, and the mean over the seeds whose two flows trained.

    python benchmarks/uifca_table42.py --data-dir ../shared/data/mnist [--steps 1500] [--seeds 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import optax
from _common import load_averages, output_file, write_markdown

from fedclust_jax.data.sources import read_idx
from fedclust_jax.models.flows import real_nvp

THESIS = {"Default": 50.7, "RB": 95.09, "CM": 99.0, "RB+CM": 98.6}
SETTINGS = {"Default": ("checkerboard", False), "RB": ("checkerboard", True),
            "CM": ("cyclic", False), "RB+CM": ("cyclic", True)}


def load_mnist_uint8(data_dir):
    """(x_train uint8 [60000, 28, 28], y_train, x_test, y_test) from the IDX .gz files."""
    d = Path(data_dir)

    def get(stem):
        for p in (d / f"{stem}.gz", d / stem):
            if p.exists():
                return read_idx(p)
        raise SystemExit(f"MNIST file {stem}(.gz) not found in {d}: pass --data-dir, the folder "
                         "holding the four IDX files (e.g. ../shared/data/mnist)")
    return (get("train-images-idx3-ubyte"), get("train-labels-idx1-ubyte").astype(np.int32),
            get("t10k-images-idx3-ubyte"), get("t10k-labels-idx1-ubyte").astype(np.int32))


def to_unit(images_u8, rng=None, random_background=False):
    """uint8 [n, 28, 28] -> float32 in [0, 255/256] (add U[0, 1/256) noise to dequantize);
    random_background replaces pixels < 0.01 (value < 2.55) by uniform random bytes."""
    x = images_u8.copy()
    if random_background:
        bg = x < 0.01 * 255
        x[bg] = rng.integers(0, 256, size=int(bg.sum()), dtype=np.uint8)
    return x.astype(np.float32) / 256.0


def flow_trainer(flow, lr, batch=64, chunk=100):
    """train(key, x, steps) -> (params, NLL trace): Adam on the mean dequantized NLL of x
    [n, 28, 28], ``chunk`` steps per compiled call (one program per data shape)."""
    opt = optax.adam(lr)

    @jax.jit
    def run(params, state, key, xs):
        def step(carry, k):
            p, s = carry
            kb, kn = jax.random.split(k)
            idx = jax.random.randint(kb, (batch,), 0, xs.shape[0])
            loss, g = jax.value_and_grad(flow.train_nll)(p, xs[idx], jnp.ones(batch), kn)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss
        (params, state), losses = jax.lax.scan(step, (params, state), jax.random.split(key, chunk))
        return params, state, losses.mean()

    def train(key, x, steps):
        params, xs = flow.init(key), jnp.asarray(x)
        state, trace = opt.init(params), []
        for c in range(steps // chunk):
            params, state, loss = run(params, state, jax.random.fold_in(key, c), xs)
            trace.append(float(loss))
        return params, trace
    return train


DIVERGED_NATS = 100.0
DIGITS = (2, 3)


def diverged(trace) -> bool:
    """A flow's training failed: its last chunk's mean NLL is not finite or more than
    ``DIVERGED_NATS`` above its best chunk's (it went back up instead of settling)."""
    return not np.isfinite(trace[-1]) or trace[-1] > min(trace) + DIVERGED_NATS


def run_setting(name, seed, a, data, train, score):
    """One setting, one seed: the two flows' traces and the assignment accuracy (%)."""
    xtr, ytr, xte, yte = data
    rng = np.random.default_rng(seed)
    rb = SETTINGS[name][1]
    test_x = to_unit(xte[np.isin(yte, DIGITS)], rng, rb)
    test_y = yte[np.isin(yte, DIGITS)]
    centres = [jnp.asarray(test_x[i:i + 500]) + 0.5 / 256 for i in range(0, len(test_x), 500)]
    lls, traces = [], []
    for j, dgt in enumerate(DIGITS):
        t = time.time()
        params, trace = train(jax.random.key(10 + j + 1000 * seed),
                              to_unit(xtr[ytr == dgt], rng, rb), a.steps)
        lls.append(np.concatenate([np.asarray(score(params, x)) for x in centres]))
        traces.append(trace)
        print(f"{name} seed {seed}: flow for digit {dgt}: NLL {trace[0]:.0f} -> {trace[-1]:.0f} "
              f"(best {min(trace):.0f}){' diverged' if diverged(trace) else ''} "
              f"({time.time() - t:.0f}s)", flush=True)
    pred = np.asarray(DIGITS)[np.argmax(np.stack(lls, 1), 1)]
    acc = 100 * float((pred == test_y).mean())
    print(f"{name} seed {seed}: accuracy {acc:.2f} (thesis {THESIS[name]})", flush=True)
    return dict(acc=acc, traces=traces, diverged=any(diverged(t) for t in traces))


def table(rows, seeds) -> str:
    """The markdown table: per-seed accuracies (diverged runs marked *), their mean, and the
    mean over the runs whose flows both trained."""
    head = " | ".join(f"seed {s}" for s in seeds)
    lines = [f"| setting | {head} | mean | mean without diverged (runs) | thesis |",
             "|---|" + "---:|" * (len(seeds) + 3)]
    for name, runs in rows.items():
        accs = [r["acc"] for r in runs]
        kept = [r["acc"] for r in runs if not r["diverged"]]
        cells = " | ".join(f"{r['acc']:.2f}{'*' if r['diverged'] else ''}" for r in runs)
        clean = f"{np.mean(kept):.2f} ({len(kept)})" if kept else "- (0)"
        lines.append(f"| {name} | {cells} | {np.mean(accs):.2f} | {clean} | {THESIS[name]} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/mnist"))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=1, help="training seeds 0..S-1 per setting")
    ap.add_argument("--settings", default="Default,RB,CM,RB+CM")
    ap.add_argument("--out", type=output_file,
                    default=str(Path(__file__).parent / "results" / "uifca/table42.md"))
    a = ap.parse_args()
    names = a.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown --settings {unknown}: a comma-separated subset of {','.join(SETTINGS)}")
    if a.seeds < 1:
        ap.error(f"--seeds must be at least 1, got {a.seeds}")
    if a.steps < 100 or a.steps % 100:
        ap.error(f"--steps must be a positive multiple of 100 (the steps run in compiled "
                 f"chunks of 100), got {a.steps}")
    data = load_mnist_uint8(a.data_dir)
    t0, load_before = time.time(), load_averages()
    rows = {}
    for n in names:
        flow = real_nvp((28, 28), depth=a.depth, hidden=a.hidden, mask=SETTINGS[n][0])
        train = flow_trainer(flow, a.lr)
        score = jax.jit(flow.log_prob)   # at bin centres: x + 0.5 / 256
        rows[n] = [run_setting(n, s, a, data, train, score) for s in range(a.seeds)]
    nll = "; ".join(f"{n} " + ", ".join(" / ".join(f"{t[-1]:.0f} ({min(t):.0f})" for t in r["traces"])
                                        for r in runs) for n, runs in rows.items())
    text = ("# UIFCA Table 4.2: likelihood assignment by two RealNVPs (digits 2 vs 3)\n\n"
            f"RealNVP depth {a.depth}, MLP width {a.hidden}; Adam lr {a.lr}, batch 64, "
            f"{a.steps} steps per flow; test images of digits 2 and 3 "
            f"({int(np.isin(data[3], DIGITS).sum())}); accuracy % per "
            f"training seed, * = a flow diverged (its last 100 steps' mean NLL more than "
            f"{DIVERGED_NATS:.0f} nats above its best 100 steps'); {time.time() - t0:.0f}s on "
            f"{jax.devices()[0].platform}.\n\n"
            + table(rows, range(a.seeds))
            + f"\nTraining NLL (nats per image), last 100 steps (best 100 steps), digit 2 / "
              f"digit 3, seeds in order: {nll}.")
    write_markdown(a.out, __file__, None, load_before, text)
    print(text)


if __name__ == "__main__":
    main()
