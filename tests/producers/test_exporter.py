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
