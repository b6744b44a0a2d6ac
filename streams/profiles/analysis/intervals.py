"""Interval unions and intersections on numpy columns (the core of every breakdown)."""

from __future__ import annotations

import numpy as np

from streams.profiles.model import F64


def union(starts: F64, ends: F64) -> tuple[F64, F64]:
    """Merge overlapping [start, end) intervals; returns sorted disjoint starts and ends."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    last = np.append(idx[1:], s.size) - 1
    out_e = run_end[last]
    return out_s, out_e


def total(starts: F64, ends: F64) -> float:
    return float(np.sum(ends - starts)) if starts.size else 0.0


def intersection_total(a_s: F64, a_e: F64, b_s: F64, b_e: F64) -> float:
    """Length of (∪a) ∩ (∪b) for two disjoint sorted interval sets."""
    if a_s.size == 0 or b_s.size == 0:
        return 0.0
    # sweep: +1/-1 events of both sets; time where the count is 2
    points = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate([np.ones(a_s.size), -np.ones(a_e.size), np.ones(b_s.size), -np.ones(b_e.size)])
    order = np.lexsort((delta, points))  # ends before starts at equal times
    p = points[order]
    depth = np.cumsum(delta[order])
    seg = np.diff(p)
    return float(np.sum(seg[depth[:-1] >= 2]))


def clip(starts: F64, ends: F64, lo: float, hi: float) -> tuple[F64, F64]:
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    return s[keep], e[keep]
