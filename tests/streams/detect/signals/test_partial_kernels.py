"""A frame released with the kernel summaries of only some ranks (streams/detect/signals/shared.py `rank_findings`)."""

from __future__ import annotations

import numpy as np

from streams.detect.config import DetectionConfig
from streams.detect.rules.base import Alarms
from streams.detect.signals.shared import FindingParams, rank_findings
from streams.detect.windows.step_frames import Frame
from tests.streams.helpers import hosts_topology


def _frame(world: int) -> Frame:
    frame = Frame.empty(7, world, 0)
    frame.seen[:] = True
    return frame


def _alarms(ranks: list[int], world: int) -> Alarms:
    mask = np.zeros(world, dtype=bool)
    mask[ranks] = True
    return Alarms.where(mask, np.full(world, 0.1), np.ones(world), np.full(world, 0.5))


def test_every_rank_with_summaries_alarming_is_job_wide_even_when_few_arrived() -> None:
    """64 ranks stepped, the summaries of 16 (two hosts) made it before the timeout: all 16 alarm."""
    topo, params = hosts_topology(64, 8), DetectionConfig().params(FindingParams)
    found = rank_findings("R8", _alarms(list(range(16)), 64), topo, _frame(64), params, "CU", "T15", present=16)
    assert [(f.key, f.scope) for f in found] == [("job", "job")]


def test_without_present_the_same_alarms_are_per_host() -> None:
    topo, params = hosts_topology(64, 8), DetectionConfig().params(FindingParams)
    found = rank_findings("R8", _alarms(list(range(16)), 64), topo, _frame(64), params, "CU", "T15")
    assert sorted(f.key for f in found) == ["host:node-0", "host:node-1"], "a real two-host fault stays per host"


def test_a_minority_of_the_present_ranks_is_not_job_wide() -> None:
    topo, params = hosts_topology(64, 8), DetectionConfig().params(FindingParams)
    found = rank_findings("R8", _alarms([3], 64), topo, _frame(64), params, "CU", "T15", present=16)
    assert [(f.key, f.scope) for f in found] == [("rank:3", "rank")]
