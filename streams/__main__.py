"""`python -m streams worker --role detect|land|parse`: run one steplens worker in the foreground."""

from __future__ import annotations

import argparse
import logging

from faust import Worker

from schemas import Topics
from steplens.config import load_settings
from streams.app import create_app
from streams.topics_admin import ensure_topics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run a Faust worker")
    worker.add_argument("--role", choices=("detect", "land", "parse"), required=True)
    worker.add_argument("--loglevel", default="info")
    args = parser.parse_args(argv)
    settings = load_settings()
    logging.basicConfig(level=args.loglevel.upper())
    ensure_topics(settings, Topics(settings.topic_prefix), settings.topic_partitions)
    app = create_app(settings, args.role)
    Worker(app, loglevel=args.loglevel, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
