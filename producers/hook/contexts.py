"""The `with hook.step():`, `with hook.phase(name):` and `hook.wrap_loader(it)` spellings of the hook's calls.

Why apart: they are sugar over RankHook's begin/end calls for training loops without framework
callbacks; each is a small slotted object (cheap on the training thread) that never raises more
than the code it wraps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from producers.hook.core import RankHook

T = TypeVar("T")


class StepContext:
    __slots__ = ("_hook", "_step", "_totals")

    def __init__(self, hook: RankHook, step: int | None, totals: dict[str, Any]) -> None:
        self._hook = hook
        self._step = step
        self._totals = totals

    def __enter__(self) -> RankHook:
        self._hook.step_begin(self._step)
        return self._hook

    def __exit__(self, *exc: object) -> None:
        self._hook.step_end(**self._totals)


class PhaseContext:
    __slots__ = ("_hook", "_name")

    def __init__(self, hook: RankHook, name: str) -> None:
        self._hook = hook
        self._name = name

    def __enter__(self) -> None:
        self._hook.phase_begin(self._name)

    def __exit__(self, *exc: object) -> None:
        self._hook.phase_end(self._name)


class TimedIterator(Iterator[T]):
    """Adds each `__next__`'s wall time to the hook's data phase (D1)."""

    __slots__ = ("_hook", "_it")

    def __init__(self, hook: RankHook, it: Iterator[T]) -> None:
        self._hook = hook
        self._it = it

    def __iter__(self) -> TimedIterator[T]:
        return self

    def __next__(self) -> T:
        t = time.perf_counter_ns()
        try:
            return next(self._it)
        finally:
            try:
                hook = self._hook
                end = hook._data_end_pc = time.perf_counter_ns()
                hook._data_ms((end - t) / 1e6)
            except Exception:
                self._hook._errors += 1

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]


__all__ = ["PhaseContext", "StepContext", "TimedIterator"]
