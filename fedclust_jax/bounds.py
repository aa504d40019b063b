"""The range a parameter's value must lie in, declared in its annotation.

A dataset builder, model builder or algorithm config states its parameters' ranges where
it declares them, e.g. ``num_clients: Size = 100`` or ``lr: Positive = 0.1``;
``config_check`` reads them and refuses a value outside in one line (command line, study
file or Python alike), and ``fedclust-jax list NAME`` shows them. A user's builder uses the
same names (``from fedclust_jax import Size, Positive``), or its own
``Annotated[float, Bounds(...)]``. An integer without bounds must still fit in 32 bits
(counts, shapes and loop lengths are int32); a float must be finite. A fixed set of values
is declared the same way, with ``typing.Literal["a", "b"]`` (checked and shown alike).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The interval [low, high] (an end None: unbounded; ``low_open`` / ``high_open``: that
    end excluded). ``why``: the reason for the upper end, said when a value exceeds it."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def __contains__(self, v) -> bool:
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or (v < self.high if self.high_open else v <= self.high)

    def text(self) -> str:
        """The interval in words: '>= 1', '> 0', 'in (0, 1]', 'in [0, 4294967295]'."""
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return ""


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def bounds_of(annotation) -> tuple[object, Bounds | None]:
    """(the annotated type, its ``Bounds`` or None) of one annotation member."""
    if typing.get_origin(annotation) is Annotated:
        base, *extras = typing.get_args(annotation)
        return base, next((e for e in extras if isinstance(e, Bounds)), None)
    return annotation, None


Size = Annotated[int, Bounds(1)]
"""An integer >= 1: a count of things that must exist (clients, clusters, steps, width)."""
Count = Annotated[int, Bounds(0)]
"""An integer >= 0: a count that may be zero (warm-up rounds, iterations)."""
Seed = Annotated[int, Bounds(0, 2**32 - 1, why="seeds are 32-bit unsigned integers")]
"""A random seed: an integer in [0, 2**32 - 1]."""
Positive = Annotated[float, Bounds(0, low_open=True)]
"""A number > 0 (a step size, a separation)."""
NonNegative = Annotated[float, Bounds(0)]
"""A number >= 0 (a noise level, a weight decay)."""
Fraction = Annotated[float, Bounds(0, 1, low_open=True)]
"""A number in (0, 1] (the participating share of clients, a quantile that keeps some)."""
Probability = Annotated[float, Bounds(0, 1)]
"""A number in [0, 1]."""
BelowOne = Annotated[float, Bounds(0, 1, high_open=True)]
"""A number in [0, 1) (a momentum, the Byzantine share of clients)."""
OpenFraction = Annotated[float, Bounds(0, 1, low_open=True, high_open=True)]
"""A number in (0, 1) (a split of examples between training and test)."""
TrimFraction = Annotated[float, Bounds(0, 0.5, high_open=True)]
"""A number in [0, 0.5): the share a trimmed mean drops at each end."""
