"""Critical path of a step's device work (spec §3): walk back from the last task through tasks
whose end meets the next one's start, across streams and kinds; what is on it sets step time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.profiles.model import KIND_NAMES, Kernels, Names


@dataclass(frozen=True, slots=True)
class CriticalPath:
    length_us: float
    tasks: int
    by_kind_us: dict[str, float]
    top: list[tuple[str, float]]  # kernel name -> time on the path


def critical_path(kernels: Kernels, names: Names, gap_us: float = 1.0, top: int = 5) -> CriticalPath:
    """Greedy walk-back: from the task ending last, repeatedly take the task that ends latest at
    or before the current start (+gap); idle gaps between them are not on any task's account."""
    n = len(kernels)
    if n == 0:
        return CriticalPath(0.0, 0, {}, [])
    ends = kernels.ts + kernels.dur
    order = np.argsort(ends, kind="stable")
    sorted_ends = ends[order]
    cur = int(order[-1])
    on_path = [cur]
    while True:
        limit = kernels.ts[cur] + gap_us
        pos = int(np.searchsorted(sorted_ends, limit, side="right")) - 1
        while pos >= 0 and int(order[pos]) in (cur,):
            pos -= 1
        if pos < 0:
            break
        nxt = int(order[pos])
        if kernels.ts[nxt] >= kernels.ts[cur]:
            break  # no progress backwards
        on_path.append(nxt)
        cur = nxt
    idx = np.asarray(on_path)
    by_kind: dict[str, float] = {}
    per_name: dict[str, float] = {}
    for i in idx:
        kind = KIND_NAMES[int(kernels.kind[i])]
        by_kind[kind] = by_kind.get(kind, 0.0) + float(kernels.dur[i])
        name = names[int(kernels.name[i])]
        per_name[name] = per_name.get(name, 0.0) + float(kernels.dur[i])
    length = float(ends[idx[0]] - kernels.ts[idx[-1]])
    best = sorted(per_name.items(), key=lambda kv: -kv[1])[:top]
    return CriticalPath(length, len(on_path), by_kind, best)
