"""A link that flaps in short episodes far apart (issue #45, class 6) is one link incident recording each episode,
with the network as its cause. A host whose PP groups all pair with the flapping host's, and whose own DP groups
slowed a little with the stalled job, also had every inter-host group slowed: two candidates, so the link scope
named none, and each episode became a job-scope SLOW_STEP incident of its own."""

from __future__ import annotations

import argparse
from typing import Any

from bench.detection.replay import replay


def test_a_link_flapping_every_30_steps_is_one_link_incident_for_all_its_episodes() -> None:
    args = argparse.Namespace(scenario=["flapping_link_periodic"], seeds=1, ranks=64, large_ranks=64, steps=90,
                              healthy_runs=0, large_healthy_runs=0, jittery_runs=0, quick=False, device_lead=0,
                              device_skew=0, summary_backlog=False, trait_off=[])
    result = replay(args)
    row: dict[str, Any] = result["scenarios"]["flapping_link_periodic"]
    messages = [m for m in result["messages"] if "-flapping_link_periodic-" in m["job"]]
    shown = sorted({(m["incident_id"], m["rule"], m["scope"], m["step_first"]) for m in messages})
    assert row["recall"] == 1.0 and row["localisation"] == 1.0 and row["incidents_per_fault"] == 1.0, (row, shown)
    assert {m["scope"] for m in messages} == {"link"}, shown
    last = messages[-1]
    assert last["step_first"] <= 22 and last["step_last"] >= 80, shown  # episodes at 20, 50 and 80
