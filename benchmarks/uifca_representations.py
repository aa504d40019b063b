"""UIFCA Table 4.3, "MNIST Representations" rows ([T] 4.3): k-FED, UIFCA and k-FED + UIFCA
on RotNet representations, purity % vs heterogeneity p.

[T] trains a RotNet (AlexNet) centrally on rotated MNIST and clusters the clients' points
by the activations of its last convolutional layer, but does not say which clustering
task. Read here as the "Rotated" task of the same table (the RotNet is a rotation
predictor, and [T]'s k-FED representation row at p = 1, 96.8, sits beside the Rotated
row's 100 rather than the Digits row's 62.3): one digit (2, 3, 4 or 5; all its training
images) at 0/90/180/270 degrees, K = 4 clusters = rotations, n = K clients (the recipe of
``fedclust_jax.data.points``, ``--fill`` x the pool size points each), purity averaged
over the four digits (``benchmarks/uifca_table43.py``'s protocol and seeds).

Pipeline (choices not in [T] marked *):
1. RotNet (``fedclust_jax.models.rotnet``; AlexNet-style, sized for 28x28) pretrained on
   every image of the *MNIST test split (10k images, all digits; held out from the
   clustered training images) at all four rotations, Adam, ``--epochs`` epochs of batch
   128. Params cached under ``--cache`` (default /tmp/fedclust_rotnet).
2. Representation: conv5 activations after AlexNet's overlapping 3x3/2 max pool, F = 288,
   each *scaled to unit L2 norm (``--normalize l2``, default; a per-point map each client
   applies locally). Without it k-means on these ReLU maps splits the points by activation
   strength more than by rotation (measured with the default RotNet: a central k-means of
   4 x 1500 rotated digit-2 images reaches purity 48% on the raw pooled features, 95%
   normalized, 92% on raw pixels); the "k-FED, unnormalized" row keeps that comparison.
3. k-FED (local k-means with K centres per client, best of 10 k-means++ seedings) on the
   F-dimensional representations: the "k-FED" row.
4. UIFCA's flow on R^d: the affine flow (a learned full Gaussian, [T]'s "1-layer planar
   flow" read as in Table 4.1) on *the representations projected on their top d =
   ``--pca`` (default 32, Table 4.1's dimension) principal components (93% of the
   variance with the defaults) and divided by one global scale (root mean variance of
   the kept components); the projection is fitted centrally on the pretraining images'
   representations, as part of the public pretrained model, so clients only apply it
   (a full Gaussian on the raw F = 288 ReLU features has dead, zero-variance units).
   UIFCA: T = ``--rounds``, tau = ``--comm-rounds``, M = ``--local-steps``, batch N,
   SGD lr; defaults T = 15, tau = 10, M = 100, N = 32, lr 1e-3, reduced from [T]'s
   T = 20, tau = 40, M = 100, lr 1e-4 (N unspecified) to fit the 2-core CPU: 1000 local
   steps per cluster round instead of 4000, with a 10x step size; init noise 0.01 and the
   noisy-copy initial split (``UIFCAConfig`` defaults);
   ``--restarts`` initialisations compared by mean NLL (no labels) after
   ``--select-after`` rounds, the best run on to T (not in [T]).
5. k-FED + UIFCA: UIFCA on the d-dimensional points started from step 3's assignment
   (one run: the start is fixed).

    python benchmarks/uifca_representations.py [--epochs 3] [--pca 32] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax.algorithms.kfed import kfed
from fedclust_jax.algorithms.uifca import UIFCAConfig, run_uifca
from fedclust_jax.data.points import true_points
from fedclust_jax.data.points import points_from_pools
from fedclust_jax.metrics import purity
from fedclust_jax.models.flows import affine_flow
from fedclust_jax.models.rotnet import (extract_features, pretrain_rotnet, rotated_copies,
                                        rotation_accuracy, rotnet)

sys.path.insert(0, str(Path(__file__).parent))
from uifca_table42 import load_mnist_uint8  # noqa: E402  (the same MNIST reader)
from _common import output_file  # noqa: E402

PS = (0.0, 0.25, 0.5, 0.75, 1.0)
DIGITS = (2, 3, 4, 5)
THESIS = {
    "k-FED": (86.0, 80.2, 63.1, 57.6, 96.8),
    "UIFCA": (43.6, 56.4, 78.2, 79.5, 99.5),
    "k-FED+UIFCA": (85.1, 85.4, 80.1, 81.8, 99.6),
}


def load_or_pretrain(model, images, *, epochs, lr, seed, cache_dir):
    """RotNet params trained by ``pretrain_rotnet`` on images [n, 28, 28] (float), loaded
    from ``cache_dir`` when a run with the same settings saved them. Returns (params,
    losses or None when cached, seconds)."""
    path = Path(cache_dir) / f"{model.name}-n{len(images)}-e{epochs}-lr{lr:g}-s{seed}.npz"
    template = model.init(jax.random.key(0))
    leaves, treedef = jax.tree.flatten(template)
    t = time.time()
    if path.exists():
        with np.load(path) as f:
            stored = [f[f"a{i}"] for i in range(len(leaves))]
        if all(a.shape == b.shape for a, b in zip(stored, leaves)):
            return jax.tree.unflatten(treedef, [jnp.asarray(a) for a in stored]), None, 0.0
    params, losses = pretrain_rotnet(model, jax.random.key(seed), images, epochs=epochs, lr=lr)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{f"a{i}": np.asarray(a) for i, a in enumerate(jax.tree.leaves(params))})
    return params, losses, time.time() - t


def unit_norm(f):
    """[n, F] rows scaled to unit L2 norm (all-zero rows stay 0)."""
    return f / jnp.maximum(jnp.linalg.norm(f, axis=-1, keepdims=True), 1e-12)


def fit_projection(features: np.ndarray, dim: int):
    """PCA of features [n, F] (host, float64): (mean [F], basis [F, d], scale, kept) with
    scale the root mean variance of the d kept components and kept their share of the
    total variance; ``project`` maps x -> (x - mean) basis / scale."""
    if not 1 <= dim <= features.shape[1]:
        raise ValueError(f"PCA dimension must be in [1, {features.shape[1]}], got {dim}")
    f = np.asarray(features, np.float64)
    mean = f.mean(0)
    vals, vecs = np.linalg.eigh(np.cov(f - mean, rowvar=False))
    top = np.argsort(vals)[::-1][:dim]
    return mean, vecs[:, top], float(np.sqrt(vals[top].mean())), vals[top].sum() / vals.sum()


def project(x, projection):
    """[..., F] -> [..., d] (see ``fit_projection``)."""
    mean, basis, scale = projection[:3]
    return ((x - jnp.asarray(mean, jnp.float32)) @ jnp.asarray(basis, jnp.float32)) / scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/mnist"))
    ap.add_argument("--cache", default="/tmp/fedclust_rotnet")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--pretrain-lr", type=float, default=1e-3)
    ap.add_argument("--pretrain-images", type=int, default=10000,
                    help="first N test images used for pretraining")
    ap.add_argument("--normalize", choices=("l2", "none"), default="l2")
    ap.add_argument("--pca", type=int, default=32)
    ap.add_argument("--fill", type=float, default=0.95)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--comm-rounds", type=int, default=10)
    ap.add_argument("--local-steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--select-after", type=int, default=3)
    ap.add_argument("--digits", default=",".join(map(str, DIGITS)))
    ap.add_argument("--ps", default=",".join(map(str, PS)))
    ap.add_argument("--seed", type=int, default=0, help="RotNet pretraining seed")
    ap.add_argument("--out", type=output_file, default=str(Path(__file__).parent / "results"
                                         / "uifca" / "table43_representations.md"))
    a = ap.parse_args()
    if not 1 <= a.select_after <= a.rounds:
        raise ValueError(f"--select-after must be in [1, --rounds = {a.rounds}], "
                         f"got {a.select_after}")
    digits = tuple(int(d) for d in a.digits.split(","))
    ps = tuple(float(p) for p in a.ps.split(","))
    t0 = time.time()
    times = {}
    xtr, ytr, xte, _ = load_mnist_uint8(a.data_dir)
    if not 1 <= a.pretrain_images <= len(xte):
        raise ValueError(f"--pretrain-images must be in [1, {len(xte)}], got {a.pretrain_images}")

    # 1. RotNet, pretrained centrally on the (held-out) test images at all four rotations.
    model = rotnet()
    pre = xte[:a.pretrain_images].astype(np.float32) / 256.0
    params, losses, times["pretrain"] = load_or_pretrain(
        model, pre, epochs=a.epochs, lr=a.pretrain_lr, seed=a.seed, cache_dir=a.cache)
    t = time.time()
    rot_acc = {d: rotation_accuracy(model, params, xtr[ytr == d].astype(np.float32) / 256.0)
               for d in digits}
    print(f"RotNet {model.name}: pretraining losses {losses} ({times['pretrain']:.0f}s); "
          f"rotation accuracy on training digits {rot_acc}", flush=True)

    # 2. Representations of every rotated training image of the chosen digits, and the
    # projection fitted on the pretraining images' representations.
    pre_rot, _ = rotated_copies(jnp.asarray(pre))
    normalize = unit_norm if a.normalize == "l2" else (lambda f: f)
    projection = fit_projection(
        np.asarray(normalize(extract_features(model, params, pre_rot))), a.pca)
    pools, raw_pools = {}, {}
    for d in digits:
        imgs = xtr[ytr == d].astype(np.float32) / 256.0
        feats = extract_features(model, params, rotated_copies(jnp.asarray(imgs))[0])
        raw_pools[d] = [np.asarray(f) for f in jnp.split(feats, 4)]  # rotation-major
        pools[d] = [np.asarray(normalize(f)) for f in raw_pools[d]]
    times["features"] = time.time() - t
    print(f"features F = {model.feature_dim}; PCA to d = {a.pca} keeps "
          f"{100 * projection[3]:.1f}% of the variance ({times['features']:.0f}s)", flush=True)

    # 3-5. Clustering.
    cfg = UIFCAConfig(num_clusters=4, cluster_rounds=a.rounds, comm_rounds=a.comm_rounds,
                      local_steps=a.local_steps, batch_size=a.batch, lr=a.lr)
    flow = affine_flow(a.pca)
    methods = ("k-FED", "UIFCA", "k-FED+UIFCA") + (("k-FED, unnormalized",)
                                                  if a.normalize == "l2" else ())
    cells = {(m, p): [] for m in methods for p in ps}
    curves = []
    times.update({m: 0.0 for m in methods})
    for p in ps:
        for j, d in enumerate(digits):
            key = jax.random.key(int(100 * p) + j)
            s = int(a.fill * min(len(q) for q in pools[d]))
            data = points_from_pools(key, pools[d], num_clients=4, points_per_client=s,
                                     heterogeneity=p)
            truth = true_points(data)
            low = data.replace(x=project(data.x, projection))
            k_kfed, k_uifca = jax.random.split(jax.random.fold_in(key, 1))
            t = time.time()
            start = kfed(k_kfed, data.x, data.count, 4).assign
            cells[("k-FED", p)].append(purity(start, truth))
            times["k-FED"] += time.time() - t
            if a.normalize == "l2":  # the same points and key, unnormalized features
                t = time.time()
                raw = points_from_pools(key, raw_pools[d], num_clients=4, points_per_client=s,
                                        heterogeneity=p)
                cells[("k-FED, unnormalized", p)].append(
                    purity(kfed(k_kfed, raw.x, raw.count, 4).assign, truth))
                times["k-FED, unnormalized"] += time.time() - t
            t = time.time()
            _, hist = run_uifca(flow, low, k_uifca, cfg, restarts=a.restarts,
                                select_after=a.select_after)
            cells[("UIFCA", p)].append(hist["purity"][-1])
            times["UIFCA"] += time.time() - t
            t = time.time()
            _, hist_kf = run_uifca(flow, low, k_uifca, cfg, assign=start)
            cells[("k-FED+UIFCA", p)].append(hist_kf["purity"][-1])
            times["k-FED+UIFCA"] += time.time() - t
            curves.append((p, d, hist["purity"], hist["final_purity"], hist_kf["purity"]))
            print(f"p={p} digit {d} ({4 * s} points): k-FED {100 * cells[('k-FED', p)][-1]:.1f} "
                  f"UIFCA "
                  f"{100 * hist['purity'][-1]:.1f} k-FED+UIFCA {100 * hist_kf['purity'][-1]:.1f}"
                  f"; {time.time() - t0:.0f}s; load {os.getloadavg()[0]:.1f}", flush=True)
    times["total"] = time.time() - t0
    write_report(a, ps, digits, cells, curves, times, rot_acc, losses, projection, model)


def write_report(a, ps, digits, cells, curves, times, rot_acc, losses, projection, model):
    """Markdown report at a.out; a "## Notes" section already there is kept."""
    head = "| method | " + " | ".join(f"p={p}" for p in ps) + " |"
    lines = [head, "|---|" + "---|" * len(ps)]
    for m in dict.fromkeys(m for m, _ in cells):
        lines.append(f"| {m} (ours) | "
                     + " | ".join(f"{100 * np.mean(cells[(m, p)]):.1f}" for p in ps) + " |")
        if m in THESIS:
            vals = dict(zip(PS, THESIS[m]))
            lines.append(f"| {m} (thesis) | " + " | ".join(str(vals.get(p, "-")) for p in ps)
                         + " |")
    per_digit = ["| method | p | " + " | ".join(f"digit {d}" for d in digits) + " |",
                 "|---|---|" + "---|" * len(digits)]
    for (m, p), vals in cells.items():
        per_digit.append(f"| {m} | {p} | " + " | ".join(f"{100 * v:.1f}" for v in vals) + " |")
    curve_lines = [f"- p={p} digit {d}: UIFCA {' '.join(f'{100 * v:.0f}' for v in u)} "
                   f"(restarts when compared {[round(100 * v, 1) for v in fp]}); "
                   f"k-FED+UIFCA {' '.join(f'{100 * v:.0f}' for v in kf)}"
                   for p, d, u, fp, kf in curves]
    loss_text = ("loaded from the cache" if losses is None else
                 "mean loss per epoch " + " ".join(f"{v:.3f}" for v in losses))
    from provenance import generated_by
    text = generated_by() + f"""# UIFCA Table 4.3, MNIST Representations rows: purity % vs heterogeneity p

Machine: {platform.machine()} CPU, {os.cpu_count()} cores (shared with other jobs), jax
{jax.__version__} on {jax.devices()[0].platform}, float32.

Task read as [T]'s "Rotated" one on RotNet representations: one digit ({", ".join(map(str, digits))};
all its training images) at 0/90/180/270 degrees, K = 4 rotation clusters, n = 4 clients of
{a.fill} x the pool size points each, heterogeneity recipe of `fedclust_jax.data.points`;
every cell is the mean over the digits (keys 100 p + digit index, as uifca_table43.py).

RotNet `{model.name}` (AlexNet-style, see `fedclust_jax/models/rotnet.py`), pretrained on the
first {a.pretrain_images} MNIST test images at all four rotations, Adam lr {a.pretrain_lr:g}, batch 128,
{a.epochs} epochs ({loss_text}); rotation accuracy on the clustered training images:
{", ".join(f"digit {d} {100 * v:.1f}%" for d, v in rot_acc.items())}.
Representation: pooled last-conv activations, F = {model.feature_dim}, normalization
{a.normalize!r}. k-FED runs on them; UIFCA
on their projection to the top d = {a.pca} principal components (fitted on the pretraining
images' representations; {100 * projection[3]:.1f}% of their variance), divided by one global
scale. UIFCA: affine flow (full Gaussian), T = {a.rounds}, tau = {a.comm_rounds}, M = {a.local_steps},
batch {a.batch}, SGD lr {a.lr:g}, init noise 0.01, initial split by the noisy copies;
{a.restarts} restarts compared by mean NLL after {a.select_after} rounds, the best run on to T.
k-FED + UIFCA: one UIFCA run from k-FED's assignment. "k-FED, unnormalized" (not in [T]):
k-FED on the same points' representations without the L2 normalization.

{chr(10).join(lines)}

Wall time: {times['total']:.0f}s in all; RotNet pretraining {times['pretrain']:.0f}s (0 = cached),
representations {times['features']:.0f}s, k-FED {times['k-FED']:.0f}s, k-FED unnormalized
{times.get('k-FED, unnormalized', 0):.0f}s, UIFCA {times['UIFCA']:.0f}s, k-FED + UIFCA {times['k-FED+UIFCA']:.0f}s.

Per digit:

{chr(10).join(per_digit)}

Purity per cluster round (round 0 = initial assignment):

{chr(10).join(curve_lines)}
"""
    out = Path(a.out)
    if out.exists() and "\n## Notes" in out.read_text():
        text += "\n## Notes" + out.read_text().split("\n## Notes", 1)[1]
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
