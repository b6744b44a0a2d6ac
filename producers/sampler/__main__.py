"""`python -m producers.sampler --interval 1`: one device sampler per node (docs/hook.md)."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from dataclasses import replace
from types import FrameType

from infra.settings import load_settings
from producers.emitter import BackgroundEmitter
from producers.hook import kafka_emitter_factory
from producers.relay import Relay, relay_emitter, relay_from_settings
from producers.sampler.sampler import NodeSampler
from producers.sampler.sources import open_source
from schemas import Topics


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m producers.sampler", description=__doc__)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--source", choices=("auto", "npu-smi", "nvml", "host"), default="auto")
    p.add_argument("--host", default=socket.gethostname(), help="host name samples carry (default: hostname)")
    p.add_argument("--run-dir", default=None, help="where hooks register devices (default: STEPLENS_RUN_DIR)")
    p.add_argument("--ticks", type=int, default=None, help="stop after this many samples per device")
    p.add_argument("--relay", action="store_true",
                   help="also run the node relay (producers/relay) on STEPLENS_RELAY_SOCKET (default "
                        "<run dir>/relay.sock): the node's ranks and this sampler then share one Kafka client")
    args = p.parse_args(argv)
    settings = load_settings()
    from pathlib import Path

    run_dir = Path(args.run_dir) if args.run_dir else settings.run_path
    topics = Topics(settings.topic_prefix)
    relay: Relay | None = None
    relay_out: BackgroundEmitter | None = None
    if args.relay:
        relay_out = relay_emitter(settings, topics)
        relay = relay_from_settings(settings, relay_out, topics).start()
        settings = replace(settings, relay_socket=str(relay.path))  # the sampler's own samples go through it
    emitter = kafka_emitter_factory(settings, topics, name="steplens-sampler")()
    source = open_source(args.source, args.interval)
    sampler = NodeSampler(source, emitter, args.host, run_dir, args.interval)

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        sampler.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        sampler.run(args.ticks)
    finally:
        source.close()
        emitter.close(10.0)
        if relay is not None and relay_out is not None:
            relay.stop()
            relay_out.close(10.0)
    print(f"sampled {sampler.samples} device samples from {source.kind}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
