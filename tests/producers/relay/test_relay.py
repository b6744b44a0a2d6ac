"""The relay without Kafka: framing, and RelayExporter -> Relay -> BackgroundEmitter over a real Unix socket."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from producers.emitter import BackgroundEmitter
from producers.exporter import ExportError, InMemoryExporter, OutRecord
from producers.relay import Relay, RelayExporter
from producers.relay.framing import HEADER, FrameError, decode_body, encode_frame, split_frames
from schemas import Topics
from tests.producers._factories import step_event


def _records(n: int, size: int = 10) -> list[OutRecord]:
    return [OutRecord("steps", None if i % 5 == 0 else f"j/{i % 3}".encode(), bytes([i % 251]) * (size + i))
            for i in range(n)]


def test_frames_round_trip_and_split_by_size() -> None:
    recs = _records(40, size=1000)
    frames = split_frames(recs, max_bytes=5000)
    assert len(frames) > 1 and [r for f in frames for r in f] == recs
    assert all(len(encode_frame(f)) - HEADER.size <= 5000 or len(f) == 1 for f in frames)
    for f in frames:
        blob = encode_frame(f)
        body_len, count = HEADER.unpack_from(blob)
        assert body_len == len(blob) - HEADER.size and count == len(f)
        assert decode_body(blob[HEADER.size:], count) == list(f)
    big = [OutRecord("steps", b"k", b"x" * 10_000)]
    assert split_frames(big, max_bytes=100) == [big]  # a record bigger than a frame goes alone
    with pytest.raises(FrameError):
        decode_body(encode_frame(recs[:3])[HEADER.size:-1], 3)


def _sink(max_queue: int = 10_000) -> tuple[BackgroundEmitter, InMemoryExporter]:
    out = InMemoryExporter()
    return BackgroundEmitter(out, Topics(), spool_dir=None, max_queue=max_queue, flush_interval_s=0.01), out


def test_records_pass_the_socket_unchanged_and_in_order(sock_dir: Path) -> None:
    sink, out = _sink()
    relay = Relay(sock_dir / "r.sock", sink).start()
    try:
        exporter = RelayExporter(relay.path, max_frame_bytes=4096)
        recs = _records(300, size=50)
        for i in range(0, 300, 60):
            exporter.export(recs[i:i + 60])
        assert out.wait_for_count(300, timeout=30)
        assert out.records == recs
        s = relay.stats()
        assert (s.connections, s.records, s.forwarded, s.refused) == (1, 300, 300, 0)
        exporter.close()
    finally:
        relay.stop()
        sink.close(10)


def test_a_full_relay_queue_hands_back_the_tail(sock_dir: Path) -> None:
    # a sink that never exports (its exporter is gated): the queue fills at 20 records
    import threading

    gate = threading.Event()
    out = InMemoryExporter(gate=gate)
    sink = BackgroundEmitter(out, Topics(), spool_dir=None, max_queue=20, batch_size=1000, flush_interval_s=3600)
    relay = Relay(sock_dir / "r.sock", sink, ack_wait_s=0.2).start()  # never settled: acked at the bound
    try:
        exporter = RelayExporter(relay.path)
        recs = _records(30)
        with pytest.raises(ExportError) as err:
            exporter.export(recs)
        assert err.value.failed == tuple(recs[20:])
        assert (relay.stats().refused, relay.stats().acks_unsettled) == (10, 1)
        assert sink.stats().dropped == {}  # not a drop: the rank still has them
    finally:
        gate.set()
        relay.stop()
        sink.close(10)


def test_durable_ack_answers_only_once_the_records_are_exported(sock_dir: Path) -> None:
    import threading

    gate = threading.Event()  # the relay's Kafka stand-in hangs until the gate opens
    out = InMemoryExporter(gate=gate)
    sink = BackgroundEmitter(out, Topics(), spool_dir=None, flush_interval_s=0.01)
    relay = Relay(sock_dir / "r.sock", sink).start()
    exporter = RelayExporter(relay.path)
    recs = _records(5)
    errors: list[BaseException] = []

    def export() -> None:
        try:
            exporter.export(recs)
        except BaseException as exc:
            errors.append(exc)

    rank = threading.Thread(target=export)
    try:
        rank.start()
        assert out.entered.wait(30)  # the relay is exporting the frame's records ...
        assert rank.is_alive()  # ... and has not answered the rank: a kill now loses nothing acknowledged
        gate.set()
        rank.join(30)
        assert not rank.is_alive() and errors == []
        assert out.records == recs and relay.stats().acks_unsettled == 0
    finally:
        gate.set()
        exporter.close()
        relay.stop()
        sink.close(10)


def test_no_relay_means_export_error_and_the_emitter_spools_then_catches_up(sock_dir: Path, tmp_path: Path) -> None:
    path = sock_dir / "r.sock"
    rank = BackgroundEmitter(RelayExporter(path), Topics(), spool_dir=tmp_path / "spool", flush_interval_s=0.01,
                             retry_backoff_s=0.05, retry_backoff_max_s=0.2, pack=True)
    events = [step_event(i, rank=1) for i in range(50)]
    for e in events[:25]:
        assert rank.emit(e)
    assert rank.wait_until(lambda s: s.spooled >= 25 and s.export_failures > 0, timeout=30)
    sink, out = _sink()
    relay = Relay(path, sink).start()
    try:
        for e in events[25:]:
            assert rank.emit(e)
        assert rank.flush(30)
        assert rank.stats().exported == 50 and rank.stats().dropped == {}
        assert sink.flush(30)
        from tests.producers._records import steps_of

        got = [(e.rank, e.step) for r in out.records for e in steps_of(r.value)]
        assert got == [(1, i) for i in range(50)]
    finally:
        rank.close(10)
        relay.stop()
        sink.close(10)


def test_a_malformed_frame_closes_only_that_connection(sock_dir: Path) -> None:
    sink, out = _sink()
    relay = Relay(sock_dir / "r.sock", sink).start()
    try:
        bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bad.settimeout(10)
        bad.connect(str(relay.path))
        bad.sendall(HEADER.pack(4, 3) + struct.pack("!I", 7))  # 3 records announced, 4 bytes of body
        assert bad.recv(4) == b""  # the relay hung up
        bad.close()
        deadline = time.monotonic() + 10
        while relay.stats().protocol_errors == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert relay.stats().protocol_errors == 1
        good = RelayExporter(relay.path)
        good.export(_records(3))
        assert out.wait_for_count(3, timeout=30)
        good.close()
    finally:
        relay.stop()
        sink.close(10)


def test_a_second_relay_on_a_live_socket_is_refused_a_stale_one_replaced(sock_dir: Path) -> None:
    sink, _ = _sink()
    path = sock_dir / "r.sock"
    relay = Relay(path, sink).start()
    try:
        with pytest.raises(RuntimeError):
            Relay(path, sink).start()
    finally:
        relay.stop()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a dead relay's socket file: nobody listens
    stale.close()
    again = Relay(path, sink).start()
    again.stop()
    sink.close(10)
    assert not path.exists()


def test_relay_socket_setting_and_path_limit(tmp_path: Path) -> None:
    from infra.settings import load_settings

    s = load_settings({"STEPLENS_HOME": str(tmp_path)})
    assert (s.relay_socket, s.relay_path) == ("", tmp_path / "run" / "relay.sock")
    s = load_settings({"STEPLENS_RELAY_SOCKET": "/run/x/r.sock", "STEPLENS_RELAY_FLUSH_INTERVAL_S": "0.5"})
    assert (s.relay_path, s.relay_flush_interval_s) == (Path("/run/x/r.sock"), 0.5)
    sink, _ = _sink()
    with pytest.raises(ValueError):
        Relay(Path("/tmp/" + "x" * 120), sink)
    sink.close(10)
