"""The Faust apps' common ground: one base app per role, raw topics, and the role switch.

`detect` (windows + analyses -> alerts, `streams/detect_app.py`) and `land` (everything ->
ClickHouse, `streams/land_app.py`) are two apps with two consumer groups on purpose: a
ClickHouse outage stalls landing but never detection, and a burst of detection work never
delays landing. Agents run with concurrency=1: windows and detectors keep state that must
see records in order (faust-streaming issue #606).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import faust

from infra.clients import faust_broker_config
from steplens.config import Settings

Role = Literal["detect", "land", "parse"]


def now_ns() -> int:
    return time.time_ns()


def base_app(settings: Settings, role: Role) -> faust.App:
    datadir = settings.home / "faust" / role
    datadir.mkdir(parents=True, exist_ok=True)
    return faust.App(
        f"{settings.app_id}-{role}",
        datadir=str(datadir),
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        topic_allow_declare=False,
        broker_commit_interval=1.0,
        producer_max_request_size=4_194_304,
        producer_acks=-1,
        stream_wait_empty=False,
        **faust_broker_config(settings, role),
    )


def raw_topic(app: faust.App, *names: str) -> Any:
    return app.topic(*names, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")


def create_app(settings: Settings, role: Role) -> faust.App:
    if role == "detect":
        from streams.detect_app import create_detect_app

        return create_detect_app(settings)
    if role == "parse":
        from streams.parse_app import create_parse_app

        return create_parse_app(settings)
    from streams.land_app import create_land_app

    return create_land_app(settings)
