"""The fleet reference the below-expected scenarios are judged against (issue #44), fitted on other layouts.

A new fleet may start from an exported reference (`STEPLENS_REFERENCE_MODELS`). The bench's is fitted
the way a fleet learns its own: healthy simulated jobs of OTHER layouts and sizes than the scenarios'
(so no scenario is judged on a model fitted on its own input) streamed through decode and one
`FleetEngine` in process, whose learner pools them and refits (`streams/detect/scopes/expected.py`).

    python -m bench.detection.reference --out /tmp/reference.json
"""

from __future__ import annotations

import argparse
from collections import deque
from pathlib import Path

from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.stream import SimRun, stream_runs
from producers.simulator.topology import Topology
from schemas import Topics
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine, Output
from streams.detect.ingest.decode import decode_batch
from streams.model.reference import ReferenceModels

# (dp, tp, pp) of the healthy jobs the reference learns from: none is a layout of a scenario the bench runs
# (64 ranks TP4 PP2 DP8, TP2 MoE, 256 ranks TP8 PP2 DP16 / TP4 PP4 DP16, 1,024 ranks TP4 PP4 DP64)
TRAINING_LAYOUTS = ((4, 4, 2), (16, 4, 2), (4, 4, 4), (8, 4, 4), (4, 8, 2), (8, 8, 2), (2, 8, 4), (2, 1, 1),
                    (8, 1, 1), (4, 2, 1))
STEPS = 40
BATCH = 256  # messages per decode batch: a few steps of a job (its device samples among them)


def feed(jobs: list[FleetJob], fleet: FleetEngine, later: dict[str, int] | None = None,
         lag: dict[str, int] | None = None, lag_jobs_topic: bool = True,
         read_ahead: dict[str, str] | None = None) -> list[Output]:
    """Stream `jobs` (steps, kernel summaries, device samples, interleaved) through decode into `fleet` on a
    simulated clock, as the bench's in-process replay does; every output. `later`: job id -> steps of the
    others sent before it starts. `lag`: job id -> decode batches its messages (those keyed by the job) reach
    the engine behind the others': their partitions behind in a backlog, the job's own clock unchanged.
    `lag_jobs_topic` False: the jobs' `start`/`end` records come in on time (a small topic read up).
    `read_ahead`: job id -> the host (the `job/host` key of its packed records) NOT held back by `lag`: its
    partition read ahead of the rest, the job's newest reports run ahead of the steps it can judge."""
    out: list[Output] = []
    buffer: list[bytes] = []
    clock = [1_700_000_000_000_000_000]
    held: dict[str, deque[list[bytes]]] = {job: deque([[]]) for job in (lag or {})}

    def flush() -> None:
        for job, queue in held.items():
            queue.append([])
            while len(queue) > (lag or {})[job]:
                buffer.extend(queue.popleft())
        chunks, _ = decode_batch(buffer, 1 << 20)
        buffer.clear()
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 0, 0
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), clock[0]))
        clock[0] += 50_000_000
        out.extend(fleet.tick(clock[0]))

    def send(topic: str, key: bytes, value: bytes) -> None:
        job, _, rest = key.decode().partition("/")
        ahead = rest != "" and rest == (read_ahead or {}).get(job)
        if job in held and not ahead and (lag_jobs_topic or topic != Topics("").jobs):
            held[job][-1].append(value)
        else:
            buffer.append(value)
        if len(buffer) >= BATCH:
            flush()

    def idle(seconds: float) -> None:
        flush()
        clock[0] += int(seconds * 1e9)

    stream_runs([SimRun(job) for job in jobs], Topics(""), send, clock=lambda: clock[0], idle=idle, later=later)
    for queue in held.values():  # the backlog drains
        while queue:
            buffer.extend(queue.popleft())
    held.clear()
    flush()
    for _ in range(200):  # the jobs' ends and last frames
        clock[0] += 500_000_000
        out.extend(fleet.tick(clock[0]))
    fleet.learn(clock[0], force=True)
    return out


def learn(jobs: list[FleetJob], cfg: DetectionConfig | None = None) -> ReferenceModels | None:
    """Stream `jobs` (healthy) through decode and one FleetEngine; the reference its learner fits."""
    fleet = FleetEngine(cfg or DetectionConfig())
    feed(jobs, fleet)
    return fleet.learner.reference()


def training_jobs(seed: int = 0, steps: int = STEPS) -> list[FleetJob]:
    """Healthy jobs of TRAINING_LAYOUTS, the default healthy noise."""
    jobs = []
    for i, (dp, tp, pp) in enumerate(TRAINING_LAYOUTS):
        topo = Topology(dp=dp, tp=tp, pp=pp, ep=1, devices_per_host=8)
        jobs.append(FleetJob(f"ref-{dp}x{tp}x{pp}-s{seed}", topo, steps, (), seed * 100 + i, noise=Noise()))
    return jobs


def build(out: Path, seed: int = 0) -> ReferenceModels:
    ref = learn(training_jobs(seed), DetectionConfig(expected_min_jobs=1))
    if ref is None:
        raise RuntimeError("the healthy jobs taught the fleet nothing")
    out.write_bytes(ref.to_json())
    return ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    ref = build(args.out, args.seed)
    print(f"{len(ref.curves)} curves, {len(ref.kernels)} kernel benchmarks -> {args.out}")


if __name__ == "__main__":
    main()
