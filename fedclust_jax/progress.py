"""Progress reports, the choice of how many rounds each compiled chunk runs, and when a run
saves its checkpoint.

``ChunkSchedule`` picks chunk lengths from measured wall time so that a report comes at
least every ``PROGRESS_EVERY_S`` seconds (or after every round when one round is slower):
the first two chunks are one round each (the first compiles, the second measures a
round), then chunks last about ``target_s`` seconds; at most three chunk lengths are
compiled (1, the measured length, and a remainder). When the rest of the run, one round a
chunk, is expected to take less time than compiling the first chunk took (the first
chunk's time less the second's), the rest stays at one round a chunk: short runs compile
one program. A fixed ``rounds_per_chunk`` instead
gives chunks of that many rounds (the divisor of ``rounds`` nearest to it).

``Cadence`` says how often the checkpoint is saved: every S seconds of wall time
(``"60s"``, the default ``DEFAULT_CADENCE``: a save then costs about 1e-4 of the run, see
benchmarks/README.md, "checkpoint cost") or every N rounds (``"50r"``). The schedule
cuts chunks to meet it (a chunk ends at every multiple of N; with seconds, the first chunk
is one round and no later chunk is longer than S, from the time measured) and ``save_due`` says after which chunk to save: with N, at every multiple
of N; with S, when waiting one more chunk would leave more than S seconds unsaved. The
last round is always saved. So an interrupt loses at most the cadence: rounds done minus
rounds saved is below N, or took at most S seconds.

``Progress`` writes one line to stderr: updated in place on a terminal, plain lines (no
carriage returns) otherwise, and "resuming from round N of M" when a run restarts from a
checkpoint.

Runner loop::

    schedule = ChunkSchedule(rounds, rounds_per_chunk, cadence=Cadence.parse("60s"))
    bar = Progress(name, rounds, enabled, start=done)
    while start < rounds:
        stop = schedule.next_stop(start)
        ... run rounds start..stop ...
        if schedule.save_due(stop):
            ... save the checkpoint ...
            schedule.saved()
        bar.update(stop, extra)
        start = stop
"""

from __future__ import annotations

import math
import sys
import time

PROGRESS_EVERY_S = 10.0


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT) or SIGTERM between rounds.

    The runner raises it from its round loop (``raise RunInterrupted(...) from None``
    inside ``except KeyboardInterrupt``); the command line prints ``line()`` to stderr
    and exits 130. ``round``: rounds completed when interrupted; ``rounds``: rounds asked
    for; ``checkpoint``: the checkpoint path, or None when none was asked for;
    ``checkpoint_round``: the round that file holds (None: nothing saved yet);
    ``finished``: what else is kept (a sweep's finished points), said before the
    checkpoint; ``hint``: what to pass to make the run resumable.
    """

    def __init__(self, label: str, round: int, rounds: int, checkpoint: str | None,
                 checkpoint_round: int | None, finished: str | None = None,
                 hint: str = "--checkpoint FILE"):
        super().__init__(label, round, rounds, checkpoint, checkpoint_round)
        self.label, self.round, self.rounds = label, round, rounds
        self.checkpoint, self.checkpoint_round = checkpoint, checkpoint_round
        self.finished, self.hint = finished, hint

    @property
    def lost(self) -> int:
        """Rounds completed but not saved (the work a rerun does again)."""
        return max(self.round - (self.checkpoint_round or 0), 0)

    def line(self) -> str:
        """The one line the command line prints on an interrupt."""
        head = f"{self.label}: interrupted at round {self.round} of {self.rounds}"
        if self.finished:
            head += f"; {self.finished}"
        if self.checkpoint is None:
            return (f"{head}; no checkpoint was asked for (add {self.hint} to make "
                    f"a run resumable)")
        lost = ("no round lost" if self.lost == 0 else
                f"{self.lost} round{'s' if self.lost != 1 else ''} lost")
        if self.checkpoint_round is None:
            again = "resume" if self.finished else "start again"
            return (f"{head}; {self.checkpoint} holds no round yet ({lost}); rerun the same "
                    f"command to {again}")
        return (f"{head}; {self.checkpoint} holds round {self.checkpoint_round} ({lost}); "
                f"rerun the same command to resume")

    def __str__(self) -> str:
        return self.line()


class Cadence:
    """How often a run saves its checkpoint: every ``seconds`` of wall time or every
    ``rounds`` rounds (exactly one is set). ``Cadence.parse("60s")`` / ``("50r")``."""

    def __init__(self, seconds: float | None = None, rounds: int | None = None):
        if (seconds is None) == (rounds is None):
            raise ValueError("a checkpoint cadence is a number of seconds or of rounds")
        self.seconds, self.rounds = seconds, rounds

    @classmethod
    def parse(cls, text) -> "Cadence":
        """"<seconds>s" (e.g. "60s", "0.5s") or "<rounds>r" (e.g. "50r"); a Cadence is
        returned as is. ValueError (one line) otherwise."""
        if isinstance(text, Cadence):
            return text
        value = str(text).strip().lower()
        usage = (f"--checkpoint-every {text!r}: give seconds or rounds, e.g. 60s (every "
                 f"minute of wall time) or 50r (every 50 rounds)")
        if len(value) < 2 or value[-1] not in "sr":
            raise ValueError(usage)
        try:
            number = float(value[:-1]) if value[-1] == "s" else int(value[:-1])
        except ValueError:
            raise ValueError(usage) from None
        if not number > 0 or number != number or number == float("inf"):
            raise ValueError(f"--checkpoint-every {text!r}: the cadence must be above 0, e.g. "
                             f"60s or 50r")
        return cls(seconds=number) if value[-1] == "s" else cls(rounds=number)

    def __str__(self) -> str:
        return f"{self.seconds:g}s" if self.seconds is not None else f"{self.rounds}r"

    def __repr__(self) -> str:
        return f"Cadence.parse({str(self)!r})"


DEFAULT_CADENCE = Cadence(seconds=60.0)


_lost_interrupt = False


def interrupt_lost():
    """Notes that a KeyboardInterrupt was swallowed where Python cannot raise it (a signal
    landing in a garbage-collection callback or a ``__del__``: "Exception ignored"); the
    command line's ``sys.unraisablehook`` calls it."""
    global _lost_interrupt
    _lost_interrupt = True


def raise_lost_interrupt():
    """Raises the KeyboardInterrupt that ``interrupt_lost`` noted, once; ``Progress.update``
    calls it between chunks, so such an interrupt stops the run at the next report."""
    global _lost_interrupt
    if _lost_interrupt:
        _lost_interrupt = False
        raise KeyboardInterrupt("interrupted")


def clear_lost_interrupt():
    global _lost_interrupt
    _lost_interrupt = False


def chunk_length(rounds: int, wanted: int | None) -> int:
    """The divisor of ``rounds`` closest to ``wanted`` (default rounds / 10)."""
    if rounds == 0:
        return 1
    wanted = wanted or max(1, rounds // 10)
    small = [d for d in range(1, math.isqrt(rounds) + 1) if rounds % d == 0]
    divisors = small + [rounds // d for d in small]
    return min(divisors, key=lambda d: (abs(d - wanted), d))


class ChunkSchedule:
    """Chunk boundaries for a run of ``rounds`` rounds. ``next_stop(start)`` returns the
    round the next chunk ends at; the wall time between two calls is taken as the time of
    the chunk in between (compute, checkpoint and report included). ``cadence``: when to
    save (``save_due`` / ``saved``; None: never). ``max_length``: no chunk is longer (a
    compiled program's capacity)."""

    def __init__(self, rounds: int, rounds_per_chunk: int | None = None, *,
                 cadence: Cadence | None = None, max_length: int | None = None,
                 target_s: float = PROGRESS_EVERY_S / 2, clock=time.perf_counter):
        self.rounds, self.target_s, self.clock = rounds, target_s, clock
        self.fixed = None if rounds_per_chunk is None else chunk_length(rounds, rounds_per_chunk)
        self.cadence, self.max_length = cadence, max_length
        self.length = None          # measured chunk length, once known
        self.seconds_per_round = None
        self.first_s = None         # wall time of the first chunk (compilation included)
        self._last = None           # (start, stop, clock at start, timed)
        self._chunks = 0
        self._first_len = 1
        self._saved_at = clock()    # the run's start counts as saved: nothing to lose yet

    def _observe(self, now: float):
        """Times the chunk that just ended (once): the first one (it compiled) apart."""
        if self._last is None or self._last[3]:
            return
        start, stop, began, _ = self._last
        took = now - began
        if self._chunks == 1:
            self.first_s, self._first_len = took, stop - start
        else:  # the chunk that just ended ran after the first one (which compiled)
            self.seconds_per_round = took / max(stop - start, 1)
        self._last = (start, stop, began, True)

    def next_stop(self, start: int) -> int:
        now = self.clock()
        if self._last is not None and self._last[1] == start:
            self._observe(now)
        self._chunks += 1
        stop = min(self.rounds, start + self._cut(self._length(start), first=self._chunks == 1))
        if self.cadence is not None and self.cadence.rounds is not None:
            stop = min(stop, (start // self.cadence.rounds + 1) * self.cadence.rounds)
        self._last = (start, stop, now, False)
        return stop

    def _per_round(self) -> float | None:
        """Seconds a round takes: measured, else the first chunk's time a round (an upper
        bound: it compiled), else None."""
        if self.seconds_per_round is not None:
            return self.seconds_per_round
        if self.first_s is not None:
            return self.first_s / max(self._first_len, 1)
        return None

    def _cut(self, length: int, first: bool) -> int:
        """``length`` cut to the capacity and to the seconds of a cadence."""
        if self.max_length is not None:
            length = min(length, self.max_length)
        if self.cadence is None or self.cadence.seconds is None:
            return length
        if first:
            return 1            # the first chunk measures (it compiles, too)
        per_round = self._per_round()
        if per_round:
            length = min(length, max(1, int(self.cadence.seconds / per_round)))
        return length

    def save_due(self, stop: int) -> bool:
        """Whether to save after the chunk that ended at ``stop`` (module docstring): with
        seconds, when the next chunk (its length times the seconds a round) would end more
        than the cadence after the last save."""
        if self.cadence is None:
            return False
        if stop >= self.rounds:
            return True
        if self.cadence.rounds is not None:
            return stop % self.cadence.rounds == 0
        now = self.clock()
        self._observe(now)
        per_round = self._per_round()
        following = min(self._cut(self._length(stop), first=False), self.rounds - stop)
        next_s = following * per_round if per_round else 0.0
        return now - self._saved_at + next_s > self.cadence.seconds

    def saved(self):
        """Notes that the checkpoint was just saved."""
        self._saved_at = self.clock()

    def _length(self, start: int) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.seconds_per_round is None:
            return 1
        if self.length is None:
            want = max(1, int(self.target_s / max(self.seconds_per_round, 1e-9)))
            left = self.rounds - start
            compile_s = None if self.first_s is None else self.first_s - self.seconds_per_round
            if compile_s is not None and left * self.seconds_per_round < compile_s:
                self.length = 1     # running the rest costs less than compiling a longer chunk
            elif want >= left:
                self.length = left
            else:  # prefer a divisor of what is left, so no remainder program is compiled
                divs = [d for d in range(max(1, want // 2), want + 1) if left % d == 0]
                self.length = divs[-1] if divs else want
            every = self.cadence.rounds if self.cadence is not None else None
            if every is not None and self.length > 1 and every % self.length:
                # a length dividing the cadence: chunks end on its multiples, no remainder
                fits = [d for d in range(1, min(self.length, every) + 1) if every % d == 0]
                self.length = fits[-1]
        return self.length


LONG_RUN_S = 3600.0


def metrics_text(history: dict, most: int = 3) -> str:
    """The progress line's metrics: the last round's value of the first ``most`` scalar
    round metrics (train_loss first, then the algorithm's own in their order), each the
    lowest over the restarts; history {name: [R, T, ...]} (evaluation records left out)."""
    names = sorted((k for k in history if not k.startswith("eval.")),
                   key=lambda k: k != "train_loss")
    parts = []
    for k in names:
        v = history[k]
        if getattr(v, "ndim", 0) == 2 and v.shape[1] and len(parts) < most:
            parts.append(f"{k.replace('_', ' ')} {float(v[:, -1].min()):.4g}")
    return " ".join(parts)


def duration(seconds: float) -> str:
    """A duration for people: '45 s', '12 min', '4.4 h', '3.2 days'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


class Progress:
    """Progress of one run on ``stream`` (stderr): ``update(done, extra)`` after each chunk.

    From the second report on (the first chunk compiles) each line ends with an estimate of
    the time left: the rounds to go times the seconds a round has taken since the first
    report. The first estimate over ``long_run_s`` (an hour) is also said once on a line of
    its own, with the seconds a round, so a run of hours or days is known early."""

    def __init__(self, label: str, total: int, enabled: bool = True, width: int = 30, *,
                 start: int = 0, stream=None, min_interval_s: float = PROGRESS_EVERY_S / 2,
                 clock=time.perf_counter, long_run_s: float = LONG_RUN_S):
        self.label, self.total, self.enabled, self.width = label, total, enabled, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval_s, self.clock, self.long_run_s = min_interval_s, clock, long_run_s
        self.start = clock()
        self._last_line = None
        self._first = None          # (clock, rounds done) at the first report
        self._warned = False
        if enabled and start > 0:
            self._write(f"{label}: resuming from round {start} of {total}", newline=True)

    def _write(self, text: str, newline: bool):
        if self.tty and not newline:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def seconds_left(self, done: int, now: float) -> float | None:
        """Estimated seconds to the last round (None before a round after the first report
        was timed)."""
        if self._first is None or done <= self._first[1]:
            return None
        per_round = (now - self._first[0]) / (done - self._first[1])
        return per_round * max(self.total - done, 0)

    def update(self, done: int, extra: str = ""):
        raise_lost_interrupt()
        if not self.enabled:
            return
        now = self.clock()
        left = self.seconds_left(done, now)
        if self._first is None:
            self._first = (now, done)
        finished = done >= self.total
        if left is not None and left > self.long_run_s and not self._warned and not finished:
            self._warned = True
            per_round = (now - self._first[0]) / (done - self._first[1])
            self._write(f"{'' if not self.tty else chr(13)}{self.label}: about {duration(left)} "
                        f"left ({self.total - done} rounds at {per_round:.3g} s a round)",
                        newline=True)
        if not self.tty and not finished and self._last_line is not None \
                and now - self._last_line < self.min_interval_s:
            return
        self._last_line = now
        filled = int(self.width * done / max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        eta = "" if left is None or finished else f" ({duration(left)} left)"
        text = (f"{self.label:>10} [{bar}] {done}/{self.total} rounds {now - self.start:6.1f}s"
                f"{eta} {extra}")
        if self.tty:
            self._write(text.rstrip(), newline=False)
            if finished:
                self.stream.write("\n")
                self.stream.flush()
        else:
            self._write(text.rstrip(), newline=True)
