"""IFCA Table 2's study files on tiny LEAF-format data written here: the FEMNIST recipe, the
one-shot clustering of the authors' code (logistic regression on raw pixels) and the code's
pipeline (pre-training, head-only training) run through the runner."""

import gzip
import json
import string
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def tiny_leaf(root: Path, writers: int = 8, speakers: int = 6) -> None:
    """femnist-leaf/ and shakespeare-leaf/ train/ and test/ in LEAF's JSON layout (FEMNIST
    gzipped, Shakespeare plain): 12-20 train / 3 test samples a writer, 30 train / 5 test
    80-character windows a speaker."""
    rng = np.random.default_rng(0)
    for split, n_lo, n_hi in (("train", 12, 20), ("test", 3, 4)):
        users = [f"f{i:04d}" for i in range(writers)]
        data = {u: {"x": rng.random((n, 784)).round(3).tolist(),
                    "y": rng.integers(0, 62, n).tolist()}
                for u in users for n in [int(rng.integers(n_lo, n_hi))]}
        d = root / "femnist-leaf" / split
        d.mkdir(parents=True)
        with gzip.open(d / f"all_data_0_{split}.json.gz", "wt") as f:
            json.dump({"users": users, "num_samples": [len(data[u]["y"]) for u in users],
                       "user_data": data}, f)
    letters = string.ascii_letters + " .,"
    for split, n in (("train", 30), ("test", 5)):
        users = [f"PLAY_SPEAKER_{i}" for i in range(speakers)]
        text = {u: "".join(rng.choice(list(letters), n + 80)) for u in users}
        data = {u: {"x": [text[u][j:j + 80] for j in range(n)],
                    "y": [text[u][j + 80] for j in range(n)]} for u in users}
        d = root / "shakespeare-leaf" / split
        d.mkdir(parents=True)
        (d / f"all_data_{split}.json").write_text(json.dumps(
            {"users": users, "num_samples": [n] * speakers, "user_data": data}))


@pytest.fixture(scope="module")
def leaf(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaf")
    tiny_leaf(root)
    return root


def test_table2_studies_run_on_leaf_femnist(leaf):
    """The Table 2 study files' FEMNIST recipe (a tiny LEAF copy) with a small MLP for the
    CNN, 1 round: one-shot with the code's clustering (as the paper states the protocol) and
    the code's pipeline (pre-training, warm start, head-only) for IFCA and local."""
    from fedclust_jax import reproduce
    for table, parts in (("ifca-table2", ["oneshot-k3"]), ("ifca-table2code", ["ifca-k2", "local"])):
        spec = reproduce.load_spec(table)
        chosen = {p: s for p, s in reproduce.studies(spec, seeds=[0], data_dir=str(leaf)).items()
                  if p in parts}
        for study in chosen.values():
            assert study["dataset"] == "femnist" and study["data"]["data_dir"] == str(leaf)
            study.update(model="mlp", model_args={"hidden": [8]}, rounds=1)
            (params,) = study["algorithms"].values()
            params.update(steps=1, **({"rounds": 1} if "rounds" in params else {}))
            small = dict(participation=0.5, pretrain_rounds=1, pretrain_participation=0.25,
                         warm_rounds=1, warm_clients_per_cluster=1, erm_steps=3, kmeans_iters=3)
            params.update({k: v for k, v in small.items() if k in params})
        spec = {**spec, "parts": {p: {} for p in chosen}, "quick": {}}
        rows = [r for p, study in chosen.items() for r in reproduce.run_table(
            {**spec, "study": study, "parts": None}, progress=False)]
        assert [r["algorithm"] for r in rows] == parts
        assert all(0.0 <= r["assigned_test_acc"] <= 1.0 for r in rows)
        found = {r["algorithm"]: r["num_clusters_found"] for r in rows if r["algorithm"] != "local"}
        assert all(1 <= v <= int(k[-1]) for k, v in found.items()), found
