"""Job stopped: every rank and device of a job fell silent without an `end` (a crash, a kill).

A crashed job sends nothing more at all, so no frame times out with peers going on (no
HUNG_RANK) and no device runs past the last step (no stall): without this finding a job
killed mid-run raised no incident. It is ONE job-scope finding, not one per rank or host;
the engine raises it once per silence (streams/detect/engine.py `JobEngine._silent`), and it
resolves when the job reports again (the next released step is clean), is relaunched (a new
attempt resolves the old attempt's incidents) or ends.
"""

from __future__ import annotations

from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding

ADVICE = SCOPES["JOB_STOPPED"]


def job_stopped(next_step: int, silent_s: float) -> Finding:
    """The finding for a job whose last completed step is `next_step - 1`, silent `silent_s`."""
    last = next_step - 1
    return Finding(
        rule="JOB_STOPPED", key="job", family="hang", scope="job", step=next_step, severity="critical",
        metric="reports", summary=f"job stopped reporting at step {next_step}: no rank or device reported for "
                                  f"{silent_s:.0f} s since step {last}, and no end",
        evidence={"last_step": float(last), "silent_s": silent_s}, cause=ADVICE.cause, suggestion=ADVICE.suggestion,
        open_after=1, resolve_after=1)
