"""CLI: ``python -m infra up|down|status [--only kafka|clickhouse]`` (the Makefile calls it),
``python -m infra rotate kafka:<principal>|clickhouse:<user>`` (docs/security.md)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from infra.services import InfraConfig, InfraError, down, status, up


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra",
        description="Project-local Kafka (KRaft) and ClickHouse on 127.0.0.1.",
        epilog="Environment: STEPLENS_HOME, STEPLENS_KAFKA_PORT, STEPLENS_KAFKA_CONTROLLER_PORT, "
        "STEPLENS_CLICKHOUSE_TCP_PORT, STEPLENS_CLICKHOUSE_HTTP_PORT, "
        "STEPLENS_CLICKHOUSE_INTERSERVER_PORT.",
    )
    parser.add_argument("command", choices=("up", "down", "status", "rotate"))
    parser.add_argument("target", nargs="?", help="rotate: kafka:<principal> or clickhouse:<user>")
    parser.add_argument(
        "--only",
        choices=("kafka", "clickhouse"),
        help="act on one service instead of both",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; exit status 1 with a readable message on InfraError."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="infra: %(message)s",
        stream=sys.stderr,
    )
    # kafka-python logs every refused connection while the broker boots; the CLI
    # reports readiness itself, so keep the client library quiet here.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    kafka = args.only in (None, "kafka")
    clickhouse = args.only in (None, "clickhouse")
    try:
        cfg = InfraConfig.from_env()
        if args.command == "up":
            t0 = time.monotonic()
            started = up(cfg, kafka=kafka, clickhouse=clickhouse)
            for name, did in started.items():
                logging.getLogger("infra").info("%s: %s", name, "started" if did else "already running")
            logging.getLogger("infra").info("up took %.1fs", time.monotonic() - t0)
            print(status(cfg, kafka=kafka, clickhouse=clickhouse))
        elif args.command == "down":
            down(cfg, kafka=kafka, clickhouse=clickhouse)
            print(status(cfg, kafka=kafka, clickhouse=clickhouse))
        elif args.command == "rotate":
            from infra.rotation import rotate

            if not args.target:
                raise InfraError("rotate needs a target: kafka:<principal> or clickhouse:<user>")
            print(rotate(cfg, args.target))
        else:
            print(status(cfg, kafka=kafka, clickhouse=clickhouse))
    except InfraError as exc:
        print(f"infra: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
