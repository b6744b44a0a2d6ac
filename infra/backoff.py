"""The one exponential backoff: the pause between attempts at something that is away (a broker, a sink,
Alertmanager), `first` seconds doubling up to `longest`, through a `wait` that may say to give up."""

from __future__ import annotations

from collections.abc import Callable

OUTAGE_BACKOFF_S = (0.5, 5.0)  # first and longest wait between attempts while the broker is away


def _never_waits(_seconds: float) -> bool:
    return False


class Backoff:
    """The pause between attempts while the broker is away: `first` seconds, doubling up to
    `longest`. `pause()` calls `wait(s)` and is True when that says to give up; a caller that
    schedules rather than sleeps (the emitter's state machine) takes `next_delay()` instead."""

    def __init__(self, wait: Callable[[float], bool] = _never_waits,
                 backoff: tuple[float, float] = OUTAGE_BACKOFF_S) -> None:
        self._wait = wait
        self._first, self._longest = backoff
        self.delay = self._first

    def next_delay(self) -> float:
        """The wait before the next attempt; the one after it is twice as long (up to `longest`)."""
        delay = self.delay
        self.delay = min(self.delay * 2, self._longest)
        return delay

    def reset(self) -> None:
        """An attempt worked: the next outage starts again from `first`."""
        self.delay = self._first

    def pause(self) -> bool:
        if self._wait(self.delay):
            return True
        self.next_delay()
        return False
