"""`steplens replay PATH… [--job ID] [--speed X] [--repeat N] [--keep-time]`: the argument parser and the run.

Reads the dumps with the offline importers, converts them (producers/replay/convert.py) and produces
them to Kafka through the ordinary emitter (settings from STEPLENS_* as every other command), with a
tqdm progress bar on a terminal and plain lines otherwise (infra.progress). The steplens topics are
created when missing (as the demo and the workers do). Exit status: 0 every event delivered, 1 some were dropped or not
delivered (the emitter says why) or Kafka is unreachable, 2 the paths could not be read or converted.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from infra.settings import Settings

DESCRIPTION = ("replay real profiler outputs (Kineto .json[.gz], torch_npu *_ascend_pt folders, msprof-analyze "
               "cluster output) through Kafka as contract events, so the live detector judges them")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="the per-rank dumps of one job (files or a folder), or one cluster_analysis_output")
    parser.add_argument("--job", help="job id to replay as (default: replay-<first path's name>-<time>)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="1 = the trace's own pace, 2 = twice as fast, 0 = as fast as possible (default 1)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="play the trace's steps N times in a row (a 1-2 step profile is too short for the "
                             "detector's persistence rules; default 1)")
    parser.add_argument("--keep-time", action="store_true",
                        help="keep the trace's own (epoch) time stamps instead of re-basing them to now")


def default_job(paths: list[Path], now_s: float) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", paths[0].resolve().name.removesuffix(".gz").removesuffix(".json"))
    return f"replay-{stem[:40]}-{time.strftime('%Y%m%d%H%M%S', time.gmtime(now_s))}"


def run(args: argparse.Namespace, settings: Settings, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stderr  # looked up per call: tests and callers swap sys.stderr
    from infra.clients import kafka_client_config
    from producers.emitter import BackgroundEmitter
    from producers.exporter import KafkaExporter
    from producers.replay.load import load_replay
    from producers.replay.send import progress_printer, send
    from schemas import Topics
    from streams.profiles.jsonstream import TraceFormatError
    from streams.topics_admin import TopicsUnavailable, ensure_topics

    if args.speed < 0 or args.repeat < 1:
        print("steplens: error: --speed must be >= 0 and --repeat >= 1", file=out)
        return 2
    now = time.time()
    job = args.job or default_job(args.paths, now)
    try:
        replay = load_replay(args.paths, job, time.time_ns(), keep_time=args.keep_time, repeats=args.repeat,
                             warn=lambda m: print(f"steplens: warning: {m}", file=out))
    except (TraceFormatError, ValueError, OSError) as exc:
        print(f"steplens: error: {exc}", file=out)
        return 2
    print(f"replay {job}: {replay.format}, {replay.world} ranks (trace ranks {sorted(replay.ranks)}), "
          f"{len(replay.steps)} steps ({replay.repeats} x), speed {args.speed:g}", file=out)
    for note in replay.notes:
        print(f"  note: {note}", file=out)
    topics = Topics(settings.topic_prefix)
    try:  # a broker that does not auto-create topics would hold every record until the flush times out
        ensure_topics(settings, topics, settings.topic_partitions, wait_s=30.0)
    except TopicsUnavailable as exc:
        print(f"steplens: error: Kafka at {settings.kafka_bootstrap}: {exc}", file=out)
        return 1
    exporter = KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer"))
    # no spool: a replay is re-run, not recovered; a spool left by an earlier run against another broker or
    # prefix would be replayed first and hold every new record behind records that never deliver
    emitter = BackgroundEmitter(exporter, topics, name="replay", spool_dir=None)
    from infra.progress import Progress

    bar = Progress(len(replay.steps), "replay", stream=out, unit="step")
    try:
        result = send(replay, emitter, speed=args.speed, progress=progress_printer(bar))
    finally:
        bar.close()
        emitter.close(timeout=30)
    late = "" if result.delivered else ", some not yet delivered when the flush timed out (spooled)"
    print(f"replay {job}: {result.events} events sent, {result.dropped} dropped{late}, {result.seconds:.1f} s",
          file=out)
    return 0 if result.dropped == 0 and result.delivered else 1
