"""The workers' Kafka timeouts: what each client library gets from WorkerTimeouts and the settings."""

from __future__ import annotations

from pathlib import Path

from infra.clients import kafka_client_config
from infra.settings import Settings
from streams.app import WorkerTimeouts, base_app


def test_kafka_python_consumers_take_the_clients_request_timeout(tmp_path: Path) -> None:
    """kafka-python 3 waits for a JoinGroup max(request, rebalance + 5 s) by itself, so the decode and
    land consumers keep the short request timeout every client has (a second one would clash)."""
    settings = Settings(home=tmp_path, kafka_security="plaintext")
    config = dict(**kafka_client_config(settings, "detect"), **WorkerTimeouts().kafka_python_consumer())
    assert config["request_timeout_ms"] == 2500
    assert config["session_timeout_ms"] == 6000 and config["max_poll_interval_ms"] == 120_000


def test_faust_consumers_refresh_leaders_twice_a_second(tmp_path: Path) -> None:
    """aiokafka sends a partition to its new leader only with fresh metadata; its 5 min default
    held the detect worker's input for the whole of a broker's SIGSTOP."""
    app = base_app(Settings(home=tmp_path, kafka_security="plaintext"), "detect")
    assert app.conf.consumer_metadata_max_age_ms == 500
    assert app.conf.broker_request_timeout == 20.0  # > the 10 s rebalance: aiokafka's JoinGroup uses it


def test_partitions_added_to_an_input_topic_are_decoded_well_inside_a_frame_s_timeout() -> None:
    """Producers write to added partitions at once; the decode consumer finds them at its next metadata
    refresh plus a rebalance. At 10 s that came after the step's frame had timed out (min 5 s): a transient
    HUNG_RANK for the ranks on the new partitions in a restart cycle that grew the topics mid-job."""
    from streams.detect.config import DetectionConfig

    refresh_s = WorkerTimeouts().kafka_python_consumer()["metadata_max_age_ms"] / 1000
    assert refresh_s + WorkerTimeouts().heartbeat <= DetectionConfig().window_timeout_min_s / 1.4
