"""A sweep's checkpoint folder (``fedclust-jax sweep --checkpoint DIR``, ``run_sweep(...,
checkpoint=DIR)``): what a rerun of the same sweep skips and resumes.

Layout (program g and call k numbered from 1, as the progress lines say)::

    DIR/sweep.json                 the sweep it belongs to: a fingerprint of every point's
                                   configuration, the grid in words, points per call
    DIR/program-<g>-call-<k>.npz   the call in flight: every point's state ([c, R, ...],
                                   ``fedclust_jax.checkpoint``), its curve records so far
                                   and the rounds done, saved at the cadence
    DIR/program-<g>-call-<k>.json  the rows of a call that has ended

A call's rows are written when it ends (atomically), then its state file is removed; a
rerun reads the rows of every ended call, resumes the call whose state file is there, and
runs the rest. The fingerprint covers every configuration of every point (seeds, values,
rounds, the study's settings; not the data folder), so a changed grid or setting is refused
in one line before anything is built; points per call are kept from the first run, so a
resumed call has the shapes it was saved with.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from fedclust_jax import checkpoint as ckpt

MANIFEST = "sweep.json"
KIND = "fedclust_jax sweep checkpoint"
ROWS_KIND = "fedclust_jax sweep rows"


def fingerprint(items: list) -> str:
    """A short hash of JSON-able ``items`` (every point's label and configuration, each
    ``checkpoint.comparable``)."""
    text = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class SweepStore:
    """The folder ``path`` of the sweep with fingerprint ``key`` (``describe``: the grid in
    words, for the refusal of another sweep's folder). ``open`` checks or creates it."""

    def __init__(self, path: str, key: str, describe: str):
        self.path, self.key, self.describe = path, key, describe
        self.manifest = {"format": KIND, "version": 1, "fingerprint": key, "grid": describe,
                         "points_per_call": {}}

    # ---- the folder
    def check(self) -> bool:
        """Refuses (ValueError, one line) a path that is a file, a folder of other files, or
        the folder of another sweep; True when the folder holds this sweep's files."""
        where = f"--checkpoint {self.path!r}"
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"{where} is a file; a sweep keeps a folder of files there: give "
                             f"a folder, e.g. {self.path + '.d'!r}")
        manifest = os.path.join(self.path, MANIFEST)
        if not os.path.exists(manifest):
            if os.path.isdir(self.path) and any(not n.startswith(".") for n in os.listdir(self.path)):
                raise ValueError(f"{where} holds files that are not a sweep checkpoint; give an "
                                 f"empty or new folder")
            return False
        saved = ckpt.read_json(manifest, KIND)
        if saved.get("fingerprint") != self.key:
            what = (f"the same grid with other settings (rounds, data or parameters)"
                    if saved.get("grid") == self.describe else
                    f"another grid ({saved.get('grid')}; this sweep: {self.describe})")
            raise ValueError(f"{where} was written by a sweep of {what}; rerun the command "
                             f"that wrote it, or remove it or give another folder to start "
                             f"afresh")
        self.manifest = saved
        return True

    def open(self) -> "SweepStore":
        """``check``, then creates the folder and its manifest when new."""
        if not self.check():
            try:
                os.makedirs(self.path, exist_ok=True)
            except OSError as e:
                raise ValueError(f"--checkpoint {self.path!r}: cannot create the folder "
                                 f"({e.strerror or e}); choose another path") from None
            ckpt.write_json(os.path.join(self.path, MANIFEST), self.manifest)
        return self

    # ---- points per call
    def points_per_call(self, g: int) -> int | None:
        return self.manifest["points_per_call"].get(str(g))

    def set_points_per_call(self, g: int, c: int):
        if self.points_per_call(g) != c:
            self.manifest["points_per_call"][str(g)] = c
            ckpt.write_json(os.path.join(self.path, MANIFEST), self.manifest)

    # ---- calls
    def state_path(self, g: int, k: int) -> str:
        return os.path.join(self.path, f"program-{g + 1}-call-{k + 1}.npz")

    def rows_path(self, g: int, k: int) -> str:
        return os.path.join(self.path, f"program-{g + 1}-call-{k + 1}.json")

    def ended(self, g: int, k: int) -> list[dict] | None:
        """The rows of call k of program g when it has ended, else None."""
        path = self.rows_path(g, k)
        if not os.path.exists(path):
            return None
        saved = ckpt.read_json(path, ROWS_KIND)
        if saved.get("fingerprint") != self.key or not isinstance(saved.get("rows"), list):
            raise ckpt.not_a_checkpoint(path, "rows of another sweep")
        return saved["rows"]

    def ended_calls(self) -> list[list[dict]]:
        """The rows of every ended call, in the order the calls run (program, then call)."""
        if not os.path.isdir(self.path):
            return []
        found = sorted(tuple(int(x) for x in m.groups()) for m in
                       (re.fullmatch(r"program-(\d+)-call-(\d+)\.json", n)
                        for n in os.listdir(self.path)) if m)
        return [self.ended(g - 1, k - 1) for g, k in found]

    def end(self, g: int, k: int, rows: list[dict]):
        """Writes the rows of an ended call, then removes its state file."""
        ckpt.write_json(self.rows_path(g, k), {"format": ROWS_KIND, "fingerprint": self.key,
                                               "rows": rows})
        ckpt.clean(self.state_path(g, k))

    def end_kept(self, g: int, k: int):
        """An ended call read back: its state file, if a kill came between writing the rows
        and removing it, is removed."""
        if os.path.exists(self.state_path(g, k)):
            ckpt.clean(self.state_path(g, k))

    def call_config(self, g: int, k: int, points: list[int]) -> dict:
        """The configuration a call's state file is written with and checked against."""
        return {"sweep": self.key, "program": g + 1, "call": k + 1, "points": points}


def as_json(rows: list[dict]) -> list[dict]:
    """``rows`` as they read back from JSON (numpy scalars as Python numbers), so a row
    written before an interruption and one computed after print the same."""
    return json.loads(json.dumps(rows, default=ckpt.jsonable))
