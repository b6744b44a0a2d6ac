"""Garbage-collection pauses of the open step, timed through `gc.callbacks`.

Why apart: a GC pause is a phase the training loop never marks (the interpreter runs it inside
any call), so it is measured from the interpreter's own callbacks; the callback holds the timer
only weakly, so a dropped hook is not kept alive by the `gc.callbacks` list.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable


class GcTimer:
    """Sums the GC pauses since the last reset: `ms` and `n` (collections); `installed`: the callback was added."""

    __slots__ = ("__weakref__", "_cb", "installed", "ms", "n", "t0")

    def __init__(self) -> None:
        self.t0 = 0
        self.ms = 0.0
        self.n = 0
        self.installed = False
        self._cb: Callable[[str, dict[str, int]], None] | None = None

    def install(self) -> None:
        ref = weakref.ref(self)

        def on_gc(phase: str, info: dict[str, int]) -> None:
            timer = ref()
            if timer is None:
                return
            if phase == "start":
                timer.t0 = time.perf_counter_ns()
            elif timer.t0:
                timer.ms += (time.perf_counter_ns() - timer.t0) / 1e6
                timer.n += 1
                timer.t0 = 0

        self._cb = on_gc
        gc.callbacks.append(on_gc)
        self.installed = True

    def remove(self) -> None:
        cb = self._cb
        if cb is not None and cb in gc.callbacks:
            gc.callbacks.remove(cb)


__all__ = ["GcTimer"]
