"""The committed bench/results files carry the keys the benchmark contract requires (../shared/bench/RESULTS.md,
copied here: a clean clone has no ../shared), so a reader's script over them does not break on a renamed key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
EVERY = ("machine", "started", "git")
CHAOS_CASE = ("sent", "landed", "dead_lettered", "duplicates", "lost", "duplicate_incidents", "recovery_s",
              "workers_alive")
# file -> (top-level keys, (the object of named entries, their keys) or None)
REQUIRED: dict[str, tuple[tuple[str, ...], tuple[str, tuple[str, ...]] | None]] = {
    "detection.json": (("scenarios", "false_alarms_per_100k_rank_steps", "healthy_rank_steps", "traits"),
                       ("scenarios", ("recall", "precision", "localisation", "rule_attribution", "incidents_per_fault",
                                      "delay_steps_p50", "delay_steps_p99", "delay_s_p50", "delay_s_p99", "ranks",
                                      "seeds"))),
    "throughput.json": (("max_ranks", "events_per_s", "cpu_us_per_event", "p99_latency_s", "lost",
                         "ceiling_events_per_s", "ratio_to_ceiling", "stage_ratio_to_ceiling"), None),
    "overhead.json": (("hook_ratio", "hook_ratio_noise", "profiler_ratio", "us_per_event", "steps", "device"), None),
    "query.json": (("rows_loaded", "ingest_rows_per_s", "queries"), ("queries", ("kind", "p50_s", "p95_s", "runs"))),
    "parse.json": (("inputs", "steplens_mb_per_s", "hta_mb_per_s", "speedup_vs_hta", "steplens_peak_rss_mb",
                    "hta_peak_rss_mb", "rss_ratio_vs_hta", "agreement"), None),
    "chaos.json": (("cases", "lost_total", "duplicates_total"), ("cases", CHAOS_CASE)),
    "soak.json": (("duration_s", "restarts", "lost", "duplicates", "duplicate_incidents",
                   "max_committed_lag_after_restart_s", "rss_mb_start", "rss_mb_end", "idle_cpu_pct",
                   "incidents_expected", "incidents_found"), None),
    "replay.json": (("traces",), ("traces", ("ranks", "format", "live_verdict", "offline_verdict", "anchor",
                                             "anchor_verdict", "agreement"))),
    "chaos-cluster.json": (("cases", "lost_total", "duplicates_total", "topology"), ("cases", CHAOS_CASE)),
}


def _missing(doc: dict[str, Any], top: tuple[str, ...], named: tuple[str, tuple[str, ...]] | None) -> list[str]:
    out = [k for k in (*top, *EVERY) if k not in doc]
    if named is not None and named[0] in doc:
        entries = doc[named[0]]
        if not isinstance(entries, dict):
            return [*out, f"{named[0]} is a {type(entries).__name__}, not an object keyed by name"]
        out += [f"{named[0]}[{name}].{k}" for name, entry in entries.items() for k in named[1] if k not in entry]
    return out


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_result_file_has_the_required_keys(name: str) -> None:
    doc = orjson.loads((RESULTS / name).read_bytes())
    assert _missing(doc, *REQUIRED[name]) == []


def test_replay_agreement_is_one_bool_per_trace() -> None:
    doc = orjson.loads((RESULTS / "replay.json").read_bytes())
    assert all(isinstance(t["agreement"], bool) for t in doc["traces"].values())
    assert doc["agreement"] == {name: t["agreement"] for name, t in doc["traces"].items()}
