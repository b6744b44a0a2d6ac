"""`python -m producers.simulator`: send a simulated job (a FleetJob) to Kafka and write its ground truth.

Scenario mode (a catalogue scenario; step, kernel_summary and device events)::

    python -m producers.simulator --list-scenarios
    python -m producers.simulator --scenario slow_host --ranks 1024 --steps 200 --seed 3 \\
        --ground-truth run/gt.jsonl [--paced] [--streams step,kernel_summary,device] [--dry-run]

Hand-placed mode (step events through the emitter and its spool, like a rank hook; faults placed
by hand as catalogue specs: `straggler`, `gc_pauses`, `data_stalls`)::

    python -m producers.simulator --job demo --dp 4 --tp 4 --pp 4 --steps 200 \\
        --slow-rank 21:1.3 --gc-pause 50,51:350 --data-stall 120-122:450 --ground-truth run/gt.jsonl [--quiet]

Both write the catalogue's JSONL ground truth (one line per fault).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kafka import KafkaProducer

from infra.clients import kafka_client_config
from infra.settings import load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import Exporter, InMemoryExporter, KafkaExporter
from producers.simulator.attempts import plan_attempts
from producers.simulator.catalogue import (
    SCENARIOS,
    FaultSpec,
    build_faults,
    data_stalls,
    default_microbatches,
    gc_pauses,
    straggler,
)
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.ground_truth import write_ground_truth
from producers.simulator.model import ModelConfig
from producers.simulator.run import run_simulation
from producers.simulator.stream import SimRun, SimulatedClock, stream_runs
from producers.simulator.topology import Topology
from schemas import Topics


def parse_steps(text: str) -> list[int]:
    """'5,7,10-12' -> [5, 7, 10, 11, 12]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def parse_slow_rank(topo: Topology, text: str) -> FaultSpec:
    """'RANK:FACTOR[:FIRST[:LAST]]'."""
    parts = text.split(":")
    if not 2 <= len(parts) <= 4:
        raise argparse.ArgumentTypeError(f"expected RANK:FACTOR[:FIRST[:LAST]], got {text!r}")
    first = int(parts[2]) if len(parts) > 2 else 0
    last = int(parts[3]) if len(parts) > 3 else None
    return straggler(topo, int(parts[0]), float(parts[1]), first, last)


def _parse_steps_ms(text: str) -> tuple[list[int], float, list[int] | None]:
    """'STEPS:MS[:RANKS]' with STEPS and RANKS like '5,7,10-12'."""
    parts = text.split(":")
    if not 2 <= len(parts) <= 3:
        raise argparse.ArgumentTypeError(f"expected STEPS:MS[:RANKS], got {text!r}")
    ranks = parse_steps(parts[2]) if len(parts) == 3 else None
    return parse_steps(parts[0]), float(parts[1]), ranks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m producers.simulator", description=__doc__.splitlines()[0])
    p.add_argument("--job", default="sim-job")
    for name, default in (("dp", 4), ("tp", 4), ("pp", 2), ("ep", 1), ("cp", 1)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", action="append", default=[], metavar="RANK:FACTOR[:FIRST[:LAST]]")
    p.add_argument("--gc-pause", action="append", default=[], metavar="STEPS:MS[:RANKS]")
    p.add_argument("--data-stall", action="append", default=[], metavar="STEPS:MS[:RANKS]")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: settings)")
    p.add_argument("--topic-prefix", help="topic prefix (default: settings)")
    p.add_argument("--spool-dir", type=Path,
                   help="disk spool for events Kafka cannot take now (default: $STEPLENS_HOME/spool/simulator)")
    p.add_argument("--no-spool", action="store_true", help="drop (and count) events while Kafka is down")
    p.add_argument("--ground-truth", type=Path, help="where to write the ground truth (JSONL, one line per fault)")
    p.add_argument("--dry-run", action="store_true", help="export to memory instead of Kafka")
    p.add_argument("--jitter", type=float, default=None,
                   help=f"per-phase healthy jitter (≤ 0.08; default: the scenario's, else {Noise().jitter})")
    p.add_argument("--quiet", action="store_true",
                   help="no warm-up, checkpoint, eval, hiccup or GC steps (Noise.quiet); jitter only")
    fleet = p.add_argument_group("scenario mode")
    fleet.add_argument("--scenario", choices=sorted(SCENARIOS), help="a catalogue scenario (see --list-scenarios)")
    fleet.add_argument("--list-scenarios", action="store_true", help="print the catalogue and exit")
    fleet.add_argument("--ranks", type=int, default=64, help="world size; the layout follows (TP in a host, PP, DP)")
    fleet.add_argument("--paced", action="store_true", help="real time: each step is sent when it ends")
    fleet.add_argument("--unpacked", action="store_true",
                       help="one record per event (contract 1.1 form) instead of one array per host per topic per step")
    fleet.add_argument("--streams", default="step,kernel_summary,device", help="event types to send")
    for name in ("layers", "hidden", "heads", "kv-heads", "ffn", "seq", "micro-batch", "vocab", "microbatches"):
        fleet.add_argument(f"--{name}", type=int, help=f"model: {name} (default: the scenario's Llama-style model)")
    return p


def model_for(args: argparse.Namespace, base: ModelConfig) -> ModelConfig:
    """The scenario's model with the CLI's overrides."""
    names = ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "micro_batch", "vocab", "microbatches")
    overrides = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    return replace(base, **overrides)


def list_scenarios() -> str:
    return "\n".join(f"{s.name:<24} {s.layer:<9} {','.join(s.rules) or '-':<20} {s.summary}"
                     for s in SCENARIOS.values())


def noise_for(args: argparse.Namespace, default: Noise | None) -> Noise | None:
    """The healthy behaviour the options ask for (None: FleetJob's default)."""
    if args.quiet:
        return Noise.quiet() if args.jitter is None else Noise.quiet(args.jitter)
    return Noise(jitter=args.jitter) if args.jitter is not None else default


def run_fleet(args: argparse.Namespace) -> int:
    """One catalogue scenario through Kafka (or memory with --dry-run)."""
    settings = load_settings()
    sc = SCENARIOS[args.scenario]
    topo = sc.topology(args.ranks)
    faults = build_faults(sc, topo, args.steps, args.seed)
    attempts = plan_attempts(args.job, topo, args.steps, faults, args.seed, model=model_for(args, sc.model(topo)),
                             noise=noise_for(args, sc.noise()))
    if args.ground_truth:
        write_ground_truth(args.ground_truth, faults, args.job, args.seed, args.steps)
    include = tuple(k for k in args.streams.split(",") if k)
    for k in include:
        if k not in ("step", "kernel_summary", "device"):
            raise SystemExit(f"unknown stream {k!r}")
    run = SimRun.of_attempts(attempts, include=include, packed=not args.unpacked)
    topics = Topics(args.topic_prefix if args.topic_prefix is not None else settings.topic_prefix)
    sent = 0
    if args.dry_run:
        def count(topic: str, key: bytes, value: bytes) -> None:
            nonlocal sent
            sent += 1
        clock = SimulatedClock()  # a relaunch's gap costs no wall time here
        stream_runs([run], topics, count, paced=args.paced, clock=clock.now, idle=clock.advance)
    else:
        producer = KafkaProducer(**kafka_client_config(replace(settings, kafka_bootstrap=args.bootstrap or
                                                               settings.kafka_bootstrap), "producer"),
                                 acks=1, linger_ms=20, max_request_size=2 * 1024 * 1024,
                                 batch_size=1 << 20)  # 16 KB default batches: ~40 events per request

        def send(topic: str, key: bytes, value: bytes) -> None:
            nonlocal sent
            producer.send(topic, key=key, value=value)
            sent += 1
        stream_runs([run], topics, send, paced=args.paced, on_step=producer.flush if args.paced else None)
        producer.flush()
        producer.close()
    print(json.dumps({"job": args.job, "scenario": sc.name, "world": topo.world, "steps": args.steps,
                      "events": run.events, "records": sent, "rank_steps": run.rank_steps, "faults": len(faults)}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_scenarios:
        print(list_scenarios())
        return 0
    if args.scenario:
        return run_fleet(args)
    settings = load_settings()
    topology = Topology(dp=args.dp, tp=args.tp, pp=args.pp, ep=args.ep, cp=args.cp)
    faults: list[FaultSpec] = [parse_slow_rank(topology, s) for s in args.slow_rank]
    for spec in args.gc_pause:
        steps, ms, ranks = _parse_steps_ms(spec)
        faults += gc_pauses(topology, steps, ms, ranks)
    for spec in args.data_stall:
        steps, ms, ranks = _parse_steps_ms(spec)
        faults += data_stalls(topology, steps, ms, ranks)
    job = FleetJob(args.job, topology, args.steps, faults, args.seed,
                   model=model_for(args, ModelConfig(microbatches=default_microbatches(topology))),
                   noise=noise_for(args, None))
    if args.ground_truth:
        job.ground_truth().write(args.ground_truth)
    if args.bootstrap:
        settings = replace(settings, kafka_bootstrap=args.bootstrap)
    exporter: Exporter = InMemoryExporter() if args.dry_run else KafkaExporter(
        settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer"))
    topics = Topics(args.topic_prefix if args.topic_prefix is not None else settings.topic_prefix)
    spool_dir = None if args.no_spool else args.spool_dir
    spool_root = None if args.no_spool or args.spool_dir else settings.hook_spool_dir  # $STEPLENS_HOME/spool
    emitter = BackgroundEmitter(exporter, topics, spool_dir=spool_dir, spool_root=spool_root, name="simulator")
    stats = run_simulation(job, emitter)
    closed = emitter.close(timeout=30.0)
    print(json.dumps({"job": args.job, "world": topology.world, "steps": args.steps, "emitted": stats.emitted,
                      "exported": stats.exported, "dropped": stats.dropped, "spooled": stats.spooled,
                      "pending": stats.pending, "closed_cleanly": closed}))
    return 0 if closed and stats.pending == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
