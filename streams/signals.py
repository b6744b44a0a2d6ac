"""Rules R1–R10 fed from released frames and device samples; their state per job.

This is the glue between the engine's frames and the pure rule modules in streams/rules/:
it picks the series each rule reads, keeps one state per series and turns alarms into
Findings on the right scope (rank, host, device, group, link, job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from steplens.config import DetectionConfig
from streams.scopes.finding import Finding
from streams.windows.step_frames import Frame, Topology


@dataclass(slots=True)
class SignalState:
    rules: dict[str, Any] = field(default_factory=dict)
    pending: list[Finding] = field(default_factory=list)


def frame_findings(frame: Frame, topo: Topology, state: SignalState, cfg: DetectionConfig,
                   timings: dict[str, float]) -> list[Finding]:
    return []


def device_findings(chunk: dict[str, Any], state: SignalState, cfg: DetectionConfig,
                    timings: dict[str, float]) -> list[Finding]:
    return []
