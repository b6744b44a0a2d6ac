"""CLI: ``python -m infra.launcher up|down|status [--only kafka|clickhouse|alertmanager|prometheus|slurm]`` (the
Makefile calls it; ``up`` alone starts Kafka and ClickHouse, ``down`` alone stops them all and the loopback cluster),
``python -m infra.launcher up|down|status --cluster`` (3 Kafka nodes, ZooKeeper, 2x2 ClickHouse;
infra/launcher/cluster.py),
``python -m infra.launcher wipe --cluster`` (the stopped cluster's data deleted: the next up starts it empty),
``python -m infra.launcher rotate kafka:<principal>|clickhouse:<user>`` (docs/security.md)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from typing import Protocol

from infra.launcher.alertmanager import AlertmanagerServer
from infra.launcher.config import InfraConfig
from infra.launcher.process import InfraError
from infra.launcher.prometheus import PrometheusServer
from infra.launcher.services import down, status, up
from infra.launcher.slurm import SlurmCluster


class _Managed(Protocol):
    def install(self) -> None: ...

    def start(self) -> bool: ...

    def stop(self) -> None: ...

    def describe(self) -> str: ...


# started only by name (`up --only NAME`); `down` and `status` alone cover them too
OPTIONAL: dict[str, Callable[[InfraConfig], _Managed]] = {
    "alertmanager": AlertmanagerServer, "prometheus": PrometheusServer, "slurm": SlurmCluster,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra.launcher",
        description="Project-local Kafka (KRaft), ClickHouse, Alertmanager, Prometheus and Slurm on 127.0.0.1.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="environment (defaults in brackets):\n"
        "  STEPLENS_HOME                         where services keep data and logs [./.steplens]\n"
        "  STEPLENS_KAFKA_PORT                   the broker's listener [19092]; the clients follow it\n"
        "                                        unless STEPLENS_KAFKA_BOOTSTRAP names another broker\n"
        "  STEPLENS_KAFKA_CONTROLLER_PORT        KRaft controller [19093]\n"
        "  STEPLENS_CLICKHOUSE_TCP_PORT          ClickHouse native protocol [19000]\n"
        "  STEPLENS_CLICKHOUSE_HTTP_PORT         ClickHouse HTTP [18123]\n"
        "  STEPLENS_CLICKHOUSE_INTERSERVER_PORT  ClickHouse interserver [19009]\n"
        "  STEPLENS_ALERTMANAGER_PORT            Alertmanager [19094]\n"
        "  STEPLENS_PROMETHEUS_PORT              Prometheus [19090]\n"
        "  STEPLENS_SLURMCTLD_PORT               slurmctld [16817]\n"
        "  STEPLENS_SLURMD_PORT                  the first of 4 slurmd [16818]\n"
        "  STEPLENS_CLUSTER_*                    the loopback cluster's ports (docs/scaling.md)",
    )
    parser.add_argument("command", choices=("up", "down", "status", "rotate", "wipe"))
    parser.add_argument("target", nargs="?", help="rotate: kafka:<principal> or clickhouse:<user>")
    parser.add_argument(
        "--only",
        choices=("kafka", "clickhouse", *OPTIONAL),
        help="act on one service (default: up starts Kafka and ClickHouse; down and status cover them all)",
    )
    parser.add_argument(
        "--cluster", action="store_true",
        help="the loopback cluster instead: 3 Kafka nodes, ZooKeeper, 2 shards x 2 ClickHouse replicas "
        "(infra/launcher/cluster.py; ports STEPLENS_CLUSTER_*)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    return parser


def _status(cfg: InfraConfig, kafka: bool, clickhouse: bool, optional: list[str]) -> str:
    lines = [OPTIONAL[name](cfg).describe() for name in optional]
    return "\n".join([*lines, status(cfg, kafka=kafka, clickhouse=clickhouse)])


def _cluster(cfg: InfraConfig, command: str) -> int:
    from infra.launcher.cluster import Cluster

    cluster = Cluster(cfg)
    if command == "up":
        t0 = time.monotonic()
        for name, did in cluster.start().items():
            logging.getLogger("infra").info("%s: %s", name, "started" if did else "already running")
        logging.getLogger("infra").info("up --cluster took %.1fs", time.monotonic() - t0)
    elif command == "down":
        cluster.stop()
    elif command == "rotate":
        raise InfraError("rotate acts on the single-node services only")
    elif command == "wipe":
        for path in cluster.wipe():
            logging.getLogger("infra").info("removed %s", path)
    print(cluster.describe())
    return 0


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
    logging.getLogger("clickhouse_driver").setLevel(logging.CRITICAL)  # refused connects while servers boot
    kafka = args.only in (None, "kafka")
    clickhouse = args.only in (None, "clickhouse")
    # up alone keeps to the pipeline's services; down and status alone cover the optional ones too
    optional = [name for name in OPTIONAL if args.only in (None, name)]
    try:
        cfg = InfraConfig.from_env()
        if args.cluster:
            return _cluster(cfg, args.command)
        if args.command == "wipe":
            raise InfraError("wipe acts on the loopback cluster only (--cluster)")
        if args.command == "up":
            t0 = time.monotonic()
            started = up(cfg, kafka=kafka, clickhouse=clickhouse) if args.only not in OPTIONAL else {}
            if args.only in OPTIONAL:
                service = OPTIONAL[args.only](cfg)
                service.install()
                started[args.only] = service.start()
            for name, did in started.items():
                logging.getLogger("infra").info("%s: %s", name, "started" if did else "already running")
            logging.getLogger("infra").info("up took %.1fs", time.monotonic() - t0)
            print(_status(cfg, kafka, clickhouse, optional))
        elif args.command == "down":
            errors: list[str] = []
            for name in optional:
                try:
                    OPTIONAL[name](cfg).stop()
                except InfraError as exc:
                    errors.append(str(exc))
            if kafka or clickhouse:
                down(cfg, kafka=kafka, clickhouse=clickhouse)
            if args.only is None:  # down alone also stops a loopback cluster (`up --cluster`)
                from infra.launcher.cluster import Cluster

                Cluster(cfg).stop()
            if errors:
                raise InfraError("\n".join(errors))
            print(_status(cfg, kafka, clickhouse, optional))
        elif args.command == "rotate":
            from infra.launcher.rotation import rotate

            if not args.target:
                raise InfraError("rotate needs a target: kafka:<principal> or clickhouse:<user>")
            print(rotate(cfg, args.target))
        else:
            print(_status(cfg, kafka, clickhouse, optional))
    except InfraError as exc:
        print(f"infra: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
