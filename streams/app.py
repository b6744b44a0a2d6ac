"""The Faust apps' common ground: one base app per role, raw topics, the workers' Kafka timeouts.

`detect` (windows + analyses -> alerts, `streams/detect/app.py`) and `parse` (profile dumps ->
diagnoses, `streams/profiles/app.py`) are the Faust apps; landing (everything -> ClickHouse,
`streams/land/worker.py`) is a plain loop in a consumer group of its own, on purpose: a
ClickHouse outage stalls landing but never detection, and a burst of detection work never
delays landing. Agents run with concurrency=1: windows and detectors keep state that must
see records in order (faust-streaming issue #606). The role switch (`create_app`) is in the
worker's entry point, streams/__main__.py: here it would put this module, which every app
imports, in a circle with them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

import faust

from infra.clients import faust_broker_config
from infra.files import private_dir
from infra.settings import Settings
from streams.faust_transport import App

Role = Literal["detect", "parse"]  # the Faust roles


def now_ns() -> int:
    return time.time_ns()


@dataclass(frozen=True, slots=True)
class WorkerTimeouts:
    """Kafka client timeouts of the workers, in seconds, chosen so a crash costs seconds, not a minute.

    Faust's defaults (60 s session and rebalance timeouts) stall a partition for a minute
    after its worker dies. With these, the broker notices a dead worker after
    `session` (6 s, the broker's `group.min.session.timeout.ms`), the rebalance completes
    within `rebalance` and a restarted worker owns its partitions again ~10 s after the kill.
    The producer timeout is deliberately long: a send that fails crashes the agent, and
    a broker restart (a minute or more) must only delay sends. See docs/operations.md.
    """

    session: float = 6.0            # broker_session_timeout: a silent member is dead after this
    heartbeat: float = 1.5          # broker_heartbeat_interval: a quarter of the session timeout
    rebalance: float = 10.0         # broker_rebalance_timeout: time members get to rejoin
    request: float = 20.0           # broker_request_timeout: > session and > rebalance (JoinGroup blocks)
    max_poll_interval: float = 120.0  # broker_max_poll_interval: a consumer loop stuck longer is a livelock
    producer_request: float = 300.0   # producer_request_timeout: outlives a broker restart
    # kafka-python consumers (decode, land): partitions added to a topic are consumed within this; under the
    # engine's 5-s minimum frame timeout (at 10 s, reports a producer wrote at once to added partitions reached
    # the engine after their step's frame timed out: a transient HUNG_RANK); one Metadata request per refresh
    metadata_max_age: float = 2.0
    # Faust's (aiokafka) consumer: a fetch from a broker that stopped answering is held for `request`,
    # and only fresh metadata sends the partitions it led to their new leader; refreshed this often
    # (aiokafka's default, 5 min, held the detect worker's input for the whole of a broker's SIGSTOP)
    faust_metadata_max_age: float = 0.5

    def faust_settings(self) -> dict[str, Any]:
        names = {"session": "broker_session_timeout", "heartbeat": "broker_heartbeat_interval",
                 "rebalance": "broker_rebalance_timeout", "request": "broker_request_timeout",
                 "max_poll_interval": "broker_max_poll_interval", "producer_request": "producer_request_timeout"}
        return {**{names[k]: v for k, v in asdict(self).items() if k in names},
                "consumer_metadata_max_age_ms": int(self.faust_metadata_max_age * 1000)}

    def kafka_python_consumer(self) -> dict[str, Any]:
        """The same group timeouts for a plain kafka-python consumer (the detect decode loop).

        kafka-python 3.x defaults to a 45 s session: a SIGKILLed decode loop then holds its
        partitions for 45 s (measured: 40–80 s of stalled detection per kill). Its rebalance
        timeout is `max_poll_interval_ms`, and it waits for a JoinGroup max(request timeout,
        rebalance timeout + 5 s), so the request timeout is the clients' own short one
        (`kafka_request_timeout_s`, from infra.clients.kafka_client_config).
        """
        return {"session_timeout_ms": int(self.session * 1000),
                "heartbeat_interval_ms": int(self.heartbeat * 1000),
                "max_poll_interval_ms": int(self.max_poll_interval * 1000),
                "metadata_max_age_ms": int(self.metadata_max_age * 1000)}


def base_app(settings: Settings, role: Role, timeouts: WorkerTimeouts | None = None) -> faust.App:
    private_dir(settings.home)
    datadir = settings.home / "faust" / role
    datadir.mkdir(parents=True, exist_ok=True)
    return App(
        f"{settings.app_id}-{role}",
        data_request_timeout_s=settings.kafka_request_timeout_s,
        datadir=str(datadir),
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication_factor,
        topic_allow_declare=False,
        topic_disable_leader=True,  # no leader-only work; its topic would need creating (auto-create is off)
        broker_commit_interval=1.0,
        producer_max_request_size=4_194_304,
        producer_acks=-1,
        producer_linger=0.005,             # batch sends (chunks, alerts, dead letters) for 5 ms
        producer_max_batch_size=1_048_576,
        stream_buffer_maxsize=32_768,      # lets take() fill batches of 10k messages
        # per partition per fetch: the partials topic carries ~1 MB chunks (a 10,240-rank job's step is
        # several of them), and Faust's 1 MiB default made that one chunk per fetch round trip
        consumer_max_fetch_size=16 << 20,
        stream_wait_empty=False,
        **(timeouts or WorkerTimeouts()).faust_settings(),
        **faust_broker_config(settings, role),
    )


def raw_topic(app: faust.App, *names: str) -> Any:
    return app.topic(*names, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")

