"""Exporters: the in-memory double, and KafkaExporter's behaviour without a broker."""

from __future__ import annotations

import threading

import pytest

from producers.exporter import Exporter, ExportError, InMemoryExporter, KafkaExporter, OutRecord, lz4_available

RECS = [OutRecord("t.steps", b"k", b"v1"), OutRecord("t.steps", None, b"v2")]


def test_in_memory_exporter_records_and_fails_on_demand() -> None:
    ex = InMemoryExporter()
    assert isinstance(ex, Exporter)
    ex.export(RECS)
    assert ex.records == RECS and ex.wait_for_count(2, 0)
    ex.failing = True
    with pytest.raises(ExportError):
        ex.export(RECS)
    assert ex.records == RECS and ex.failures == 1
    ex.failing = False
    ex.close()
    with pytest.raises(ExportError):
        ex.export(RECS)


def test_in_memory_exporter_gate_holds_the_caller() -> None:
    gate = threading.Event()
    ex = InMemoryExporter(gate=gate)
    t = threading.Thread(target=ex.export, args=(RECS,), daemon=True)
    t.start()
    assert ex.entered.wait(5)
    assert ex.records == []
    gate.set()
    t.join(5)
    assert ex.records == RECS


def test_kafka_exporter_is_lazy_and_configured_for_safe_delivery() -> None:
    ex = KafkaExporter("127.0.0.1:1")  # nothing listens there: construction must not connect
    cfg = ex._config
    assert cfg["enable_idempotence"] is True and cfg["acks"] == "all"
    assert cfg["linger_ms"] == 20 and cfg["max_request_size"] == 2 * 1024 * 1024
    assert cfg["compression_type"] is None
    assert cfg["delivery_timeout_ms"] >= cfg["linger_ms"] + cfg["request_timeout_ms"]
    assert ex._producer is None
    ex.close()


def test_a_client_wide_request_timeout_only_shortens_the_exporters() -> None:
    short = KafkaExporter("127.0.0.1:1", export_timeout_s=10.0, extra_config={"request_timeout_ms": 2500})
    long = KafkaExporter("127.0.0.1:1", export_timeout_s=1.0, extra_config={"request_timeout_ms": 2500},
                         redelivery="resend")
    assert short._config["request_timeout_ms"] == 2500
    assert long._config["request_timeout_ms"] == 1000  # the export timeout's own bound stays
    for ex in (short, long):
        cfg = ex._config
        assert cfg["delivery_timeout_ms"] >= cfg["linger_ms"] + cfg["request_timeout_ms"]
        ex.close()


def test_kafka_exporter_lz4_only_when_available() -> None:
    ex = KafkaExporter("127.0.0.1:1", compression="lz4")
    assert ex.compression == ("lz4" if lz4_available() else "none")
    with pytest.raises(ValueError):
        KafkaExporter("127.0.0.1:1", compression="gzip")  # type: ignore[arg-type]


def test_kafka_exporter_without_broker_raises_export_error() -> None:
    ex = KafkaExporter("127.0.0.1:1", connect_timeout_s=0.5, export_timeout_s=1.0)
    with pytest.raises(ExportError):
        ex.export(RECS)
    ex.close()
    with pytest.raises(ExportError):
        ex.export(RECS)


class _Acked:
    """A produce future that is already acknowledged (kafka-python's FutureRecordMetadata surface)."""

    is_done = True
    exception = None

    def get(self, timeout: float | None = None) -> None:
        return None

    def failed(self) -> bool:
        return False


class _NoMetadataFor:
    """A stand-in producer (pure unit test of the exporter's rule): `send` to `topic` raises what
    kafka-python raises while it has no metadata for it, `misses` times, then takes it."""

    def __init__(self, topic: str, misses: int) -> None:
        self.topic, self.misses, self.sent = topic, misses, []  # type: ignore[var-annotated]

    def send(self, topic: str, value: bytes, key: bytes | None) -> _Acked:
        from kafka.errors import KafkaTimeoutError

        if topic == self.topic and self.misses:
            self.misses -= 1
            raise KafkaTimeoutError("Failed to update metadata after 1.0 secs.")
        self.sent.append((topic, value))
        return _Acked()

    def close(self, timeout: float | None = None) -> None:
        pass


BATCH = [OutRecord("t.steps", b"r2", b"steps 0-3"), OutRecord("t.summaries", b"r2", b"summaries 0-3")]


def test_in_place_a_record_without_metadata_waits_for_it_instead_of_half_delivering_the_batch() -> None:
    """The records handed over before it get through; failing the later one made the emitter send the
    delivered ones again (a rank's steps 0-3 twice on the topic after a broker restart)."""
    ex = KafkaExporter("127.0.0.1:1")
    producer = ex._producer = _NoMetadataFor("t.summaries", misses=3)
    ex.export(BATCH)  # no ExportError: every record taken and acknowledged
    assert producer.sent == [("t.steps", b"steps 0-3"), ("t.summaries", b"summaries 0-3")]


def test_resending_a_record_without_metadata_fails_the_export_at_once() -> None:
    ex = KafkaExporter("127.0.0.1:1", redelivery="resend")
    ex._producer = _NoMetadataFor("t.summaries", misses=1)
    with pytest.raises(ExportError):
        ex.export(BATCH)


def test_in_place_an_abort_ends_the_wait_for_metadata() -> None:
    ex = KafkaExporter("127.0.0.1:1")
    ex._producer = _NoMetadataFor("t.summaries", misses=10**9)
    threading.Timer(0.2, ex.abort).start()  # the emitter closing while the broker is still away
    with pytest.raises(ExportError) as err:
        ex.export(BATCH)
    assert err.value.failed == (BATCH[1],)  # the taken record was acknowledged; only the other failed
