"""A hang followed by a kill is one problem (issue #45, class 2): one host or rank stops, its peers block in their
collectives, then the whole job is killed and falls silent. It was the hang's incident plus a JOB_STOPPED, and a
quick kill after one rank's death named every host that had only been blocked (7 HUNG_HOST incidents, left open).
Now: one incident, naming the host or rank that stopped first when its devices showed it, the job's stop when
they could not. Run as `make bench-detection` runs them, in process (steps, kernels and device samples, the job's
silence on the simulated clock), and scored by its scorer."""

from __future__ import annotations

import argparse
from typing import Any

from bench.detection.replay import replay

CASES = {"hang_then_kill": "HUNG_HOST", "rank_crash_then_kill": "HUNG_RANK", "rank_crash_quick_kill": "JOB_STOPPED"}


def test_a_hang_or_a_death_then_a_kill_is_one_incident_naming_who_stopped_first() -> None:
    args = argparse.Namespace(scenario=list(CASES), seeds=2, ranks=64, large_ranks=64, steps=90, healthy_runs=0,
                              large_healthy_runs=0, jittery_runs=0, quick=False, device_lead=0, device_skew=0,
                              summary_backlog=False, trait_off=[])
    result = replay(args)
    for name, rule in CASES.items():
        row: dict[str, Any] = result["scenarios"][name]
        messages = [m for m in result["messages"] if f"-{name}-" in m["job"]]
        shown = sorted({(m["incident_id"], m["rule"], m["scope"]) for m in messages})
        assert row["incidents_per_fault"] == 1.0 and row["localisation"] == 1.0 and row["recall"] == 1.0, (row, shown)
        assert {m["rule"] for m in messages} == {rule}, shown
        if rule != "JOB_STOPPED":
            assert all("JOB_STOPPED" in m["rules"] for m in messages if m["state"] == "update"), shown
