"""LEAF JSON (FEMNIST, Shakespeare): one client per writer / speaker.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...],
"y": [...]}}}``, plain ``.json`` or gzipped ``.json.gz``. A LEAF folder holds ``train/`` and
``test/`` (LEAF's own per-user split) or, for data without a split, any ``.json[.gz]``
files; the latter are split per user in time order by ``time_split``.

Counts come from ``len(x)``, never ``num_samples`` (LEAF's Shakespeare test file states
79 more than it holds).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np

from fedclust_jax.data.defaults import paper_defaults
from fedclust_jax.data.sources import DataFormatError, missing, resolve_data_dir, ENV_VAR
from fedclust_jax.bounds import Count, Size

# LEAF's Shakespeare alphabet (80 symbols); a character's token is its index here.
SHAKESPEARE_CHARS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                     "abcdefghijklmnopqrstuvwxyz}")
_CHAR_TABLE = np.full(256, -1, np.int64)
for _i, _c in enumerate(SHAKESPEARE_CHARS):
    _CHAR_TABLE[ord(_c)] = _i

LEAF_DIRS = {"femnist": ("femnist-leaf", "femnist"),
             "shakespeare": ("shakespeare-leaf", "shakespeare")}


def read_leaf_file(path: str | os.PathLike) -> dict:
    """One LEAF JSON file (plain or .gz) -> {user: {"x": list, "y": list}} in file order."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            blob = json.load(f)
        users, data = blob["users"], blob["user_data"]
        return {u: {"x": data[u]["x"], "y": data[u]["y"]} for u in users}
    except (OSError, EOFError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataFormatError(f"{path} is not a LEAF JSON file ({type(e).__name__}: {e}); "
                              f"expected keys users, user_data[user].x / .y") from None


def leaf_files(folder: Path) -> list[Path]:
    """The LEAF files in ``folder`` (``*.json`` and ``*.json.gz``), sorted by name."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))


def read_leaf_folder(folder: Path) -> dict:
    """All LEAF files of ``folder`` merged: {user: {"x": list, "y": list}}; a user present in
    several files has its examples concatenated in file order."""
    out: dict = {}
    for p in leaf_files(folder):
        for u, d in read_leaf_file(p).items():
            if u in out:
                out[u]["x"] = out[u]["x"] + d["x"]
                out[u]["y"] = out[u]["y"] + d["y"]
            else:
                out[u] = d
    return out


def find_leaf(name: str, data_dir=None, subdir: str | None = None) -> Path:
    """The LEAF folder of ``name`` ("femnist" | "shakespeare") under the data root:
    ``<root>/<name>-leaf/`` or ``<root>/<name>/`` (plus ``subdir``), or ``<root>`` itself when
    it holds train/ and test/ folders or LEAF files."""
    root = resolve_data_dir(data_dir)
    how = (f"Download it with LEAF (github.com/TalwalkarLab/leaf: ./preprocess.sh in "
           f"data/{name}) and point data_dir or ${ENV_VAR} at the folder holding train/ and "
           f"test/ (files *.json or *.json.gz)")
    if root is None:
        raise missing(name, [], how)
    cands = [root / d for d in LEAF_DIRS[name]] + [root]
    if subdir:
        cands = [c / subdir for c in cands]
    for c in cands:
        if c.is_dir() and ((c / "train").is_dir() or leaf_files(c)):
            return c
    raise missing(name, cands, how)


def encode_chars(strings: list[str]) -> np.ndarray:
    """Shakespeare text -> tokens: list of equal-length strings -> int32 [n, L] indices into
    ``SHAKESPEARE_CHARS``. Characters outside the alphabet are an error."""
    if not strings:
        return np.zeros((0, 0), np.int32)
    try:
        raw = np.frombuffer("".join(strings).encode("latin-1"), np.uint8)
    except UnicodeEncodeError:
        raise DataFormatError("Shakespeare text has characters outside LEAF's alphabet") from None
    tok = _CHAR_TABLE[raw]
    if (tok < 0).any():
        bad = sorted({chr(c) for c in raw[tok < 0]})
        raise DataFormatError(f"characters {bad!r} are outside LEAF's 80-symbol alphabet")
    lengths = {len(s) for s in strings}
    if len(lengths) != 1:
        raise DataFormatError(f"Shakespeare windows have unequal lengths {sorted(lengths)[:5]}")
    return tok.reshape(len(strings), -1).astype(np.int32)


def to_arrays(name: str, d: dict) -> tuple[np.ndarray, np.ndarray]:
    """One user's LEAF record -> (x, y). FEMNIST: x float32 [n, 28, 28, 1] (1.0 = white
    background as LEAF stores it), y int32 [n]. Shakespeare: x int32 [n, 80] tokens, y int32
    [n] token of the next character."""
    if name == "femnist":
        x = np.asarray(d["x"], np.float32)
        if x.size and (x.ndim != 2 or x.shape[1] != 784):
            raise DataFormatError(f"FEMNIST x must be [n, 784], got {x.shape}")
        return x.reshape(-1, 28, 28, 1), np.asarray(d["y"], np.int32)
    x = encode_chars(d["x"])
    y = encode_chars(d["y"]).reshape(-1) if d["y"] else np.zeros(0, np.int32)
    return x, y


def time_split(n: int, train_fraction: float = 0.9, gap: int = 79) -> tuple[slice, slice]:
    """Time-ordered split of one user's n windows: train = the first floor(f n), test = what
    follows after skipping ``gap`` windows (79 for 80-character windows, so the windows
    around the boundary that overlap both parts are dropped)."""
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
    if gap < 0:
        raise ValueError(f"gap must be >= 0, got {gap}")
    n_train = int(np.floor(train_fraction * n))
    return slice(0, n_train), slice(min(n, n_train + gap), n)


def load_leaf_clients(name: str, data_dir=None, *, subdir: str | None = None,
                      train_fraction: float = 0.9, gap: int = 79):
    """Per-user arrays of a LEAF dataset.

    Returns (users, xs, ys, xs_test, ys_test): list of user names (train order) and per-user
    arrays (see ``to_arrays``). With train/ and test/ folders: LEAF's split; users without
    test data get empty test arrays. Otherwise every file of the folder is read and each
    user's windows split by ``time_split(train_fraction, gap)``.
    """
    if name not in LEAF_DIRS:
        raise ValueError(f"LEAF dataset must be one of {tuple(LEAF_DIRS)}, got {name!r}")
    folder = find_leaf(name, data_dir, subdir)
    if (folder / "train").is_dir():
        train = read_leaf_folder(folder / "train")
        test = read_leaf_folder(folder / "test") if (folder / "test").is_dir() else {}
    else:
        full = read_leaf_folder(folder)
        train, test = {}, {}
        for u, d in full.items():
            tr, te = time_split(len(d["x"]), train_fraction, gap)
            train[u] = {"x": d["x"][tr], "y": d["y"][tr]}
            test[u] = {"x": d["x"][te], "y": d["y"][te]}
    if not train:
        raise DataFormatError(f"{folder}: no users found in the LEAF files")
    users = list(train)
    xs, ys, xts, yts = [], [], [], []
    for u in users:
        x, y = to_arrays(name, train[u])
        d = test.get(u, {"x": [], "y": []})
        xt, yt = to_arrays(name, d)
        if len(xt) == 0:
            xt = np.zeros((0, *x.shape[1:]), x.dtype)
        xs.append(x); ys.append(y); xts.append(xt); yts.append(yt)
    return users, xs, ys, xts, yts


# ---------------------------------------------------------------- named datasets

@paper_defaults(
    model="shakespeare-lstm",
    rounds=6,
    training={"lr": 0.8, "steps": 400, "batch_size": 10},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 3, "option": "model"}},
    source="as shakespeare (SR-FCA paper and code), the speakers' windows cut or pooled")
def shakespeare_windows(key, *, num_clients: Size | None = None, max_train: Count | None = None,
                        max_test: Count | None = None, pool: bool = False,
                        data_dir=None):
    """LEAF Shakespeare with LEAF's split, one client per speaker (``num_clients`` drawn at
    random from the key, None = all), each speaker's training / test windows cut to its
    first ``max_train`` / ``max_test`` (None = all); ``pool``: one client holding every
    chosen speaker's windows (a centralised run of the same windows). x int32 [N, n, 80]
    tokens, y [N, n] the next character's token.

    num_clients: number of clients m
    max_train: training windows kept per speaker (none: all)
    max_test: test windows kept per speaker (none: all)
    pool: one client holding every chosen speaker's windows (a centralised run)
    data_dir: folder holding the LEAF ``shakespeare`` folder (else $FEDCLUST_DATA)"""
    from fedclust_jax.data.federated import from_client_lists
    from fedclust_jax.data.recipes import numpy_rng
    for name, v in (("num_clients", num_clients), ("max_train", max_train), ("max_test", max_test)):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be >= 1 or None, got {v}")
    users, *lists = load_leaf_clients("shakespeare", data_dir)
    if num_clients is not None:
        if num_clients > len(users):
            raise ValueError(f"num_clients must be in 1..{len(users)} for this copy, got {num_clients}")
        pick = np.sort(numpy_rng(key).choice(len(users), num_clients, replace=False))
        lists = [[a[i] for i in pick] for a in lists]
    xs, ys, xts, yts = ([a[:cut] for a in arrs] for arrs, cut in
                        zip(lists, (max_train, max_train, max_test, max_test)))
    if pool:
        xs, ys, xts, yts = ([np.concatenate(a)] for a in (xs, ys, xts, yts))
    return from_client_lists(xs, ys, xts, yts, None, task="classification",
                             num_classes=len(SHAKESPEARE_CHARS), dtype=np.int32)


@paper_defaults(
    model="shakespeare-lstm",
    model_args={"embed": 8, "hidden": 16, "layers": 1},
    rounds=10,
    training={"lr": 0.5, "steps": 5, "batch_size": 10},
    algorithms={"fedavg": {}, "local": {}, "ifca": {"num_clusters": 2, "option": "model"}},
    source="this project's CI text task: two Markov-chain writers, a small LSTM")
def toy_text(key, *, num_clients: Size = 6, num_clusters: Size = 2, n: Size = 40,
             n_test: Size = 20, length: Count = 80):
    """Shakespeare-shaped token windows without files (CI size): cluster c (client i in
    cluster i mod K) writes text from its own random first-order Markov chain over LEAF's
    80 symbols (4 successors a symbol); a client's windows slide over its own text.
    x int32 [N, n, length], y [N, n] the next token.

    num_clients: number of clients m
    num_clusters: number of true clusters k
    n: training examples per client
    n_test: test examples per client (None: as the construction gives)
    length: characters per window"""
    from fedclust_jax.data.federated import from_client_lists
    from fedclust_jax.data.recipes import numpy_rng
    rng, v = numpy_rng(key), len(SHAKESPEARE_CHARS)
    succ = rng.integers(0, v, (num_clusters, v, 4))
    cluster = np.arange(num_clients) % num_clusters
    steps = n + n_test + length
    text = np.empty((num_clients, steps + 1), np.int32)
    text[:, 0] = rng.integers(0, v, num_clients)
    choice = rng.integers(0, 4, (num_clients, steps))
    for t in range(steps):                          # the chain, all clients at once
        text[:, t + 1] = succ[cluster, text[:, t], choice[:, t]]
    win = np.lib.stride_tricks.sliding_window_view(text, length, axis=1)[:, :n + n_test]
    nxt = text[:, length:length + n + n_test]
    xs, xts = list(win[:, :n]), list(win[:, n:])
    ys, yts = list(nxt[:, :n]), list(nxt[:, n:])
    return from_client_lists(xs, ys, xts, yts, cluster, task="classification",
                             num_classes=v, dtype=np.int32)
