"""A logged run on every sink of a command (``Tracked``; a sweep call's points:
``CallTracker``) and the file beside a checkpoint that lets a resumed run continue it.

``Tracked`` turns what the runner hands over after each chunk of rounds (the history
{name: [R, rounds, ...]}, "eval.<name>" records among it; a sweep call's records at the
curve rounds) into {step: {series: value}} and gives each step to every sink, once: steps up
to the last one logged (kept in the resume file) are skipped. Every call to a sink is
guarded: one that raises is said once (``Loggers.warn``) and dropped.
"""

from __future__ import annotations

import json
import os
import sys

from fedclust_jax.tracking.params import summary_values


def _guarded(method):
    """A method of ``Tracked`` whose own failure (not a sink's, which ``_each`` guards) is
    said once and stops this run's logging: the run itself goes on."""
    def call(self, *args):
        if self.broken:
            return None
        try:
            return method(self, *args)
        except Exception as e:
            self.broken = True
            if "tracking" not in self.loggers.failed:
                self.loggers.failed.add("tracking")
                print(f"fedclust-jax: warning: logging {self.run.name} failed "
                      f"({type(e).__name__}: {str(e).strip()[:200]}); the run goes on without "
                      f"its trackers", file=sys.stderr, flush=True)
            self.close("failed")
            return None
    call.__name__, call.__doc__ = method.__name__, method.__doc__
    return call

class RunInfo:
    """What a sink opens a run with: its name, group (None: none), parameters (flat
    {key: number, string or bool}) and, on resume, the state the sink returned before."""

    def __init__(self, name: str, group: str | None, params: dict, resume: dict | None = None):
        self.name, self.group, self.params, self.resume = name, group, params, resume


def resume_path(checkpoint: str) -> str:
    """The file beside a checkpoint that holds its logged runs: ``<stem>.trackers.json``."""
    stem, _ = os.path.splitext(checkpoint)
    return stem + ".trackers.json"


RESUME_KIND = "fedclust_jax tracked runs"


def _read_resume(path: str | None) -> dict:
    if path is None or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return saved.get("runs", {}) if saved.get("format") == RESUME_KIND else {}


def _write_resume(path: str, runs: dict):
    from fedclust_jax.checkpoint import write_json
    write_json(path, {"format": RESUME_KIND, "runs": runs}, what="trackers file")


class Tracked:
    """One logged run on every sink of ``loggers``: ``chunk`` after each chunk of rounds,
    ``records`` for a sweep call's curve points, ``finish`` with the result, ``close`` on
    an interrupt. Opened at the first chunk: a first chunk that starts past round 0 is a
    resume and reopens the runs ``resume_file`` names; steps up to the last one logged are
    skipped. Every call to a sink is guarded (``Loggers.warn``)."""

    def __init__(self, loggers: Loggers, run: RunInfo, resume_file: str | None,
                 eval_every: int | None, key: str):
        self.loggers, self.run, self.resume_file = loggers, run, resume_file
        self.eval_every, self.key = eval_every, key
        self.handles: dict[str, object] = {}
        self.opened, self.closed, self.broken, self.last = False, False, False, 0

    # ---- opening, guarding
    def _open(self, resuming: bool):
        if self.opened:
            return
        self.opened = True
        if not _is_first_process():
            return
        saved = _read_resume(self.resume_file).get(self.key, {}) if resuming else {}
        self.last = int(saved.get("step", 0)) if saved else 0
        for s in self.loggers.sinks:
            if s.key() in self.loggers.failed:
                continue
            info = RunInfo(self.run.name, self.run.group, self.run.params,
                           saved.get("sinks", {}).get(s.key()))
            try:
                self.handles[s.key()] = s.start(info)
            except Exception as e:
                self.loggers.warn(s, e)

    def _each(self, method: str, *args):
        for s in self.loggers.sinks:
            h = self.handles.get(s.key())
            if h is None or s.key() in self.loggers.failed:
                continue
            try:
                getattr(h, method)(*args)
            except Exception as e:
                self.loggers.warn(s, e)
                self.handles.pop(s.key(), None)

    def _save(self):
        if self.resume_file is None or not self.handles:
            return
        runs = _read_resume(self.resume_file)
        states = {}
        for k, h in self.handles.items():
            try:
                states[k] = h.state()
            except Exception:
                continue
        runs[self.key] = {"sinks": states, "step": self.last}
        try:
            _write_resume(self.resume_file, runs)
        except Exception as e:      # without it a resume starts new logged runs; said once
            if self.resume_file not in self.loggers.failed:
                self.loggers.failed.add(self.resume_file)
                print(f"fedclust-jax: warning: {self.resume_file} could not be written "
                      f"({type(e).__name__}: {str(e).strip()[:200]}); a resumed run will "
                      f"start new logged runs", file=sys.stderr, flush=True)

    def _steps(self, steps: dict):
        """Logs {step: {name: value}} in step order, those after the last step logged."""
        new = sorted(t for t in steps if t > self.last and steps[t])
        for t in new:
            self._each("log", t, steps[t])
        if new:
            self.last = new[-1]
        self._each("flush")
        self._save()

    # ---- what the runner calls
    @_guarded
    def chunk(self, start: int, stop: int, history: dict, spec: dict | None):
        """After the chunk of rounds start..stop-1 (``experiment.run_rounds``): history
        {name: [R, stop - start, ...]} as it came back, "eval.<name>" records included."""
        self._open(resuming=start > 0)
        if not self.handles:
            return
        from fedclust_jax import loop
        import numpy as np
        steps: dict[int, dict] = {}
        scalars = {k: np.asarray(v) for k, v in history.items() if not k.startswith("eval.")}
        for name, v in scalars.items():
            if v.ndim != 2 or not np.issubdtype(v.dtype, np.number):
                continue
            for i in range(v.shape[1]):
                _put(steps.setdefault(start + 1 + i, {}), name, v[:, i])
        rounds = loop.curve_rounds(stop, self.eval_every, start)
        if rounds:
            _, records = loop.split_history(history, rounds, start)
            self._curves(steps, rounds, records, spec)
        self._steps(steps)

    @_guarded
    def records(self, start: int, stop: int, records: dict, spec: dict | None):
        """A sweep call's chunk: this point's records {name: [R, T, ...]} at the curve
        rounds of start..stop-1, "round.<name>" for the algorithm's round metrics."""
        self._open(resuming=start > 0)
        if not self.handles:
            return
        import numpy as np
        rounds = _curve_rounds(start, stop, self.eval_every)
        steps: dict[int, dict] = {}
        own = {k: np.asarray(v) for k, v in records.items() if k.startswith("round.")}
        evals = {k: v for k, v in records.items() if not k.startswith("round.")}
        if rounds and evals:
            self._curves(steps, rounds, evals, spec)
        for key, v in own.items():
            for i, t in enumerate(rounds):
                _put(steps.setdefault(t, {}), key[len("round."):], v[:, i])
        self._steps(steps)

    def _curves(self, steps: dict, rounds: list[int], records: dict, spec):
        from fedclust_jax import loop
        import numpy as np
        restarts = int(np.asarray(next(iter(records.values()))).shape[0])
        for r in range(restarts):
            curves = loop.curves_from_records({k: np.asarray(v)[r] for k, v in records.items()},
                                              rounds, spec or {"kind": "clients"})
            for name, values in curves.items():
                if name == "round" or not values or isinstance(values[0], list):
                    continue
                for t, x in zip(rounds, values):
                    steps.setdefault(t, {})[_series(name, r, restarts)] = float(x)

    @_guarded
    def finish(self, result: dict):
        """The summary (``summary_values``) and the end of the logged run."""
        self._open(resuming=True)
        self._each("summary", summary_values(result))
        self._save()
        self.close("finished")

    def close(self, status: str = "finished"):
        if self.closed:
            return
        self.closed = True
        self._each("close", status)
        self.handles.clear()


class CallTracker:
    """The logged runs of a sweep call's points (``Loggers.call``); ``records`` takes the
    call's records {name: [c, R, T, ...]} and gives each point its own."""

    def __init__(self, runs: list[Tracked], resume_file: str | None):
        self.runs, self.resume_file = runs, resume_file

    def records(self, start: int, stop: int, records: dict, spec: dict | None):
        import numpy as np
        for j, run in enumerate(self.runs):
            run.records(start, stop, {k: np.asarray(v)[j] for k, v in records.items()}, spec)

    def finish(self, results: list[dict]):
        """Each point's summary: {"metrics": ..., "wall_s": ...} in call order."""
        for run, result in zip(self.runs, results):
            run.finish(result)
        if self.resume_file is not None and os.path.exists(self.resume_file):
            os.remove(self.resume_file)     # the call's rows are kept: nothing to resume

    def close(self, status: str):
        for run in self.runs:
            run.close(status)


def _is_first_process() -> bool:
    """Only process 0 of a multi-host run logs."""
    if "jax" not in sys.modules:
        return True
    import jax
    return jax.process_index() == 0


def _curve_rounds(start: int, stop: int, every: int | None) -> list[int]:
    from fedclust_jax import loop
    return loop.curve_rounds(stop, every, start)


def _series(name: str, r: int, restarts: int) -> str:
    return name if restarts == 1 else f"{name}/restart_{r}"


def _put(step: dict, name: str, per_restart):
    """Each restart's value of a round metric at one step."""
    values = list(per_restart)
    for r, x in enumerate(values):
        step[_series(name, r, len(values))] = float(x)
