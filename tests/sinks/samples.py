"""Event builders shared by the sink tests."""

from __future__ import annotations

from typing import Any

from schemas import Domain, Incident, JobEvent, Phases, StepEvent

T0 = 1_718_000_000_000_000_000  # 2024-06-10T06:13:20Z

TRICKY_TEXT = 'he said "hi"\n\'quoted\' \\ back\\slash\ttab, unicode: ünïcødé 中文 🚀, NUL:\x00 end'


def step(**overrides: Any) -> StepEvent:
    fields: dict[str, Any] = {
        "job": "job-a",
        "rank": 3,
        "world": 8,
        "host": "node-1",
        "device": 3,
        "domains": {
            "dp": Domain(group=1, size=2, index=1),
            "tp": Domain(group=0, size=4, index=3),
            "pp": Domain(group=2, size=2, index=1),
        },
        "step": 10,
        "start_ns": T0,
        "end_ns": T0 + 1_250_000_000,
        "phases": Phases(data_ms=1.5, forward_ms=400.0, backward_ms=700.25, optimizer_ms=50.0, gc_ms=0.0),
        "gc_count": 2,
        "batch_size": 32,
        "tokens": 65536,
        "flops": 1.5e15,
        "profiling": True,
    }
    fields.update(overrides)
    return StepEvent(**fields)


def incident(**overrides: Any) -> Incident:
    fields: dict[str, Any] = {
        "incident_id": "inc-1",
        "job": "job-a",
        "rule": "SLOW_RANK",
        "state": "open",
        "severity": "warning",
        "scope": "rank",
        "summary": "rank 3 is slow",
        "detected_ns": T0,
        "metric": "G1",
        "domain": "dp",
        "group": 1,
        "ranks": [3, 7],
        "host": "node-1",
        "device": 3,
        "step_first": 10,
        "step_last": 12,
        "observed": 1250.0,
        "expected": 1000.0,
        "threshold": 1100.0,
        "unit": "ms",
        "evidence": {"z": 4.5, "wait_ratio": 0.2},
        "cause": "straggler",
        "suggestion": "check the host",
    }
    fields.update(overrides)
    return Incident(**fields)


def job(**overrides: Any) -> JobEvent:
    fields: dict[str, Any] = {
        "job": "job-a",
        "phase": "start",
        "world": 8,
        "ts_ns": T0,
        "parallel": {"tp": 4, "dp": 2},
        "model": "llama-7b",
    }
    fields.update(overrides)
    return JobEvent(**fields)
