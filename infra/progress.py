"""Progress of long work: a tqdm bar on a terminal, plain lines every N % anywhere else.

A bar's carriage returns turn a CI log or a redirected file into one unreadable line, and a
silent minute-long run looks hung: so off a terminal each `step_pct` % of the work (and the
end; every update with `step_pct` 0) prints one line, `label: done/total unit (pct %) elapsed,
item`. Used by `steplens report` and the benches' long loops; `steplens replay` can use it:

    with Progress(len(parts), "replay", unit="part") as bar:
        for part in parts:
            bar.update(1, item=part.name)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


class Progress:
    """`total` units of work, reported on `stream` (stderr by default).

    `tty` decides bar or lines (default: `stream.isatty()`); `clock` is injectable so the
    plain lines' elapsed seconds are testable without sleeping.
    """

    def __init__(
        self, total: int, label: str, *, stream: TextIO | None = None, unit: str = "it", step_pct: float = 10.0,
        tty: bool | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._step = max(step_pct, 0.0)
        self._clock = clock
        self._t0 = clock()
        self._next_pct = self._step  # the next percentage that prints a plain line
        self._printed = -1  # `done` when the last plain line was printed (the end prints once)
        isatty = getattr(self._stream, "isatty", None)
        self.tty = tty if tty is not None else bool(isatty and isatty())
        self._bar: Any = None
        if self.tty:
            self._bar = tqdm(total=self.total, desc=label, unit=unit, file=self._stream, leave=True,
                             dynamic_ncols=True)

    def update(self, n: int = 1, *, item: str = "") -> None:
        """`n` more units done; `item` names what was just finished (or starts next)."""
        self.done = min(self.total, self.done + n) if self.total else self.done + n
        if self._bar is not None:
            if item:
                self._bar.set_postfix_str(item, refresh=False)
            self._bar.update(n)
            return
        pct = 100.0 * self.done / self.total if self.total else 100.0
        due = self._step <= 0 or pct + 1e-9 >= self._next_pct or self.done == self.total
        if due and self.done != self._printed:
            self._printed = self.done
            self._line(pct, item)
            while self._step > 0 and self._next_pct <= pct + 1e-9:
                self._next_pct += self._step

    def note(self, item: str) -> None:
        """Say what is being worked on now, without counting it (the bar's postfix; nothing off a terminal)."""
        if self._bar is not None:
            self._bar.set_postfix_str(item)

    def _line(self, pct: float, item: str) -> None:
        tail = f", {item}" if item else ""
        print(f"{self.label}: {self.done}/{self.total} {self.unit} ({pct:.0f} %) "
              f"{self._clock() - self._t0:.1f}s{tail}", file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def track(
    items: Iterable[T], total: int, label: str, *, stream: TextIO | None = None, unit: str = "it",
    step_pct: float = 10.0, tty: bool | None = None,
) -> Iterator[T]:
    """Yield `items`, counting one unit each (a loop's progress in one line)."""
    with Progress(total, label, stream=stream, unit=unit, step_pct=step_pct, tty=tty) as bar:
        for item in items:
            yield item
            bar.update(1)
