"""Topic names and message keys, in one place so producers, workers and tests agree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topics:
    """All topics under one prefix (default `steplens.`), so deployments can share a cluster."""

    prefix: str = "steplens."

    @property
    def steps(self) -> str:
        return f"{self.prefix}steps"

    @property
    def kernels(self) -> str:
        return f"{self.prefix}kernels"

    @property
    def kernel_summaries(self) -> str:
        """Always-on per-rank-step kernel aggregates (contract 1.1)."""
        return f"{self.prefix}kernel-summaries"

    @property
    def device(self) -> str:
        return f"{self.prefix}device"

    @property
    def profiles(self) -> str:
        return f"{self.prefix}profiles"

    @property
    def jobs(self) -> str:
        return f"{self.prefix}jobs"

    @property
    def incidents(self) -> str:
        """The alerts topic: incidents for downstream consumers."""
        return f"{self.prefix}incidents"

    @property
    def actions(self) -> str:
        """Mitigation decisions and actions, keyed by action id (streams/mitigate/, issue #48)."""
        return f"{self.prefix}actions"

    @property
    def control(self) -> str:
        return f"{self.prefix}control"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}deadletter"

    @property
    def detect_partials(self) -> str:
        """Internal to detect: column chunks per (job, kind, batch), keyed by job (the engine's one shuffle)."""
        return f"{self.prefix}detect-partials"

    @property
    def detect_state(self) -> str:
        """Internal to detect: compacted per-job engine snapshots (streams/detect/state/store.py)."""
        return f"{self.prefix}detect-state"

    def inputs(self) -> tuple[str, ...]:
        return (self.steps, self.kernels, self.kernel_summaries, self.device, self.profiles, self.jobs)

    def all(self) -> tuple[str, ...]:
        return (*self.inputs(), self.incidents, self.actions, self.control, self.deadletter, self.detect_partials,
                self.detect_state)


def rank_key(job: str, rank: int) -> bytes:
    """Per-rank key: keeps one rank's events in order on one partition."""
    return f"{job}/{rank}".encode()


def job_key(job: str) -> bytes:
    return job.encode()


def group_key(job: str, domain: str, group: int) -> bytes:
    return f"{job}/{domain}/{group}".encode()
