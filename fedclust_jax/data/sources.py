"""Where real data comes from: local files (MNIST IDX, CIFAR-10 .npz), TensorFlow Datasets
(``tfds.data_source``, no TensorFlow needed) and scikit-learn's bundled 8x8 digits.

Every image loader returns ``(x_train, y_train, x_test, y_test)`` with images as float32
``[n, H, W, C]`` in [0, 1] and labels int32 ``[n]``.

Pointing at data: a ``data_dir`` argument, else the ``FEDCLUST_DATA`` environment variable.
Inside that root a dataset is looked for in ``<root>/<name>/`` and then in ``<root>/``
itself (the root only for MNIST and CIFAR-10; Fashion-MNIST in ``<root>/fashion_mnist/``
or ``<root>/fashion-mnist/``). Missing data raises ``DataNotFoundError`` (a FileNotFoundError)
naming the dataset, every place looked and how to provide it; unreadable data raises
``DataFormatError`` (a ValueError). Nothing here touches the network unless
``download=True`` is passed.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

ENV_VAR = "FEDCLUST_DATA"

FILES_DOC = """
    data_dir: folder holding the dataset's files (else $FEDCLUST_DATA);
    source: where the images come from, "auto" (local files, then TFDS), "local" or "tfds";
    download: let TFDS download the data when the network allows."""
TFDS_NAMES = ("mnist", "fashion_mnist", "cifar10", "emnist")
IDX_NAMES = ("mnist", "fashion_mnist")
SOURCES = ("auto", "local", "tfds")

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
              "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}


class DataNotFoundError(FileNotFoundError):
    """A dataset is not where it was looked for; the message says how to provide it."""


class DataFormatError(ValueError):
    """A dataset file exists but cannot be read as the expected format."""


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """``data_dir`` if given, else ``$FEDCLUST_DATA``, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else None


def tfds_hint(name: str, data_dir: Path | None) -> str:
    target = str(data_dir) if data_dir is not None else "/path/to/data"
    return (f"On a machine with internet run: python -c \"import tensorflow_datasets as tfds; "
            f"tfds.data_source('{name}', download=True, data_dir='{target}')\" (or pass "
            f"download=True), then point data_dir or ${ENV_VAR} at that folder")


def _candidate_dirs(name: str, root: Path) -> list[Path]:
    """``<root>/<name>``, ``<root>/<name with dashes>``, and for mnist / cifar10 the root
    itself (not for fashion_mnist, whose IDX files share MNIST's names)."""
    out = [root / a for a in dict.fromkeys([name, name.replace("_", "-")])]
    return out + ([root] if name in ("mnist", "cifar10") else [])


def missing(name: str, looked: list, how: str) -> DataNotFoundError:
    where = ", ".join(str(p) for p in looked) if looked else \
        f"nowhere (no data_dir given and ${ENV_VAR} unset)"
    return DataNotFoundError(f"dataset {name!r} not found; looked in: {where}. {how}")


# ---------------------------------------------------------------- IDX (MNIST, Fashion-MNIST)

def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads one IDX file (raw or .gz): 2 zero bytes, a type byte, ndim, ndim big-endian
    uint32 sizes, then the data. Returns the array with its stored dtype (native order)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataFormatError(f"cannot read IDX file {path}: {e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataFormatError(f"{path} is not an IDX file (bad magic {raw[:4]!r})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFormatError(f"{path}: truncated IDX header")
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", ndim, 4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    size = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != size:
        raise DataFormatError(f"{path}: IDX header says shape {shape} ({size} bytes) but "
                              f"{len(raw) - header} data bytes follow")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Writes ``array`` (uint8) as an IDX file, gzipped when ``path`` ends in .gz."""
    a = np.ascontiguousarray(array, np.uint8)
    header = bytes([0, 0, 0x08, a.ndim]) + np.asarray(a.shape, ">u4").tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + a.tobytes())


def find_idx(name: str, root: Path) -> dict[str, Path] | None:
    """The four IDX files of ``name`` under ``root`` (raw or .gz), or None if incomplete."""
    for d in _candidate_dirs(name, root):
        found = {}
        for key, stem in _IDX_FILES.items():
            for cand in (d / (stem + ".gz"), d / stem):
                if cand.is_file():
                    found[key] = cand
                    break
        if len(found) == 4:
            return found
    return None


def load_idx_dataset(name: str, root: Path):
    """MNIST-layout IDX files under ``root`` -> (x_train, y_train, x_test, y_test)."""
    files = find_idx(name, root)
    if files is None:
        raise missing(name, _candidate_dirs(name, root),
                      f"Put the four IDX files ({', '.join(_IDX_FILES.values())}, raw or .gz) "
                      f"there. " + tfds_hint(name, root))
    arrays = {k: read_idx(p) for k, p in files.items()}
    for split in ("train", "test"):
        xi, yi = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if xi.ndim != 3 or yi.ndim != 1 or len(xi) != len(yi):
            raise DataFormatError(f"{name} {split}: images {xi.shape} and labels {yi.shape} "
                                  f"do not match ([n, H, W] and [n])")
    to_x = lambda a: (a.astype(np.float32) / 255.0)[..., None]
    return (to_x(arrays["train_images"]), arrays["train_labels"].astype(np.int32),
            to_x(arrays["test_images"]), arrays["test_labels"].astype(np.int32))


# ---------------------------------------------------------------- CIFAR-10 arrays

def load_cifar10_npz(root: Path):
    """CIFAR-10 from ``cifar10.npz`` (or any single .npz) in ``<root>/cifar10/`` or ``<root>``
    with arrays x_train, y_train, x_test, y_test (uint8 [n, 32, 32, 3] or [n, 3, 32, 32];
    labels [n] or [n, 1])."""
    looked = []
    for d in _candidate_dirs("cifar10", root):
        looked.append(d)
        cands = [d / "cifar10.npz"] if (d / "cifar10.npz").is_file() else sorted(d.glob("*.npz"))
        cands = [c for c in cands if c.is_file()]
        if d == root:
            cands = [c for c in cands if c.name == "cifar10.npz"]
        if not cands:
            continue
        try:
            with np.load(cands[0]) as z:
                arrs = [np.asarray(z[k]) for k in ("x_train", "y_train", "x_test", "y_test")]
        except (OSError, KeyError, ValueError) as e:
            raise DataFormatError(f"cannot read CIFAR-10 arrays from {cands[0]}: {e}; expected "
                                  f"an .npz with x_train, y_train, x_test, y_test") from None
        out = []
        for x, y in ((arrs[0], arrs[1]), (arrs[2], arrs[3])):
            if x.ndim == 4 and x.shape[1] == 3 and x.shape[-1] != 3:
                x = x.transpose(0, 2, 3, 1)
            y = y.reshape(-1)
            if x.ndim != 4 or x.shape[-1] != 3 or len(x) != len(y):
                raise DataFormatError(f"{cands[0]}: CIFAR-10 images {x.shape} / labels {y.shape} "
                                      f"are not [n, 32, 32, 3] / [n]")
            scale = 255.0 if x.dtype == np.uint8 or x.max() > 1.0 else 1.0
            out += [x.astype(np.float32) / scale, y.astype(np.int32)]
        return tuple(out)
    raise missing("cifar10", looked, "Save cifar10.npz with x_train, y_train, x_test, y_test "
                  "there. " + tfds_hint("cifar10", root))


# ---------------------------------------------------------------- TensorFlow Datasets

def _import_tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError("reading through TensorFlow Datasets needs the optional package "
                          "tensorflow-datasets: pip install 'fedclust_jax[tfds]' (or use local "
                          "files: see fedclust_jax.data.sources)") from None
    return tfds


def _read_source(ds, image_key="image", label_key="label"):
    n = len(ds)
    xs, ys = [], []
    step = 4096
    for start in range(0, n, step):
        idx = list(range(start, min(n, start + step)))
        try:
            batch = ds.__getitems__(idx)
        except (TypeError, AttributeError, NotImplementedError):
            batch = [ds[i] for i in idx]
        xs += [np.asarray(e[image_key]) for e in batch]
        ys += [int(e[label_key]) for e in batch]
    x = np.stack(xs) if xs else np.zeros((0, 1, 1, 1), np.uint8)
    return x, np.asarray(ys, np.int32)


def load_tfds(name: str, data_dir: Path | None = None, download: bool = False, config=None):
    """``name`` through ``tfds.data_source`` (random-access ArrayRecord, no TensorFlow).

    Without ``download`` a missing ``<data_dir>/<name>`` fails at once, before tfds is
    asked (so no network access is ever attempted). ``config``: e.g. "byclass" for emnist
    (62 classes). EMNIST images, stored transposed by tfds as in the original files, are
    transposed back to upright.
    """
    if name not in TFDS_NAMES:
        raise ValueError(f"tfds dataset must be one of {TFDS_NAMES}, got {name!r}")
    tfds_dir = data_dir
    if not download:
        if tfds_dir is None:
            tfds_dir = Path(os.environ.get("TFDS_DATA_DIR",
                                           Path.home() / "tensorflow_datasets")).expanduser()
        if not (tfds_dir / name).is_dir():
            raise missing(name, [tfds_dir / name], tfds_hint(name, data_dir))
    tfds = _import_tfds()
    full = f"{name}/{config}" if config else name
    try:
        splits = [tfds.data_source(full, split=s, data_dir=None if tfds_dir is None else
                                   str(tfds_dir), download=download) for s in ("train", "test")]
    except Exception as e:  # tfds raises assorted errors for absent/unprepared data
        raise missing(name, [tfds_dir if tfds_dir is not None else "tfds default dir"],
                      f"tfds could not open it ({type(e).__name__}: {str(e)[:200]}). "
                      + tfds_hint(name, data_dir)) from None
    out = []
    for ds in splits:
        x, y = _read_source(ds)
        if x.ndim == 3:
            x = x[..., None]
        if name == "emnist":  # tfds keeps EMNIST's transposed storage; upright it
            x = x.transpose(0, 2, 1, 3)
        out += [x.astype(np.float32) / 255.0, y]
    return tuple(out)


# ---------------------------------------------------------------- dispatch

def load_images(name: str, data_dir=None, *, source: str = "auto", download: bool = False):
    """(x_train, y_train, x_test, y_test) of a standard image dataset: images float32
    [n, H, W, C] in [0, 1] (MNIST and Fashion-MNIST [n, 28, 28, 1], CIFAR-10 [n, 32, 32, 3],
    EMNIST [n, 28, 28, 1] upright), labels int32 [n]; the dataset's own train / test split.

    name: mnist, fashion_mnist, cifar10, emnist (emnist only through tfds, config byclass).
    data_dir: the data root (None: ``$FEDCLUST_DATA``); local files are looked for in
    ``<root>/<name>/`` (also ``<root>/fashion-mnist/``) and, for mnist and cifar10, in
    ``<root>`` itself: the four MNIST IDX files (raw or .gz) or ``cifar10.npz`` (arrays
    x_train, y_train, x_test, y_test).
    source: "local" (IDX / .npz files), "tfds", or "auto" (local files if present, else a
    prepared tfds copy, else tfds download when ``download``).
    Missing data raises ``DataNotFoundError`` (a FileNotFoundError) naming every place
    looked and how to provide the files; unreadable files raise ``DataFormatError``.
    """
    if name not in TFDS_NAMES:
        raise ValueError(f"image dataset must be one of {TFDS_NAMES}, got {name!r}")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    root = resolve_data_dir(data_dir)
    local_ok = name in IDX_NAMES or name == "cifar10"
    if source == "local" or (source == "auto" and local_ok and root is not None and not download):
        if not local_ok:
            raise ValueError(f"{name} has no local-file reader; use source='tfds'")
        if root is None:
            raise missing(name, [], f"Pass data_dir or set ${ENV_VAR}. " + tfds_hint(name, None))
        try:
            return load_cifar10_npz(root) if name == "cifar10" else load_idx_dataset(name, root)
        except DataNotFoundError:
            if source == "local" or not (root / name).is_dir():
                raise
    config = "byclass" if name == "emnist" else None
    return load_tfds(name, root, download=download, config=config)


def load_digits_images(scale: bool = True):
    """scikit-learn's bundled 8x8 digits (1,797 images, no download): x float32
    [1797, 8, 8, 1] in [0, 1] (raw values 0..16 divided by 16), y int32 [1797]."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = d.images.astype(np.float32)[..., None]
    return (x / 16.0 if scale else x), d.target.astype(np.int32)
