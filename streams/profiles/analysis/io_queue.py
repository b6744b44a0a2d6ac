"""I/O bottleneck by queue occupancy (spec §3, Hermes): device queue non-empty -> no I/O bottleneck;
else host queue non-empty -> fetching (H2D); else data queue non-empty -> processing; else reading.

Used where a dump or the rank hook reports queue depths per step (e.g. DataLoader prefetch
queue = data, pinned-memory queue = host, device prefetch = device); Kineto and torch_npu dumps
carry no queue depths, so the profile analyses fall back to DataLoader wait time (host.py).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streams.profiles.analysis.findings import ProfileFinding

VERDICTS = ("none", "slow_fetching", "slow_processing", "slow_reading")


def queue_verdicts(device_q: npt.ArrayLike, host_q: npt.ArrayLike, data_q: npt.ArrayLike) -> list[str]:
    """One verdict per sample (step), vectorised."""
    d = np.asarray(device_q) > 0
    h = np.asarray(host_q) > 0
    q = np.asarray(data_q) > 0
    code = np.where(d, 0, np.where(h, 1, np.where(q, 2, 3)))
    return [VERDICTS[int(c)] for c in code]


def io_queue_finding(device_q: npt.ArrayLike, host_q: npt.ArrayLike, data_q: npt.ArrayLike,
                     rank: int | None = None, min_share: float = 0.2) -> ProfileFinding | None:
    verdicts = queue_verdicts(device_q, host_q, data_q)
    if not verdicts:
        return None
    counts = {v: verdicts.count(v) for v in VERDICTS[1:]}
    cause, n = max(counts.items(), key=lambda kv: kv[1])
    share = n / len(verdicts)
    if n == 0 or share < min_share:
        return None
    return ProfileFinding(cause, f"{share:.0%} of steps start with an empty device queue: {cause.replace('_', ' ')}",
                          {f"{k}_share": v / len(verdicts) for k, v in counts.items()}, rank)
