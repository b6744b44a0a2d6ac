"""What the mitigation stage asks of a cluster scheduler, and Slurm's answer to it.

Why an interface: the policy decides per node; carrying it out is the scheduler's business, and fleets run
Slurm, Kubernetes or their own. `Scheduler` is the whole contract (read a partition's node states, drain,
resume, requeue); `Slurm` implements it with Slurm's own commands (`scontrol`, `sinfo`), so it works
against any Slurm the machine's client is configured for (`SLURM_CONF`). Kubernetes is the next adapter:
drain = `kubectl cordon` + evict the job's pods, resume = `uncordon`, requeue = delete the job's pods for its
controller to recreate (docs/operations.md#mitigation).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class SchedulerError(RuntimeError):
    """A scheduler command failed; the message carries the command and its output."""


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    state: str            # the scheduler's own words, lower case: "idle", "allocated", "drained", "down*" ...
    reason: str           # why it is drained or down ("" when it is not)

    @property
    def available(self) -> bool:
        """Takes work now: not drained, draining, down or in maintenance."""
        flags = ("drain", "down", "maint", "fail", "reserved", "unknown", "not_responding", "*")
        return not any(f in self.state for f in flags)


class Scheduler(Protocol):
    def nodes(self, partition: str) -> dict[str, NodeState]: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def job_named(self, name: str) -> str | None:
        """The scheduler's id of the running job with this name (the steplens job id), if there is one."""


class Slurm:
    """Slurm through its commands; `env` carries SLURM_CONF when the cluster is not the machine's default."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> None:
        self.env = dict(env) if env is not None else None
        self.timeout_s = timeout_s

    def _run(self, *argv: str) -> str:
        try:
            done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerError(f"`{' '.join(argv)}`: {exc}") from exc
        if done.returncode != 0:
            raise SchedulerError(f"`{' '.join(argv)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
        return done.stdout

    def nodes(self, partition: str) -> dict[str, NodeState]:
        out = self._run("sinfo", "--noheader", "--Node", "--partition", partition, "--format=%N|%T|%E")
        return parse_sinfo(out)

    def drain(self, node: str, reason: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def requeue(self, job_id: str) -> None:
        self._run("scontrol", "requeue", job_id)

    def job_named(self, name: str) -> str | None:
        out = self._run("squeue", "--noheader", "--states=RUNNING", f"--name={name}", "--format=%i")
        ids = out.split()
        return ids[0] if len(ids) == 1 else None  # none, or several: which one is ambiguous


class MemoryScheduler:
    """A partition's node states in memory, changed by drain and resume as a scheduler changes them: the
    what-if of `make bench-mitigation` (thousands of rounds, each of which would run `sinfo`) and the pure
    tests of the worker. `calls` lists what was asked of it; no job is known by name."""

    def __init__(self, names: list[str]) -> None:
        self.states = {n: NodeState(n, "allocated", "") for n in names}
        self.calls: list[tuple[str, str]] = []

    def nodes(self, partition: str) -> dict[str, NodeState]:
        return dict(self.states)

    def drain(self, node: str, reason: str) -> None:
        self.calls.append(("drain", node))
        self.states[node] = NodeState(node, "draining", reason)

    def resume(self, node: str) -> None:
        self.calls.append(("resume", node))
        self.states[node] = NodeState(node, "allocated", "")

    def requeue(self, job_id: str) -> None:
        self.calls.append(("requeue", job_id))

    def job_named(self, name: str) -> str | None:
        return None


def parse_sinfo(out: str) -> dict[str, NodeState]:
    """`sinfo --Node --format=%N|%T|%E` lines into node states (a node in two partitions listed once)."""
    nodes: dict[str, NodeState] = {}
    for line in out.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) < 2 or not parts[0]:
            continue
        reason = parts[2].strip() if len(parts) > 2 else ""
        nodes[parts[0]] = NodeState(parts[0], parts[1].strip().lower(), "" if reason == "none" else reason)
    return nodes
