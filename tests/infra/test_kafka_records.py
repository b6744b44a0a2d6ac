"""Fetched record batches read in C (infra/kafka_records.py) give what kafka-python's own reader gives.

Each case builds batches with kafka-python's builder and reads them with both readers: the records, their
order, the errors and where they are raised must be the same. `install` is process-wide, so the tests that
call it restore kafka-python's name through `monkeypatch`.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import kafka
import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import CorruptRecordError
from kafka.record import memory_records
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder

from infra import kafka_records
from infra.clients import kafka_client_config
from infra.kafka_records import CRecordBatch
from infra.settings import Settings

ATTRIBUTES_AT = 21  # baseOffset int64, batchLength int32, leaderEpoch int32, magic int8, crc uint32, then int16


def build(rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], compression: int = 0,
          base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i, (key, value, headers) in enumerate(rows):
        builder.append(i, timestamp=1_700_000_000_000 + 7 * i, key=key, value=value, headers=headers)
    out = bytearray(builder.build())
    out[0:8] = struct.pack(">q", base_offset)
    return bytes(out)


def random_rows(rng: random.Random, n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    def blob() -> bytes | None:
        size = rng.choice([-1, 0, 1, 5, 130, 300, 20_000])
        return None if size < 0 else rng.randbytes(size)

    return [(blob(), blob(), [(rng.choice(["h", "ключ", "x" * 200]), blob()) for _ in range(rng.choice([0, 0, 1, 3]))])
            for _ in range(n)]


def read(cls: type[DefaultRecordBatch], data: bytes, first: int = 0) -> tuple[list[tuple[Any, ...]], str | None]:
    """(records as tuples, the error's text or None): `first` records through kafka-python's `next`, then a loop."""
    batch = cls(data)
    out: list[tuple[Any, ...]] = []

    def row(r: Any) -> tuple[Any, ...]:
        return (type(r).__name__, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers, r.size_in_bytes)

    try:
        batch._maybe_uncompress()
        out.extend(row(next(batch)) for _ in range(first))
        out.extend(row(r) for r in batch)
    except CorruptRecordError as exc:
        return out, str(exc).split(":")[0]
    return out, None


def with_attribute(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[ATTRIBUTES_AT + 1] |= bit
    return bytes(out)


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_reads_as_kafka_pythons_reader_reads_it(seed: int) -> None:
    rng = random.Random(seed)
    data = build(random_rows(rng, rng.randint(1, 60)), base_offset=rng.randint(0, 1 << 40))
    first = rng.randint(0, 3)
    assert read(CRecordBatch, data, first) == read(DefaultRecordBatch, data, first)
    assert read(CRecordBatch, data)[1] is None


def test_a_compressed_batch_and_a_log_append_time_batch_read_the_same() -> None:
    rows = random_rows(random.Random(7), 30)
    for data in (build(rows, compression=DefaultRecordBatch.CODEC_GZIP),
                 with_attribute(build(rows), DefaultRecordBatch.TIMESTAMP_TYPE_MASK)):
        got = read(CRecordBatch, data)
        assert got == read(DefaultRecordBatch, data)
        assert len(got[0]) == 30
    log_append = with_attribute(build(rows), DefaultRecordBatch.TIMESTAMP_TYPE_MASK)
    assert {r[2] for r in read(CRecordBatch, log_append)[0]} == {DefaultRecordBatch(build(rows)).max_timestamp}


@pytest.mark.parametrize("damage", ["truncated", "trailing bytes", "length too long", "header key not utf-8"])
def test_a_malformed_batch_gives_the_good_records_then_kafka_pythons_error(damage: str) -> None:
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (b"k%d" % i, b"v" * 10, [("hk", b"hv")]) for i in range(5)]
    data = bytearray(build(rows))
    if damage == "truncated":
        data = data[:-3]
    elif damage == "trailing bytes":
        data += b"\x00\x00\x00"
    elif damage == "length too long":  # the last record's length (a one-byte zigzag varint) one more
        last = data.rindex(b"k4") - 5  # length, attributes, ts delta, offset delta, key length: a byte each
        assert data[last] == 2 * 24  # 1+1+1+1 + key 2, value 1+10, headers 1 + 1+2 + 1+2
        data[last] += 2
    else:
        data[data.rindex(b"hk")] = 0xFF
    plain, c = read(DefaultRecordBatch, bytes(data)), read(CRecordBatch, bytes(data))
    assert c[1] is not None
    assert c == plain


def test_a_control_batch_keeps_kafka_pythons_reader() -> None:
    data = with_attribute(build([(struct.pack(">hh", 0, 1), b"", [])]), DefaultRecordBatch.CONTROL_MASK)
    got = read(CRecordBatch, data)
    assert got == read(DefaultRecordBatch, data)
    assert got[0][0][0] == ControlRecord.__name__


def test_install_makes_fetched_batches_read_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_records, "DefaultRecordBatch", DefaultRecordBatch)
    rows = random_rows(random.Random(3), 20)
    fetched = build(rows) + build(rows, base_offset=20)
    assert not kafka_records.installed()
    kafka_records.install()
    kafka_records.install()  # idempotent
    assert kafka_records.installed()
    records = memory_records.MemoryRecords(fetched)
    batches = [records.next_batch(), records.next_batch()]
    assert [type(b) for b in batches] == [CRecordBatch, CRecordBatch]
    assert [r.offset for b in batches for r in b] == list(range(40))


def test_install_refuses_a_kafka_python_it_was_not_written_against(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_records, "DefaultRecordBatch", DefaultRecordBatch)
    monkeypatch.setattr(kafka, "__version__", "3.1.0")
    with pytest.raises(RuntimeError, match=r"3\.1\.0"):
        kafka_records.install()
    assert not kafka_records.installed()


def test_the_workers_consumers_read_batches_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode and land loops install the reader before they open their consumers."""
    from infra.settings import load_settings
    from schemas import Topics
    from streams.detect.ingest import loop as decode_loop
    from streams.land import loop as land_loop
    from streams.land.processor import LandingProcessor
    from streams.metrics import DetectMetrics

    # the clients never connect: plaintext keeps the test off the local broker's secrets directory
    settings = load_settings(env={"STEPLENS_KAFKA_SECURITY": "plaintext"})
    land = land_loop.LandLoop(settings, LandingProcessor(Topics(settings.topic_prefix), settings.max_event_bytes),
                              lander=None)  # type: ignore[arg-type]  # never reached: only the clients open

    opened: list[bool] = []

    def consumer(*_: Any, **__: Any) -> object:
        opened.append(kafka_records.installed())
        return object()

    monkeypatch.setattr(decode_loop, "group_consumer", consumer)
    monkeypatch.setattr(land_loop, "group_consumer", consumer)
    monkeypatch.setattr(land_loop, "bootstrapped", lambda *_: object())
    for open_consumer in (decode_loop.DecodeLoop(settings, DetectMetrics()).open_consumer, land.open_consumer):
        monkeypatch.setattr(memory_records, "DefaultRecordBatch", DefaultRecordBatch)
        open_consumer()
    assert opened == [True, True]


@pytest.mark.integration
def test_a_consumer_reads_the_same_records_from_the_broker_with_either_reader(
        kafka_settings: Settings, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real broker (TLS, fetch sessions, batches cut where the producer cut them): same records."""
    admin = KafkaAdminClient(**kafka_client_config(kafka_settings, "admin"))
    admin.create_topics([NewTopic(unique_name, 3, 1)])
    admin.close()
    producer = KafkaProducer(**kafka_client_config(kafka_settings, "admin"), linger_ms=20, batch_size=64 << 10)
    sent = [(b"host-%d" % (i % 7), orjson.dumps([{"i": i, "pad": "x" * (i % 900)}]), [("n", b"%d" % i)])
            for i in range(2_000)]
    for key, value, headers in sent:
        producer.send(unique_name, key=key, value=value, headers=headers)
    producer.flush()
    producer.close()

    def consume() -> list[tuple[Any, ...]]:
        consumer = KafkaConsumer(unique_name, **kafka_client_config(kafka_settings, "admin"),
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5_000)
        out = sorted((m.partition, m.offset, m.timestamp, m.key, m.value, tuple(m.headers)) for m in consumer)
        consumer.close()
        return out

    monkeypatch.setattr(memory_records, "DefaultRecordBatch", DefaultRecordBatch)
    plain = consume()
    kafka_records.install()
    in_c = consume()
    assert len(plain) == len(sent)
    assert in_c == plain
