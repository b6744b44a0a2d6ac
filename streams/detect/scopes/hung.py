"""Hung rank / hung host: a member that stops reporting while its peers go on (C4D's hang vs slow).

A slow rank still reports, late; a hung one does not report at all. So a hang is read off
frames closed by TIMEOUT (the adaptive wait of streams/detect/windows/step_frames.py, several step
times) while its peers went on (reported at least 2 later steps): a rank missing from such a
frame, that has not reported any later step either, is hung. A job whose ranks all stop
together (every collective blocked) is not reported here. When every rank of a host is hung
it is ONE host finding. Frames closed because the
job ended, or settled by later reports, say nothing about hangs. The incident resolves
when the rank reports again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame, IntArray, ReportedLayout

HUNG_LEAD_STEPS = 2  # peers must have reported this many later steps: they went on without it
ADVICE = SCOPES["HUNG"]


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    hang_silence_s: float


def evaluate(frame: Frame, topo: ReportedLayout, newest_of: IntArray, heard_ns: IntArray, now_ns: int,
             params: Params) -> list[Finding]:
    if frame.closed_by != "timeout" or not frame.seen.any():
        return []
    world = frame.seen.size
    if int(newest_of[:world].max(initial=-1)) < frame.step + HUNG_LEAD_STEPS:
        return []  # the peers have not gone on (a slow producer, or the whole job stalled together)
    silent = now_ns - heard_ns[:world] >= int(params.hang_silence_s * 1e9)
    missing = np.flatnonzero(~frame.seen & (newest_of[:world] < frame.step) & silent)
    if missing.size == 0:
        return []
    out: list[Finding] = []
    done: set[int] = set()
    for host in np.unique(topo.host_of[missing]).tolist():
        if host < 0:
            continue
        members = topo.ranks_of_host(int(host))
        lost = np.intersect1d(members, missing)
        if members.size >= 2 and lost.size == members.size:
            name = topo.hosts[int(host)]
            out.append(Finding(
                rule="HUNG_HOST", key=f"host:{name}", family="hang", scope="host", step=frame.step, host=name,
                ranks=lost.tolist(), severity="critical", metric="reports",
                summary=f"host {name} went silent: none of its {members.size} ranks reported step {frame.step} "
                        f"while the other ranks did",
                evidence={"ranks_silent": float(lost.size)}, cause=ADVICE.cause, suggestion=ADVICE.suggestion,
                open_after=1, resolve_after=1, since_step=int(newest_of[lost].max()) + 1))
            done.update(lost.tolist())
    for rank in missing.tolist():
        if rank in done:
            continue
        host_idx = int(topo.host_of[rank])
        host = topo.hosts[host_idx] if host_idx >= 0 else None
        silent_s = (now_ns - int(heard_ns[rank])) / 1e9
        last = int(newest_of[rank])
        what = (f"stopped reporting after step {last}" if last >= 0
                else "has not reported a step since the job's reports first counted it")
        out.append(Finding(
            rule="HUNG_RANK", key=f"rank:{rank}", family="hang", scope="rank", step=frame.step, host=host,
            ranks=[rank], severity="critical", metric="reports",
            summary=f"rank {rank} ({host or 'host not reported'}) {what} while its peers went on "
                    f"(silent {silent_s:.0f} s)",
            evidence={"last_step": float(last), "silent_s": silent_s},
            cause=ADVICE.cause, suggestion=ADVICE.suggestion, open_after=1, resolve_after=1,
            since_step=last + 1))
    return out
