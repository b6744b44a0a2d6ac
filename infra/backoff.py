"""The one exponential backoff: the pause between attempts at something that is away (a broker, a sink,
Alertmanager), `first` seconds doubling up to `longest`, through a `wait` that may say to give up."""

from __future__ import annotations

from collections.abc import Callable

OUTAGE_BACKOFF_S = (0.5, 5.0)  # first and longest wait between attempts while the broker is away


class Backoff:
    """The pause between attempts while the broker is away: `first` seconds, doubling up to
    `longest`. `pause()` calls `wait(s)` and is True when that says to give up."""

    def __init__(self, wait: Callable[[float], bool], backoff: tuple[float, float] = OUTAGE_BACKOFF_S) -> None:
        self._wait = wait
        self.delay, self._longest = backoff

    def pause(self) -> bool:
        if self._wait(self.delay):
            return True
        self.delay = min(self.delay * 2, self._longest)
        return False
