"""Checkpoint files: the runner's state between chunks of rounds, and the small JSON files a
resumable sweep keeps; every write atomic, every read checked (numpy .npz and JSON, no pickle).

A checkpoint (``save`` / ``restore``) holds the algorithm states of every restart (one pytree
with leading axis R, or [points, R] for a sweep's call), the per-round history so far, the
rounds done, the run's configuration and, once the run has ended, its result (``attach``).
A run resumed from it continues with the same keys and so equals the uninterrupted run.

Atomic: a file is written to a temporary file in the same folder (a random hidden name, so
no file of the user's is touched), flushed to disk (``fsync``) and renamed over its path; a
process killed at any moment leaves the previous file whole, and Ctrl-C or SIGTERM during a
write waits for it (``interrupts_wait``). ``snapshot`` copies a state to the host and
``write`` writes such a copy later: the runner keeps the last finished chunk's and writes it
when interrupted. A write that fails (disk full,
no permission) raises ``SaveFailed``, one line naming the round the file still holds.
Checked: a file that is not one of ours, or is truncated or damaged, is refused with one line
(``not_a_checkpoint``) saying how to start afresh.

Several processes (``jax.process_count() > 1``) write one file each, holding that process's
own shards of every state leaf (``addressable_shards``, each with its index), the history
and the header: ``<stem>.p<i>-of-<n>.<a|b><ext>``. Two slots per process: a save goes to
the slot that does not hold the process's newest round, so a machine lost during a save
leaves every process its previous round; ``restore`` gathers which rounds each process
holds (``multihost_utils.process_allgather``) and resumes from the newest round that every
process holds. Nothing is gathered onto one host (a 1M-client state stays split), no
shared file system is needed (each process reads only its own files) and the format is
the one ``load`` already reads. Orbax (installed with flax) was not chosen: its API and
on-disk layout have changed between the releases that pair with jax 0.10 to 0.12, it
brings TensorStore and an asynchronous commit protocol the runner does not need (a save
takes a small fraction of the cadence, see benchmarks/README.md), and bfloat16 and PRNG-key
leaves would need handling on its side as well. A resume must use the same number of
processes and the same device layout; another is refused in one line.

It imports ``core.sharding`` (the host gather of the single-process path), so it sits at
core's layer (tests/test_layers.py).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import sys
import tempfile
import threading
import zipfile
from typing import NamedTuple

import jax
import numpy as np

FORMAT = "fedclust_jax checkpoint"
VERSION = 2


class SaveFailed(RuntimeError):
    """A checkpoint or result file could not be written; the message is one line naming the
    file, the reason, what the file still holds and what to do."""


# ---- atomic files ---------------------------------------------------------------------------

@contextlib.contextmanager
def interrupts_wait():
    """SIGINT and SIGTERM arriving inside the block wait for its end, then reach the handler
    that was in force (the command line's raises KeyboardInterrupt): a save is never cut by
    an interrupt, a second Ctrl-C included. Only Python-level handlers are held back (a
    signal left to the operating system acts at once, as before); off the main thread
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, previous = [], {}
    for s in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(s)
        if callable(handler):
            previous[s] = handler
            signal.signal(s, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signum, frame = held[0]
            previous[signum](signum, frame)


def write_atomic(path: str, write, what: str = "checkpoint") -> None:
    """``write(file)`` into a hidden temporary file beside ``path``, fsync, rename over
    ``path``. OSError (disk full, permission) -> ``SaveFailed``; the temporary file is
    removed and ``path`` keeps its previous content. An interrupt waits for the write to
    end (``interrupts_wait``)."""
    with interrupts_wait():
        _write_atomic(path, write, what)


def _write_atomic(path: str, write, what: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=folder)
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise SaveFailed(f"{what} {path}: writing failed ({e.strerror or e}); "
                         f"{_still_holds(path, what)}; free space or fix the folder's "
                         f"permissions, then rerun the same command") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def file_mode() -> int:
    """The permissions a new file gets from the process's umask (``mkstemp`` makes 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _still_holds(path: str, what: str) -> str:
    if not os.path.exists(path):
        return "nothing was saved before"
    if what != "checkpoint":
        return "the previous file is kept"
    try:
        return f"it still holds round {read_meta(path)['rounds_done']}"
    except ValueError:
        return "the previous file is kept"


def write_json(path: str, obj, what: str = "checkpoint") -> None:
    """``obj`` as JSON at ``path``, atomically (``write_atomic``)."""
    text = json.dumps(obj, indent=1, default=jsonable).encode()
    write_atomic(path, lambda f: f.write(text), what)


def read_json(path: str, kind: str) -> dict:
    """The JSON object at ``path`` whose "format" is ``kind``; a truncated, foreign or
    unreadable file is refused with one line (``not_a_checkpoint``)."""
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, PermissionError):
            raise ValueError(f"checkpoint {path!r} cannot be read ({e.strerror})") from None
        raise not_a_checkpoint(path, "truncated or not JSON") from None
    if not isinstance(obj, dict) or obj.get("format") != kind:
        raise not_a_checkpoint(path, f"not a {kind} file")
    return obj


def jsonable(v):
    """``json.dumps``' ``default``: numpy scalars and arrays as Python numbers and lists."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


# ---- the runner's state -------------------------------------------------------------------

def files(path: str) -> list[str]:
    """This process's checkpoint files of ``path``: ``[path]`` with one process, else its
    two slots ``<stem>.p<i>-of-<n>.a<ext>`` and ``.b<ext>``."""
    n = jax.process_count()
    if n == 1:
        return [path]
    stem, ext = os.path.splitext(path)
    return [f"{stem}.p{jax.process_index()}-of-{n}.{slot}{ext or '.npz'}" for slot in "ab"]


def exists(path: str) -> bool:
    """Whether this process has a checkpoint file of ``path`` (any slot)."""
    return any(os.path.exists(f) for f in files(path))


class Snapshot(NamedTuple):
    """What ``write`` puts in a checkpoint file, held on the host: ``path`` (the checkpoint's
    path as given), the header ``meta`` and the named numpy ``arrays`` (copies: the device
    buffers they came from may be donated to the next chunk of rounds)."""
    path: str
    meta: dict
    arrays: dict

    @property
    def rounds_done(self) -> int:
        return int(self.meta["rounds_done"])


def snapshot(path: str, states, history: dict, rounds_done: int, config: dict, *,
             extra: dict | None = None) -> Snapshot:
    """A host copy of ``states`` (any pytree of arrays; bfloat16 kept as float32, exact;
    PRNG keys as their key data), ``history`` {name: array}, the rounds done, ``config`` and
    ``extra`` (JSON-able header entries). One process: the whole arrays. Several: this
    process's own shards, each with its index (module docstring); every process calls it
    together. The runner takes one after every chunk of rounds, so an interrupt can write
    the last finished chunk (``write``) although the device state went on."""
    leaves = jax.tree.leaves(states)
    keys = [i for i, a in enumerate(leaves) if _is_key(a)]
    data = [jax.random.key_data(a) if _is_key(a) else a for a in leaves]
    meta = {"format": FORMAT, "version": VERSION, "rounds_done": rounds_done, "config": config,
            "keys": keys, **(extra or {})}
    arrays = {f"history_{k}": np.array(v) for k, v in history.items()}
    if jax.process_count() == 1:
        from fedclust_jax.core.sharding import to_host
        arrays.update({f"state_{i}": _storable(a, copy=True)
                       for i, a in enumerate(to_host(data))})
    else:
        shards = []
        for i, a in enumerate(data):
            seen = {}
            for s in a.addressable_shards:
                seen.setdefault(_index_key(s.index, a.shape), s)
            for j, (index, s) in enumerate(seen.items()):
                arrays[f"state_{i}_{j}"] = _storable(s.data, copy=True)
                shards.append([i, j, index])
        meta.update(process=jax.process_index(), process_count=jax.process_count(),
                    shards=shards, shapes=[list(a.shape) for a in data])
    return Snapshot(path, meta, arrays)


def write(snap: Snapshot) -> None:
    """Writes ``snap`` atomically: to its path with one process, to the process's older
    slot with several. Raises ``SaveFailed`` when the file cannot be written; an interrupt
    arriving meanwhile waits for the write (``write_atomic``)."""
    target = snap.path if jax.process_count() == 1 else _older_slot(snap.path)
    header = np.frombuffer(json.dumps(snap.meta, default=str).encode(), np.uint8)
    write_atomic(target, lambda f: np.savez(f, meta=header, **snap.arrays))


def save(path: str, states, history: dict, rounds_done: int, config: dict, *,
         extra: dict | None = None):
    """``write(snapshot(...))``: the states, history, rounds done, config and ``extra`` of a
    run saved atomically (see ``snapshot``). Raises ``SaveFailed`` when the file cannot be
    written."""
    write(snapshot(path, states, history, rounds_done, config, extra=extra))


def write_on_interrupt(last: Snapshot | None, saved_round: int | None) -> int | None:
    """What a runner does on an interrupt: writes ``last`` (the snapshot of its last
    finished chunk, or None) when the file holds an older round, and returns the round the
    file then holds. A second interrupt waits for the write, then is spent here (the run is
    ending anyway); a write that fails says so on stderr and the file keeps its round."""
    if last is None or last.rounds_done == saved_round:
        return saved_round
    try:
        write(last)
    except KeyboardInterrupt:
        pass
    except SaveFailed as e:
        print(e, file=sys.stderr, flush=True)
    return held_round(last.path)


def held_round(path: str) -> int | None:
    """The round this process's newest checkpoint file of ``path`` holds; None when there
    is none readable."""
    rounds = [r for r in (_round_or_none(f) for f in files(path)) if r is not None]
    return max(rounds) if rounds else None


def attach(path: str, **entries):
    """Adds JSON-able ``entries`` (e.g. the run's result) to the header of this process's
    newest checkpoint file of ``path``, atomically."""
    target = _newest_slot(path)
    with _open(target) as f:
        meta = _meta(target, f)
        arrays = {k: f[k] for k in f.files if k != "meta"}
    meta.update(entries)
    header = np.frombuffer(json.dumps(meta, default=jsonable).encode(), np.uint8)
    write_atomic(target, lambda f: np.savez(f, meta=header, **arrays))


def restore(path: str, like_states, config: dict):
    """(states shaped and placed like ``like_states``, history, rounds_done, header), or
    None when there is no checkpoint. Refuses (ValueError, one line) a file of another
    configuration ("rounds" may differ: a run may be extended), another process count or
    device layout. Several processes: all call it together (module docstring)."""
    if jax.process_count() == 1:
        if not os.path.exists(path):
            return None
        return load(path, like_states, config, with_meta=True)
    from jax.experimental import multihost_utils
    mine = [_round_or_none(f) for f in files(path)]
    held = np.asarray([-1 if r is None else r for r in mine], np.int64)
    every = np.asarray(multihost_utils.process_allgather(held)).reshape(jax.process_count(), 2)
    if (every < 0).all():
        return None
    common = set(every[0].tolist())
    for row in every[1:]:
        common &= set(row.tolist())
    common.discard(-1)
    if not common:
        raise not_a_checkpoint(path, "its processes' files hold no round in common; remove "
                               "them all")
    target = files(path)[mine.index(max(common))]
    return load(target, like_states, config, with_meta=True)


def load(path: str, like_states, config: dict, *, with_meta: bool = False):
    """(states shaped like ``like_states``, history, rounds_done) from one file (plus its
    header with ``with_meta``); refuses one of another configuration, or a file that is not
    a checkpoint or is truncated."""
    with _open(path) as f:
        meta = _meta(path, f)
        check_config(path, meta, config)
        leaves, treedef = jax.tree.flatten(like_states)
        try:
            if "shards" in meta:
                restored = _sharded_leaves(path, f, meta, leaves)
            else:
                missing = [f"state_{i}" for i in range(len(leaves)) if f"state_{i}" not in f.files]
                if missing:
                    raise not_a_checkpoint(path, f"it lacks {missing[0]} of this run's state")
                restored = [_restored(f[f"state_{i}"], like, i in meta["keys"])
                            for i, like in enumerate(leaves)]
            history = {k[len("history_"):]: f[k] for k in f.files if k.startswith("history_")}
        except (OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
            raise not_a_checkpoint(path, f"truncated or damaged: {type(e).__name__}") from None
    out = (jax.tree.unflatten(treedef, restored), history, int(meta["rounds_done"]))
    return (*out, meta) if with_meta else out


def comparable(config: dict) -> dict:
    """A run's configuration without what may change between a run and its resumption:
    "rounds" (a run may be extended) and the data folder (the data may have moved)."""
    out = {k: v for k, v in json.loads(json.dumps(config, default=str)).items() if k != "rounds"}
    if isinstance(out.get("data"), dict):
        out["data"] = {k: v for k, v in out["data"].items() if k != "data_dir"}
    return out


def check_config(path: str, meta: dict, config: dict):
    """Refuses (ValueError, one line naming what differs) the checkpoint ``path`` with header
    ``meta`` when it was written by another configuration than ``config``."""
    saved, wanted = comparable(meta["config"]), comparable(config)
    if saved != wanted:
        changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
        raise ValueError(f"checkpoint {path} was written by another configuration (it differs "
                         f"in {', '.join(changed)}); rerun the command that wrote it, or remove "
                         f"it or choose another checkpoint path to start afresh")


def _restored(a, like, key: bool):
    if key:
        return jax.random.wrap_key_data(a)
    return jax.numpy.asarray(a, like.dtype)


def _sharded_leaves(path: str, f, meta: dict, leaves) -> list:
    """This process's shards as global arrays placed like ``leaves`` (several processes)."""
    if meta.get("process_count") != jax.process_count() or meta.get("process") != jax.process_index():
        raise ValueError(f"checkpoint {path} was written by process {meta.get('process')} of "
                         f"{meta.get('process_count')}; resume with the same number of processes")
    stored = {}
    for i, j, index in meta["shards"]:
        stored.setdefault(i, {})[_index_key_from_json(index)] = f"state_{i}_{j}"
    out = []
    for i, like in enumerate(leaves):
        key = i in meta["keys"]
        target = jax.random.key_data(like) if key else like
        shape = tuple(meta["shapes"][i])
        if shape != tuple(target.shape):
            raise not_a_checkpoint(path, f"state leaf {i} has shape {shape}, this run {target.shape}")
        arrays = []
        for device, index in target.sharding.addressable_devices_indices_map(shape).items():
            name = stored.get(i, {}).get(_index_key(index, shape))
            if name is None:
                raise ValueError(f"checkpoint {path} was written with another device layout; "
                                 f"resume with the same --devices and processes")
            arrays.append(jax.device_put(np.asarray(f[name], target.dtype), device))
        whole = jax.make_array_from_single_device_arrays(shape, target.sharding, arrays)
        out.append(jax.jit(jax.random.wrap_key_data, out_shardings=like.sharding)(whole)
                   if key else whole)
    return out


def _index_key(index, shape) -> tuple:
    """A shard's index (a tuple of slices) as ((start, stop), ...) over every dimension."""
    out = []
    for d, n in enumerate(shape):
        s = index[d] if d < len(index) else slice(None)
        start, stop, _ = s.indices(n)
        out.append((start, stop))
    return tuple(out)


def _index_key_from_json(index) -> tuple:
    return tuple((int(a), int(b)) for a, b in index)


def _round_or_none(path: str) -> int | None:
    try:
        return read_meta(path)["rounds_done"] if os.path.exists(path) else None
    except ValueError:
        return None


def _older_slot(path: str) -> str:
    """The slot a save overwrites: a missing or unreadable one, else the older round."""
    slots = files(path)
    rounds = [_round_or_none(f) for f in slots]
    return slots[min(range(len(slots)), key=lambda s: -1 if rounds[s] is None else rounds[s])]


def _newest_slot(path: str) -> str:
    slots = files(path)
    rounds = [_round_or_none(f) for f in slots]
    return slots[max(range(len(slots)), key=lambda s: -1 if rounds[s] is None else rounds[s])]


def clean(path: str) -> None:
    """Removes this process's checkpoint files of ``path`` and any temporary file a killed
    save left beside them."""
    for f in files(path):
        for stale in glob.glob(os.path.join(glob.escape(os.path.dirname(os.path.abspath(f))),
                                            f".{glob.escape(os.path.basename(f))}.*.tmp")):
            os.remove(stale)
        if os.path.exists(f):
            os.remove(f)


def not_a_checkpoint(path: str, why: str) -> ValueError:
    """The one-line refusal of a file that is not a fedclust_jax checkpoint."""
    return ValueError(f"checkpoint {path!r} is not a fedclust_jax checkpoint ({why}); to start "
                      f"afresh remove it or give --checkpoint another path")


@contextlib.contextmanager
def _open(path: str):
    """``np.load`` of a checkpoint without pickle, closed on leaving; any other file is
    ``not_a_checkpoint``."""
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise ValueError(f"checkpoint {path!r} cannot be read ({e.strerror or e})") from None
    with fh:
        try:
            f = np.load(fh, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile):
            raise not_a_checkpoint(path, "not an .npz archive, or truncated") from None
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise not_a_checkpoint(path, "a single .npy array, not an .npz archive")
        with f:
            yield f


def _meta(path: str, f) -> dict:
    """The checkpoint's header (rounds_done, config, keys, ...), checked."""
    if "meta" not in f.files:
        raise not_a_checkpoint(path, "an .npz archive without its header")
    try:
        meta = json.loads(bytes(f["meta"]).decode())
    except (ValueError, UnicodeDecodeError, OSError, EOFError, zipfile.BadZipFile):
        raise not_a_checkpoint(path, "its header is unreadable") from None
    if (not isinstance(meta, dict) or not isinstance(meta.get("rounds_done"), int)
            or not isinstance(meta.get("config"), dict) or not isinstance(meta.get("keys"), list)):
        raise not_a_checkpoint(path, "its header lacks rounds_done, config or keys")
    if meta.get("format", FORMAT) != FORMAT or meta.get("version", 1) > VERSION:
        raise not_a_checkpoint(path, f"format {meta.get('format')!r} version "
                               f"{meta.get('version')!r}; this package reads {FORMAT!r} up to "
                               f"version {VERSION}")
    return meta


def read_meta(path: str) -> dict:
    """The header of the checkpoint at ``path``: {"rounds_done": int, "config": dict,
    "keys": list, ...} ("result" once the run has ended); ValueError (one line,
    ``not_a_checkpoint``) for any other file, read without pickle."""
    with _open(path) as f:
        return _meta(path, f)


def _storable(a, copy: bool = False) -> np.ndarray:
    """``a`` as numpy in a dtype .npz reads back without pickle (bfloat16 -> float32);
    ``copy``: never a view of a device buffer."""
    a = np.array(a) if copy else np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def _is_key(a) -> bool:
    return hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
