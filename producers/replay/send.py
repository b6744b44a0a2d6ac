"""Send a Replay through the ordinary emitter, at the trace's own pace or faster.

Step k's events go out when step k ended on the trace's clock, divided by `speed` (1.0: the
trace's pace; 2.0: twice as fast; 0: as fast as the emitter takes them). The emitter's queue is
never allowed to overflow: the sender waits for it to drain below half instead (a replay must not
drop what it sends). `clock` and `sleep` are passed in so tests and benches can drive the pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from producers.emitter import BackgroundEmitter
from producers.replay.convert import Replay

Progress = Callable[[int, int, int], None]  # (steps sent, steps in all, events sent)


@dataclass(frozen=True, slots=True)
class SendResult:
    events: int  # events the emitter accepted
    dropped: int  # events the emitter dropped (counted by the emitter, with a reason)
    seconds: float
    delivered: bool = True  # False: events were still waiting for the broker when the flush timed out


def send(replay: Replay, emitter: BackgroundEmitter, *, speed: float = 1.0, progress: Progress | None = None,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
         flush_timeout_s: float = 120.0) -> SendResult:
    if speed < 0:
        raise ValueError("speed must be >= 0 (0: as fast as possible)")
    started = clock()
    sent = 0
    high = emitter.max_queue // 2
    if emitter.emit(replay.start):
        sent += 1
    for i, step in enumerate(replay.steps):
        if speed > 0:
            due = started + step.end_offset_ns / 1e9 / speed
            wait = due - clock()
            if wait > 0:
                sleep(wait)
        for event in step.events:
            if emitter.stats().queued >= high:
                emitter.wait_until(lambda s: s.queued < high, timeout=flush_timeout_s)
            if emitter.emit(event):
                sent += 1
        if progress is not None:
            progress(i + 1, len(replay.steps), sent)
    if emitter.emit(replay.end):
        sent += 1
    delivered = emitter.flush(flush_timeout_s)
    return SendResult(sent, emitter.stats().dropped_total, clock() - started, delivered)


def progress_printer(bar: Any) -> Progress:
    """`send`'s progress on a `infra.progress.Progress` bar (total: the replay's steps): a tqdm bar on a
    terminal, a plain line every N % elsewhere, each naming the events sent so far."""

    def show(done: int, total: int, events: int) -> None:
        bar.update(done - bar.done, item=f"{events} events sent")

    return show
