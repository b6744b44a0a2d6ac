"""`python -m producers.relay`: the node relay, one per node (docs/hook.md#node-relay).

Ranks started with STEPLENS_RELAY_SOCKET pointing at the same path send through it, and (with
STEPLENS_RELAY_CONTROL on, the default) get their control commands from it: the relay runs the node's
one control-topic consumer.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from infra.settings import load_settings
from producers.relay.server import relay_emitter, relay_from_settings
from schemas import Topics


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m producers.relay", description=__doc__)
    p.add_argument("--socket", default=None, help="Unix socket path (default: STEPLENS_RELAY_SOCKET, else "
                   "<STEPLENS_RUN_DIR>/relay.sock)")
    args = p.parse_args(argv)
    settings = load_settings()
    path = Path(args.socket) if args.socket else settings.relay_path
    topics = Topics(settings.topic_prefix)
    emitter = relay_emitter(settings, topics)
    relay = relay_from_settings(settings, emitter, topics, path).start()
    done = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"relay listening on {path}", file=sys.stderr, flush=True)
    while not done.wait(1.0):
        pass
    relay.stop()
    emitter.close(10.0)
    s, e = relay.stats(), emitter.stats()
    if relay.control is not None:
        c = relay.control.hub.stats()
        print(f"relay control: {s.subscriptions} subscriptions, {c.received} commands read, {c.pushed} pushed, "
              f"{c.unrouted} for no rank here, {c.invalid} invalid", file=sys.stderr)
    # last: the summary line (bench/hook_cost.py keeps the last line)
    print(f"relay: {s.connections} connections, {s.records} records in, {e.exported} exported, "
          f"{s.refused} handed back, dropped {e.dropped}, {s.acks_unsettled} acks unsettled", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
