"""Paths -> one Replay, with the offline analyser's own loader (the same formats `steplens analyse` reads)."""

from __future__ import annotations

from pathlib import Path

from producers.replay.convert import Replay, from_cluster, from_profiles
from streams.profiles.loader import Warn, load_all


def load_replay(paths: list[Path], job: str, now_ns: int, *, keep_time: bool = False, repeats: int = 1,
                warn: Warn | None = None) -> Replay:
    """One job's trace: the per-rank dumps (Kineto files, `*_ascend_pt` folders) of one job, or one msprof-analyze
    cluster output. Mixing both, or two cluster outputs, is refused: a replay is one job."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    profiles, clusters = load_all(paths, warn=warn)
    if profiles and clusters:
        raise ValueError("per-rank dumps and an msprof-analyze cluster output given together: replay one job at "
                         "a time")
    if profiles:
        return from_profiles(profiles, job, now_ns, keep_time=keep_time, repeats=repeats)
    if len(clusters) != 1:
        raise ValueError(f"{len(clusters)} msprof-analyze cluster outputs: replay one at a time")
    return from_cluster(clusters[0], job, now_ns, repeats=repeats)
