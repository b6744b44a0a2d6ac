"""The rank hook's builder thread: finished steps become events off the training thread.

Why apart: building and encoding the events is most of the hook's cost; doing it on a helper
thread lets it overlap with the training thread's GIL-free compute (torch ops, collectives). The
training thread pays one deque append per step: no wake-up (the builder polls every interval),
no getpid (the hook's fork handler drops the builder in a child, which starts its own).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from producers.hook.steps import DoneStep
from schemas import Event

# The builder thread polls for finished steps at this interval instead of being woken per step:
# waking a thread costs the training thread a futex call and often a context switch + GIL hand-off.
# Each round's events go to the emitter at once and are sent then, so this is also the send
# cadence; `producers.hook.start()` sets it to Settings.hook_flush_interval_s.
BUILD_INTERVAL_S = 0.2

STOP: Any = object()  # the last item: the builder ends after the round it is in


class Builder:
    """One daemon thread turning queued finished steps (and deferred jobs) into events, one round per interval.

    The training thread appends to `done` and counts `queued`; each round `build`s every `DoneStep`
    (or calls a deferred job), hands the round's events to `emit_round`, and counts an exception as
    `count_error` (never raised). `pid`: the process that started it.
    """

    def __init__(
        self,
        build: Callable[[DoneStep, list[Event]], None],
        emit_round: Callable[[list[Event]], None],
        count_error: Callable[[], None],
        interval: float,
    ) -> None:
        self.pid = os.getpid()
        self.queued = 0
        self.built = 0
        self.done: deque[Any] = deque()
        self._build = build
        self._emit_round = emit_round
        self._count_error = count_error
        self._interval = interval
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="steplens-hook-builder", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        done, wake, idle = self.done, self._wake, self._idle
        while True:
            wake.wait(self._interval)
            wake.clear()
            out: list[Event] = []
            n = 0
            stop = False
            while done:
                item = done.popleft()
                if item is STOP:
                    stop = True
                    break
                try:
                    if isinstance(item, DoneStep):
                        self._build(item, out)
                    else:
                        item()
                except Exception:
                    self._count_error()
                n += 1
            self._emit_round(out)
            if n or stop:  # an idle round wakes nobody
                self.built += n
                with idle:
                    idle.notify_all()
            if stop:
                return

    def drain(self, timeout: float | None) -> bool:
        """Wait until every queued step was handed to the emitter."""
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: self.built >= self.queued or not self._thread.is_alive(), timeout)

    def stop(self, timeout: float | None) -> None:
        """Drain, then end the thread (each bounded by `timeout`)."""
        self.drain(timeout)
        self.done.append(STOP)
        self._wake.set()
        self._thread.join(timeout)


__all__ = ["BUILD_INTERVAL_S", "Builder"]
