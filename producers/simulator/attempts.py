"""Job attempts: a crash ends a launch of a job, a relaunch under the same job id starts the next.

Fleets restart jobs all the time (Meta: 466 interruptions in 54 days on 16k GPUs), the way the
launchers do it: torchrun's elastic agent tears every worker down when one fails and starts
them again (`TORCHELASTIC_RESTART_COUNT` counts up), Slurm requeues, Kubernetes operators
recreate the pods. A relaunch keeps the job id, restarts from the last checkpoint (so it
re-runs steps the crashed launch already ran, with new times) after a gap (scheduling,
rendezvous, checkpoint load), and warms up again. An elastic relaunch forms a smaller world
without the evicted host: its ranks are numbered afresh over the hosts left, which keep their
names, and the data-parallel degree shrinks.

A catalogue scenario states this with a `job_crash` fault (`FaultSpec.kind`) in the attempt
that dies: its `start` is the step at which every process is gone (no step, no device
sample, no `end`), and its magnitude says what follows: `restart_from_step` (the checkpoint;
absent: no relaunch), `restart_after_s` (the gap, in seconds of the stream's clock) and
`evict_host` (an elastic relaunch without that host). Faults of a later attempt carry its
number (`FaultSpec.attempt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from producers.simulator.catalogue import FaultSpec
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology

SEED_STRIDE = 1_000  # a relaunch draws new noise: attempt n uses seed + n × SEED_STRIDE


@dataclass(frozen=True, slots=True)
class Attempt:
    """One launch of a job: its FleetJob and how long after the previous launch's crash it starts."""

    job: FleetJob
    gap_s: float = 0.0


def without_host(topo: Topology, host: int) -> Topology:
    """The layout of an elastic relaunch that lost one host: the data-parallel degree shrinks by
    the replicas that host's devices held (the model-parallel groups must stay whole)."""
    per_replica = topo.tp * topo.pp * topo.cp
    world = topo.world - topo.devices_per_host
    if not 0 <= host < topo.hosts:
        raise ValueError(f"host {host} outside the job's {topo.hosts} hosts")
    if world < per_replica or world % per_replica:
        raise ValueError(f"{world} ranks left do not form whole TP×PP×CP replicas of {per_replica}")
    dp = world // per_replica
    ep = topo.ep if dp % topo.ep == 0 else 1
    return replace(topo, dp=dp, ep=ep)


def plan_attempts(job_id: str, topo: Topology, steps: int, faults: Sequence[FaultSpec], seed: int,
                  **job_kw: Any) -> list[Attempt]:
    """Every launch the faults describe, in order: attempt 0 runs from step 0; each `job_crash`
    with a `restart_from_step` adds the next attempt, from that step, after `restart_after_s`."""
    out: list[Attempt] = []
    attempt, first, gap = 0, 0, 0.0
    names = [f"node-{h}" for h in range(topo.hosts)]
    while True:
        own = [f for f in faults if f.attempt == attempt]
        job = FleetJob(job_id, topo, steps, own, seed + attempt * SEED_STRIDE, attempt=attempt, first_step=first,
                       host_names=names, **job_kw)
        out.append(Attempt(job, gap))
        crash = next((f for f in own if f.kind == "job_crash"), None)
        if crash is None or "restart_from_step" not in crash.magnitude:
            break
        first = int(crash.magnitude["restart_from_step"])
        gap = float(crash.magnitude.get("restart_after_s", 0.0))
        if "evict_host" in crash.magnitude:
            host = int(crash.magnitude["evict_host"])
            topo = without_host(topo, host)
            names = [n for i, n in enumerate(names) if i != host]
        attempt += 1
    later = {f.attempt for f in faults} - set(range(attempt + 1))
    if later:
        raise ValueError(f"faults of attempts {sorted(later)} that no crash leads to")
    return out
