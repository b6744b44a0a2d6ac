"""The job's measured slowdown around an incident, from the fleet's history in ClickHouse.

Why: what waiting costs is the job's lost throughput, and an incident's own figure is often not that: a
link's is its transfer time against its own (3.8x on a link that costs the job 4 %), a kernel's an
efficiency. The job's pace is in the `steps_by_step` rollup (its slowest rank's step time per step): the
steps of the incident against the steps before it give the measured slowdown (policy.measured_slowdown).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from schemas import Incident
from sinks.backend import qualified
from streams.mitigate.policy import measured_slowdown

log = logging.getLogger(__name__)

BEFORE_STEPS = 200  # steps before the incident's first read as the job's own pace


class JobPace:
    """`slowdown(incident)` from a backend opened on first use; None when the history cannot say."""

    def __init__(self, open_backend: Callable[[], Any]) -> None:
        self._open = open_backend
        self._backend: Any = None
        self.failures = 0

    def slowdown(self, incident: Incident) -> float | None:
        if incident.step_first is None:
            return None
        try:
            if self._backend is None:
                self._backend = self._open()
            table = qualified(self._backend.database, "steps_by_step")
            rows = self._backend.query(
                f"SELECT step, maxMerge(max_ms) FROM {table} WHERE job = %(job)s AND attempt = %(attempt)s "
                "AND step >= %(lo)s AND step <= %(hi)s GROUP BY step",
                {"job": incident.job, "attempt": incident.attempt, "lo": max(0, incident.step_first - BEFORE_STEPS),
                 "hi": incident.step_last if incident.step_last is not None else incident.step_first + 10**9})
        except Exception as exc:  # the history is a better figure, never a reason to stop weighing
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning("mitigate: the job's pace could not be read (%r); the incident's figures stand", exc)
            self._backend = None
            return None
        return measured_slowdown([(int(s), float(ms)) for s, ms in rows], incident.step_first, incident.step_last)
