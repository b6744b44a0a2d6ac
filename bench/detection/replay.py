"""In-process replay of `make bench-detection`'s runs: same simulator, decode and engine, no Kafka.

For iterating on detection quality in seconds: every run of the bench plan is encoded as on
the wire, decoded in batches by `streams.detect.ingest.decode.decode_batch` (what the decode loop
does), merged through the chunk codec and fed to one `FleetEngine` on a simulated clock;
the incidents are scored against the ground truth with the bench's own scorer. The decode
stage counts as current with its input (no backlog). The Kafka bench stays the reference:
`python -m bench.detection.replay --quick` is the cheap loop, `make bench-detection` the proof.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.detection.run import (
    add_trait_option,
    plan_runs,
    render_table,
    run_record,
    run_traits,
    score_records,
    write_result,
)
from bench.provenance import git_commit, machine
from infra.progress import Progress
from producers.simulator.stream import stream_runs
from schemas import Incident, Topics, bounded, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch

TICK_NS = 50_000_000  # simulated wall time per decoded batch
SKEW_PARTITIONS = 4   # the device topic's partitions (keyed per device) for --device-skew
IDLE_TICK_NS = 500_000_000  # simulated wall time per tick without input (a relaunch's gap, the final drain)


def replay(args: argparse.Namespace, cfg: DetectionConfig | None = None, batch: int = 4096,
           on_send: Callable[[str, bytes, bytes], None] | None = None) -> dict[str, Any]:
    """Run the bench plan through the engine in process; returns detection.json's figures (and
    `runs`: the plan's (label, SimRun) pairs). `on_send` sees every message as sent (topic, key, value).

    `args.device_lead` (batches, default 0) holds step and kernel-summary messages back that many
    decode batches behind the device samples: the topic skew a backlogged Kafka pipeline shows.
    `args.device_skew` (batches) holds the device samples of one of the device topic's partitions
    (keyed per device) that many batches behind the others: one tick's samples arrive split.
    `args.summary_backlog` holds every kernel summary until all other records are in, each batch
    marked as read from a backlog: the order a multi-minute backlog of packed records gives
    (small step records fetched far ahead of large summary records, job ends early).
    """
    runs = plan_runs(args, time.strftime("%H%M%S"))
    fleet = FleetEngine(cfg or DetectionConfig())
    messages: list[dict[str, Any]] = []
    buffer: list[bytes] = []
    clock = [1_700_000_000_000_000_000]

    def flush() -> None:
        chunks, _ = decode_batch(buffer, 1 << 20)
        buffer.clear()
        out: list[object] = []
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = (30_000_000_000, 50_000) if backlog else (0, 0)
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), clock[0]))
        clock[0] += TICK_NS
        out.extend(fleet.tick(clock[0]))
        messages.extend(orjson.loads(encode(bounded(o))) for o in out if isinstance(o, Incident))

    backlog = bool(getattr(args, "summary_backlog", False))
    summaries_topic = Topics("").kernel_summaries
    summaries: list[bytes] = []
    lead = int(getattr(args, "device_lead", 0) or 0)
    skew = int(getattr(args, "device_skew", 0) or 0)
    device_topic = Topics("").device
    held: deque[list[bytes]] = deque([[]])
    lagging: deque[list[bytes]] = deque([[]])  # device samples of the lagging partition
    sent = [0]

    def send(topic: str, key: bytes, value: bytes) -> None:
        if on_send is not None:
            on_send(topic, key, value)
        if backlog and topic == summaries_topic:
            summaries.append(value)
            return
        if lead and topic != device_topic:
            held[-1].append(value)
        elif skew and topic == device_topic and zlib.crc32(key) % SKEW_PARTITIONS == 0:
            lagging[-1].append(value)
        else:
            buffer.append(value)
        sent[0] += 1
        if sent[0] % batch == 0:
            for queue, behind in ((held, lead), (lagging, skew)):
                if behind:
                    queue.append([])
                    while len(queue) > behind:
                        buffer.extend(queue.popleft())
            flush()

    def wait(ticks: int) -> None:  # simulated time passes without input, the engine ticking
        for _ in range(ticks):
            clock[0] += IDLE_TICK_NS
            messages.extend(orjson.loads(encode(bounded(o))) for o in fleet.tick(clock[0]) if isinstance(o, Incident))

    def idle(seconds: float) -> None:  # every run waits for a relaunch
        flush()
        wait(max(1, round(seconds * 1e9 / IDLE_TICK_NS)))

    with Progress(max((r.job.steps for _, r in runs), default=0), "replay", unit="steps") as bar:
        stream_runs([r for _, r in runs], Topics(""), send, on_step=bar.update, clock=lambda: clock[0], idle=idle)
    for queue in (held, lagging):
        while queue:
            buffer.extend(queue.popleft())
    flush()
    for i in range(0, len(summaries), batch):
        buffer.extend(summaries[i:i + batch])
        flush()
    wait(400)  # 200 s of simulated time: every job's last frames and silences judged
    records = [run_record(label, run) for label, run in runs]
    result = score_records(records, messages)
    result["traits"] = run_traits(args).to_dict()
    result["messages"] = messages
    result["runs"] = runs
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.detection.replay", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--scenario", action="append")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--large-ranks", type=int, default=1024)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--healthy-runs", type=int, default=0)
    p.add_argument("--large-healthy-runs", type=int, default=None)
    p.add_argument("--jittery-runs", type=int, default=None)
    p.add_argument("--show", action="store_true", help="print every incident (latest state)")
    p.add_argument("--device-lead", type=int, default=0, metavar="BATCHES",
                   help="step and kernel-summary messages reach the engine this many decode batches after the "
                        "device samples sent with them (topic skew under a backlog)")
    p.add_argument("--device-skew", type=int, default=0, metavar="BATCHES",
                   help="the device samples of one device-topic partition (of 4, keyed per device) reach the engine "
                        "this many decode batches after the others (partition skew under a backlog)")
    p.add_argument("--summary-backlog", action="store_true",
                   help="every kernel summary reaches the engine after all other records, read as a backlog "
                        "(the packed-records order of a long Kafka backlog)")
    add_trait_option(p)
    p.add_argument("--out", type=Path, help="also write the figures to this JSON file (mode: in-process replay)")
    p.add_argument("--reference-models", type=Path, metavar="JSON",
                   help="the fleet's reference export the engine starts from (bench.detection.reference builds "
                        "one from healthy jobs of other layouts); default: none, the engine learns its own")
    args = p.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 60)
    t0 = time.monotonic()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    refs = getattr(args, "reference_models", None)
    result = replay(args, DetectionConfig(reference_models=str(refs)) if refs else None)
    if args.show:
        last: dict[str, dict[str, Any]] = {}
        for m in result["messages"]:
            last[m["incident_id"]] = m
        for m in last.values():
            print(m["job"].split("-", 2)[-1], m["rule"], m.get("rules"), m.get("scope"), (m.get("ranks") or [])[:8],
                  m.get("host"), m.get("link"), m.get("step_first"), m.get("step_last"), m["summary"][:110])
    del result["messages"], result["runs"]
    result["duration_s"] = round(time.monotonic() - t0, 1)
    if args.out:
        result.update({"mode": "in-process replay (bench/detection/replay.py): no Kafka, no workers",
                       "machine": machine(), "started": started, "git": git_commit(), "quick": bool(args.quick),
                       "device_lead_batches": args.device_lead,
                       "device_skew_batches": args.device_skew, "summary_backlog": args.summary_backlog,
                       "argv": sys.argv[1:] if argv is None else argv})
        write_result(args.out, result)
    else:
        print(render_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
