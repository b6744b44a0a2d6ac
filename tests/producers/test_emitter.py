"""BackgroundEmitter through its threads: never blocks or raises on the training thread, counts every drop,
spools and replays (the decisions alone, with a fake clock: test_delivery.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from producers.emitter import (
    CLOSED,
    ENCODE_ERROR,
    EXPORT_FAILED,
    QUEUE_FULL,
    SPOOL_FULL,
    TOO_LARGE,
    UNROUTABLE,
    BackgroundEmitter,
    EmitterStats,
)
from producers.exporter import ExportError, InMemoryExporter, OutRecord
from producers.spool import SEGMENT_SUFFIX
from schemas import (
    MAX_EVENT_BYTES,
    ControlCommand,
    JobEvent,
    KernelBatch,
    KernelRecord,
    StepEvent,
    Topics,
    decode,
    encode,
    rank_key,
)
from tests.producers._factories import START_NS, step_event, step_events
from tests.producers._records import is_packed, steps_of

WAIT = 10.0  # upper bound for waits on the worker; a passing test never reaches it


@pytest.fixture
def emitters() -> Iterator[list[BackgroundEmitter]]:
    """Emitters a test created, closed at the end even when the test fails."""
    made: list[BackgroundEmitter] = []
    yield made
    for em in made:
        em.close(timeout=1.0)


def make(made: list[BackgroundEmitter], exporter: object, **kwargs: object) -> BackgroundEmitter:
    kwargs.setdefault("spool_dir", None)  # these tests choose their spool; the claimed one has its own test
    em = BackgroundEmitter(exporter, Topics("t."), **kwargs)  # type: ignore[arg-type]
    made.append(em)
    return em


def settled(stats: EmitterStats) -> bool:
    return stats.queued == 0 and stats.in_flight == 0


def emit_in_thread(em: BackgroundEmitter, events: Sequence[object]) -> tuple[threading.Thread, list[bool]]:
    """Emit from another thread so a blocking emit would show up as a thread that does not finish."""
    results: list[bool] = []

    def body() -> None:
        for ev in events:
            results.append(em.emit(ev))  # type: ignore[arg-type]

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, results


def test_emit_returns_while_exporter_hangs_and_counts_queue_full(emitters: list[BackgroundEmitter]) -> None:
    gate = threading.Event()
    exporter = InMemoryExporter(gate=gate)
    em = make(emitters, exporter, max_queue=10, batch_size=1, flush_interval_s=0.01)
    assert em.emit(step_event(0))
    assert exporter.entered.wait(WAIT), "worker never called export"
    # The worker is now stuck inside export: emits must still return at once.
    t, results = emit_in_thread(em, step_events(25)[1:])
    t.join(WAIT)
    assert not t.is_alive(), "emit blocked while the exporter hung"
    assert results.count(True) == 10 and results.count(False) == 14
    stats = em.stats()
    assert stats.dropped == {QUEUE_FULL: 14}
    assert stats.queued == 10 and stats.in_flight == 1 and stats.emitted == 25
    gate.set()
    assert em.flush(WAIT)
    assert len(exporter.records) == 11
    assert em.stats().exported == 11


def test_failing_exporter_without_spool_drops_with_reason(emitters: list[BackgroundEmitter]) -> None:
    class Broken:
        def export(self, records: Sequence[OutRecord]) -> None:
            raise RuntimeError("not even an ExportError")

        def flush(self, timeout: float) -> bool:
            return False

        def close(self) -> None:
            pass

    em = make(emitters, Broken(), batch_size=8, flush_interval_s=0.01, retry_backoff_s=0.001, retry_backoff_max_s=0.001)
    t, results = emit_in_thread(em, step_events(40))
    t.join(WAIT)
    assert not t.is_alive() and all(results)
    assert em.wait_until(lambda s: s.dropped.get(EXPORT_FAILED, 0) == 40, WAIT), em.stats()
    stats = em.stats()
    assert stats.exported == 0 and not stats.healthy and stats.export_failures >= 5


def test_encode_error_too_large_and_unroutable_are_counted_not_raised(emitters: list[BackgroundEmitter]) -> None:
    exporter = InMemoryExporter()
    em = make(emitters, exporter)
    unencodable = replace(step_event(0), flops=object())  # type: ignore[arg-type]
    huge = KernelBatch(job="j", rank=0, world=1, host="h", device=0, step=0, kernels=[
        KernelRecord(name="k" * MAX_EVENT_BYTES, cat="compute", start_ns=START_NS, dur_ns=1)])
    control = ControlCommand(command_id="c", job="j", action="profile_on", ranks=[], step_first=0, step_count=1,
                             issued_ns=START_NS)
    assert em.emit(unencodable) is False
    assert em.emit(huge) is False
    assert em.emit(control) is False
    assert em.emit("not an event") is False  # type: ignore[arg-type]
    assert em.emit(step_event(1)) is True
    assert em.flush(WAIT)
    stats = em.stats()
    assert stats.dropped == {ENCODE_ERROR: 2, TOO_LARGE: 1, UNROUTABLE: 1}
    assert stats.emitted == 5 and stats.exported == 1
    assert [decode(v) for v in exporter.values()] == [step_event(1)]


def test_spool_then_replay_in_order_exactly_once(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    exporter = InMemoryExporter(failing=True)
    spool = tmp_path / "spool"
    em = make(emitters, exporter, batch_size=64, flush_interval_s=0.01, spool_dir=spool)
    events = step_events(1000)
    t, results = emit_in_thread(em, events)
    t.join(WAIT)
    assert not t.is_alive() and all(results)
    assert em.wait_until(lambda s: s.spooled == 1000 and settled(s), WAIT), em.stats()
    assert list(spool.glob(f"*{SEGMENT_SUFFIX}")), "nothing on disk while Kafka is down"
    stats = em.stats()
    assert stats.exported == 0 and stats.spool_pending == 1000 and not stats.healthy and stats.dropped == {}

    exporter.failing = False  # Kafka is back
    assert em.flush(WAIT)
    values = exporter.values()
    assert values == [encode(e) for e in events]  # nothing lost, nothing duplicated, in order
    stats = em.stats()
    assert stats.exported == 1000 and stats.replayed == 1000 and stats.spool_pending == 0 and stats.healthy
    assert not list(spool.glob(f"*{SEGMENT_SUFFIX}")), "spool not deleted after replay"

    more = step_events(10, job="after")
    for ev in more:
        em.emit(ev)
    assert em.flush(WAIT)
    assert exporter.values()[1000:] == [encode(e) for e in more]
    assert em.stats().replayed == 1000


def test_new_events_queue_behind_the_spool(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """Events emitted while the spool still holds older ones are exported after them."""
    exporter = InMemoryExporter(failing=True)
    em = make(emitters, exporter, batch_size=16, flush_interval_s=0.01, spool_dir=tmp_path)
    first, second = step_events(100), step_events(50, job="second")
    for ev in first:
        em.emit(ev)
    assert em.wait_until(lambda s: s.spooled == 100 and settled(s), WAIT)
    for ev in second:
        em.emit(ev)
    exporter.failing = False
    assert em.flush(WAIT)
    assert exporter.values() == [encode(e) for e in first + second]


def overflow_the_spool(emitters: list[BackgroundEmitter], spool_dir: Path, *, pack: bool) -> tuple[
        BackgroundEmitter, InMemoryExporter, list[StepEvent], EmitterStats]:
    """Kafka down and a spool of ~20 events: 100 emitted, a prefix spooled, the rest dropped as spool_full.

    Returns the emitter, its (still failing) exporter, the events and the stats once all 100 are accounted for.
    """
    exporter = InMemoryExporter(failing=True)
    size = len(encode(step_event(0))) + 64
    em = make(emitters, exporter, pack=pack, batch_size=10, flush_interval_s=0.01, spool_dir=spool_dir,
              max_spool_bytes=size * 20)
    events = step_events(100)
    assert em.emit_batch(events) == 100
    assert em.wait_until(lambda s: s.spooled + s.dropped.get(SPOOL_FULL, 0) == 100 and settled(s), WAIT)
    stats = em.stats()
    assert 0 < stats.spooled < 100 and stats.dropped == {SPOOL_FULL: 100 - stats.spooled}
    assert stats.spool_bytes <= size * 20
    return em, exporter, events, stats


def test_spool_full_drops_with_reason(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    em, exporter, events, stats = overflow_the_spool(emitters, tmp_path, pack=False)
    exporter.failing = False
    assert em.flush(WAIT)
    assert exporter.values() == [encode(e) for e in events[: stats.spooled]]


def test_spool_survives_a_restart(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """A process that exits while Kafka is down leaves its spool; the next one replays it."""
    down = InMemoryExporter(failing=True)
    first = make(emitters, down, batch_size=32, flush_interval_s=0.01, spool_dir=tmp_path)
    events = step_events(300)
    for ev in events:
        first.emit(ev)
    assert first.wait_until(lambda s: s.spooled == 300 and settled(s), WAIT)
    assert first.close(timeout=0.2) is False  # could not deliver: data stays on disk
    assert first.emit(step_event(99)) is False and first.stats().dropped == {CLOSED: 1}

    up = InMemoryExporter()
    second = make(emitters, up, batch_size=32, flush_interval_s=0.01, spool_dir=tmp_path)
    assert second.flush(WAIT)
    assert up.values() == [encode(e) for e in events]
    stats = second.stats()
    assert stats.replayed == 300 and stats.spooled == 0 and stats.spool_pending == 0


def test_partial_failure_resends_only_the_failed_records(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    class Flaky(InMemoryExporter):
        """First export delivers every other record and reports the rest as failed."""

        def __init__(self) -> None:
            super().__init__()
            self.first = True

        def export(self, records: Sequence[OutRecord]) -> None:
            if self.first:
                self.first = False
                ok, bad = list(records[::2]), list(records[1::2])
                super().export(ok)
                raise ExportError("half the batch timed out", failed=bad)
            super().export(records)

    exporter = Flaky()
    em = make(emitters, exporter, batch_size=20, flush_interval_s=0.01, spool_dir=tmp_path, retry_backoff_s=0.001)
    events = step_events(20)
    for ev in events:
        em.emit(ev)
    assert em.flush(WAIT)
    values = exporter.values()
    assert sorted(values) == sorted(encode(e) for e in events)  # each exactly once
    assert values[10:] == [encode(e) for e in events[1::2]]  # the failed ones, replayed in order
    stats = em.stats()
    assert stats.exported == 20 and stats.spooled == 10 and stats.replayed == 10


def test_close_exports_the_rest_and_stops(emitters: list[BackgroundEmitter]) -> None:
    exporter = InMemoryExporter()
    em = make(emitters, exporter, batch_size=1000, flush_interval_s=60.0)
    for ev in step_events(30):
        em.emit(ev)
    assert em.close(timeout=WAIT)
    assert len(exporter.records) == 30 and exporter.closed
    assert em.emit(step_event(1)) is False
    assert em.stats().dropped == {CLOSED: 1}


def test_close_returns_when_the_exporter_hangs(emitters: list[BackgroundEmitter]) -> None:
    gate = threading.Event()
    exporter = InMemoryExporter(gate=gate)
    em = make(emitters, exporter, batch_size=1, flush_interval_s=0.01)
    em.emit(step_event(0))
    assert exporter.entered.wait(WAIT)
    assert em.close(timeout=0.1) is False  # bounded: the hung worker is left behind (daemon)
    gate.set()


def test_concurrent_emitters_lose_nothing(emitters: list[BackgroundEmitter]) -> None:
    exporter = InMemoryExporter()
    em = make(emitters, exporter, batch_size=50, flush_interval_s=0.01, max_queue=100_000)
    threads = [emit_in_thread(em, step_events(500, job=f"job-{i}"))[0] for i in range(4)]
    for t in threads:
        t.join(WAIT)
    assert em.flush(WAIT)
    assert len(exporter.records) == 2000 and len(set(exporter.values())) == 2000


def test_emit_in_a_forked_child_is_dropped_not_deadlocked(emitters: list[BackgroundEmitter]) -> None:
    """DataLoader workers are forked from the training process; their emits must not hang."""
    import os
    import select

    em = make(emitters, InMemoryExporter())
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report and leave without running any parent cleanup
        try:
            ok = em.emit(step_event(0)) is False and em.stats().dropped == {"forked": 1}
            os.write(write_fd, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], WAIT)
        answer = os.read(read_fd, 1) if ready else b""
    finally:
        os.close(read_fd)
        if not answer:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert answer == b"1"
    assert em.emit(step_event(1)) is True  # the parent is unaffected


def test_a_lone_event_goes_out_after_the_flush_interval(emitters: list[BackgroundEmitter]) -> None:
    """A partial batch is not held back until the batch fills: it waits at most flush_interval_s."""
    exporter = InMemoryExporter()
    em = make(emitters, exporter, batch_size=512, flush_interval_s=0.05)
    em.emit(step_event(0))
    assert exporter.wait_for_count(1, WAIT)
    em.emit(step_event(1))
    assert exporter.wait_for_count(2, WAIT)


def test_queue_overflow_goes_to_the_spool_while_an_export_hangs(tmp_path: Path,
                                                                  emitters: list[BackgroundEmitter]) -> None:
    """A broker timing out holds one export for seconds: what arrives meanwhile is spooled, not dropped."""
    gate = threading.Event()
    exporter = InMemoryExporter(gate=gate)
    em = make(emitters, exporter, max_queue=10, batch_size=4, flush_interval_s=0.01, spool_dir=tmp_path)
    events = step_events(500)
    assert em.emit(events[0])
    assert exporter.entered.wait(WAIT), "worker never called export"
    sent = 1
    for ev in events[1:]:  # emit no faster than the worker can spill, like a training loop would
        assert em.wait_until(lambda s: s.queued < 10, WAIT), em.stats()
        assert em.emit(ev)
        sent += 1
    assert sent == 500
    assert em.stats().dropped == {}
    assert em.stats().spooled > 0
    gate.set()
    assert em.flush(WAIT)
    assert sorted(exporter.values()) == sorted(encode(e) for e in events)
    stats = em.stats()
    assert stats.exported == 500 and stats.dropped_total == 0 and stats.pending == 0


def test_default_spool_is_private_under_its_root_and_not_shared(
    tmp_path: Path, emitters: list[BackgroundEmitter]
) -> None:
    root = tmp_path / "spool"  # entry points pass Settings.hook_spool_dir ($STEPLENS_HOME/spool)
    first = BackgroundEmitter(InMemoryExporter(failing=True), Topics("t."), name="trainer", flush_interval_s=0.01,
                              retry_backoff_s=0.001, spool_root=root)
    emitters.append(first)
    second = BackgroundEmitter(InMemoryExporter(), Topics("t."), name="trainer", spool_root=root)
    emitters.append(second)
    assert first.spool_dir == tmp_path / "spool" / "trainer"
    assert first.spool_dir.stat().st_mode & 0o777 == 0o700
    assert second.spool_dir is not None and second.spool_dir != first.spool_dir  # one writer per spool
    first.emit(step_event(0))
    assert first.wait_until(lambda s: s.spooled == 1 and settled(s), WAIT)
    assert first.stats().dropped == {}


def test_without_a_spool_dir_or_root_there_is_no_spool_and_both_are_refused(tmp_path: Path) -> None:
    """The library reads no settings: the caller says where to spool, or nothing is spooled."""
    with BackgroundEmitter(InMemoryExporter(), Topics("t.")) as em:
        assert em.spool_dir is None
    with pytest.raises(ValueError, match="not both"):
        BackgroundEmitter(InMemoryExporter(), Topics("t."), spool_dir=tmp_path / "s", spool_root=tmp_path)


def test_an_explicit_spool_has_one_writer(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """Two emitters given one spool directory: the second runs without a spool instead of reading and
    deleting the first one's segments (which lost the first one's spooled events)."""
    first = make(emitters, InMemoryExporter(failing=True), spool_dir=tmp_path / "s", flush_interval_s=0.01,
                 retry_backoff_s=0.001)
    second = make(emitters, InMemoryExporter(), spool_dir=tmp_path / "s")
    assert first.spool_dir == tmp_path / "s"
    assert second.spool_dir is None
    first.emit(step_event(0))
    assert first.wait_until(lambda s: s.spooled == 1 and settled(s), WAIT)


def test_emit_batch_sends_a_round_at_once_in_order_and_counts_drops(emitters: list[BackgroundEmitter]) -> None:
    """The rank hook's builder hands each round over with emit_batch(send_now=True): the round is
    exported without waiting for flush_interval_s (an hour here), in order; bad events are counted."""
    exporter = InMemoryExporter()
    em = make(emitters, exporter, batch_size=512, flush_interval_s=3600.0)
    control = ControlCommand(command_id="c", job="j", action="profile_on", ranks=[], step_first=0, step_count=1,
                             issued_ns=START_NS)
    round_ = [*step_events(3), control, step_event(3)]
    assert em.emit_batch(round_, send_now=True) == 4
    assert em.wait_until(lambda s: s.exported == 4, WAIT), em.stats()  # long before the hour
    assert [decode(v) for v in exporter.values()] == [*step_events(3), step_event(3)]
    assert em.stats().dropped == {UNROUTABLE: 1}


# --- packed records (contract 1.2): packed on the wire, counted, spooled and replayed per event -----------


def test_packed_round_is_one_record_per_rank_and_topic_in_order(emitters: list[BackgroundEmitter]) -> None:
    exporter = InMemoryExporter()
    em = make(emitters, exporter, pack=True)
    job = JobEvent(job="job-t", phase="start", world=4, ts_ns=START_NS)
    events = [job, *step_events(40, world=4)]
    assert em.emit_batch(events, send_now=True) == 41
    assert em.flush(WAIT)
    stats = em.stats()
    assert stats.exported == stats.emitted == 41 and stats.records_sent == 5 == len(exporter.records)
    assert exporter.records[0].value == encode(job)  # `jobs` stays one object per record
    per_rank = {r.key: [(e.rank, e.step) for e in steps_of(r.value)] for r in exporter.records[1:]}
    assert all(is_packed(r.value) for r in exporter.records[1:])
    assert per_rank == {rank_key("job-t", r): [(r, s) for s in range(10)] for r in range(4)}


def test_a_failed_packed_record_fails_exactly_its_events(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    class FailsRankOne(InMemoryExporter):
        """The first export loses rank 1's packed record; the others get through."""

        def __init__(self) -> None:
            super().__init__()
            self.first = True

        def export(self, records: Sequence[OutRecord]) -> None:
            if self.first:
                self.first = False
                bad = [r for r in records if r.key == rank_key("job-t", 1)]
                super().export([r for r in records if r not in bad])
                raise ExportError("rank 1's record timed out", failed=bad)
            super().export(records)

    exporter = FailsRankOne()
    em = make(emitters, exporter, pack=True, spool_dir=tmp_path, retry_backoff_s=0.001)
    events = step_events(40, world=4)
    assert em.emit_batch(events, send_now=True) == 40
    assert em.flush(WAIT)
    stats = em.stats()
    assert stats.exported == 40 and stats.spooled == stats.replayed == 10 and stats.dropped == {}
    got = [e for r in exporter.records for e in steps_of(r.value)]
    assert sorted((e.rank, e.step) for e in got) == sorted((e.rank, e.step) for e in events)  # each once
    assert [e.step for e in steps_of(exporter.records[-1].value)] == list(range(10))  # replayed packed, in order


def test_packed_drops_are_counted_per_event(tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    em, exporter, events, stats = overflow_the_spool(emitters, tmp_path, pack=True)
    exporter.failing = False
    assert em.flush(WAIT)
    final = em.stats()
    assert final.emitted == final.exported + final.dropped_total == 100
    got = [e for r in exporter.records for e in steps_of(r.value)]
    kept = events[: stats.spooled]  # the spool keeps a prefix; per rank (key) the order is the emission order
    assert sorted(got, key=lambda e: (e.step, e.rank)) == kept
    assert all([e for e in got if e.rank == r] == [e for e in kept if e.rank == r] for r in range(8))
    assert final.records_sent < final.exported


def test_records_settle_in_queue_order_once_exported_spooled_or_dropped(tmp_path: Path,
                                                                        emitters: list[BackgroundEmitter]) -> None:
    """wait_settled (a relay's durable ack): a record is settled once no longer only in memory, and
    never before an earlier one, even when later records reach the spool while an earlier export hangs."""
    gate = threading.Event()
    exporter = InMemoryExporter(gate=gate)
    em = make(emitters, exporter, max_queue=10, batch_size=4, flush_interval_s=0.01, spool_dir=tmp_path)
    recs = [OutRecord("t.steps", b"k", bytes([i])) for i in range(30)]
    n, first_end = em.emit_records_seq(recs[:4])
    assert (n, first_end) == (4, 4)
    assert exporter.entered.wait(WAIT)  # the first 4 are in a hanging export
    assert not em.wait_settled(first_end, 0)
    end = first_end
    for i in range(4, 30, 2):  # the rest overflows to the spool meanwhile
        assert em.wait_until(lambda s: s.queued <= 8, WAIT), em.stats()
        n, end = em.emit_records_seq(recs[i:i + 2])
        assert n == 2
    assert em.wait_until(lambda s: s.spooled > 0, WAIT)
    assert not em.wait_settled(end, 0) and not em.wait_settled(1, 0)  # spooled later ones wait for the first
    gate.set()
    assert em.wait_settled(end, WAIT)
    assert em.flush(WAIT) and exporter.values() == [r.value for r in recs]

    dropping = make(emitters, InMemoryExporter(failing=True), flush_interval_s=0.01)  # no spool: dropped, counted
    n, end = dropping.emit_records_seq(recs[:3])
    assert dropping.wait_settled(end, WAIT) and dropping.stats().dropped == {EXPORT_FAILED: 3}


class HeldExporter:
    """Test double of an exporter retrying in place (KafkaExporter, broker away): export waits
    until `release` or `abort`; aborted, it fails the batch it held, and every later one."""

    def __init__(self) -> None:
        self.records: list[OutRecord] = []
        self.entered = threading.Event()
        self.released = False
        self.aborted = False
        self._cv = threading.Condition()

    def export(self, records: Sequence[OutRecord]) -> None:
        self.entered.set()
        with self._cv:
            self._cv.wait_for(lambda: self.released or self.aborted)
            if self.aborted:
                raise ExportError("aborted", failed=records)
            self.records.extend(records)

    def release(self) -> None:
        with self._cv:
            self.released = True
            self._cv.notify_all()

    def abort(self) -> None:
        with self._cv:
            self.aborted = True
            self._cv.notify_all()

    def flush(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        pass


def emit_into_a_held_export(em: BackgroundEmitter, exporter: HeldExporter, events: Sequence[StepEvent],
                            first: int) -> None:
    """The first `first` events make the export that then hangs; the rest come while it does."""
    for ev in events[:first]:
        assert em.emit(ev)
    assert exporter.entered.wait(WAIT), "worker never called export"
    for ev in events[first:]:
        assert em.emit(ev)


def next_run_sends(emitters: list[BackgroundEmitter], spool_dir: Path, events: Sequence[StepEvent]) -> None:
    """The next run, on the same spool with the broker back, sends exactly `events`, in order."""
    nxt = InMemoryExporter()
    em = make(emitters, nxt, flush_interval_s=0.01, spool_dir=spool_dir)
    assert em.flush(WAIT), em.stats()
    assert nxt.values() == [encode(e) for e in events]


def test_a_stalled_export_spools_newer_events_then_each_goes_out_once_in_order(
        tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """The in-place export waits out the outage; what comes meanwhile is on disk, sent after it."""
    exporter = HeldExporter()
    em = make(emitters, exporter, batch_size=4, flush_interval_s=0.01, spool_dir=tmp_path, stall_s=0.05)
    events = step_events(41)
    emit_into_a_held_export(em, exporter, events, 1)
    # far below the queue's high-water mark (5,000): spooled because the export stalled, the held
    # event first (at the spool's head, pending there rather than in flight)
    assert em.wait_until(lambda s: s.spool_pending == 41 and s.queued == 0, WAIT), em.stats()
    stats = em.stats()
    assert not stats.healthy and stats.in_flight == 0 and stats.dropped == {} and stats.exported == 0
    assert list(tmp_path.glob(f"*{SEGMENT_SUFFIX}")), "the outage's events are not on disk"
    exporter.release()
    assert em.flush(WAIT), em.stats()
    assert [r.value for r in exporter.records] == [encode(e) for e in events]  # once each, in order
    stats = em.stats()
    assert stats.healthy and stats.exported == 41 and stats.replayed == 40 and stats.spool_pending == 0


def test_close_aborts_a_stalled_export_and_spools_what_it_held(tmp_path: Path,
                                                                 emitters: list[BackgroundEmitter]) -> None:
    """Closing while the broker is still away: the held batch goes to the spool for the next run."""
    exporter = HeldExporter()
    em = make(emitters, exporter, batch_size=3, flush_interval_s=0.01, spool_dir=tmp_path, stall_s=60.0)
    events = step_events(5)
    emit_into_a_held_export(em, exporter, events, 3)
    assert em.close(timeout=2.0) is False  # not exported; but nothing is lost
    assert exporter.aborted and exporter.records == []
    stats = em.stats()
    assert stats.dropped == {} and stats.spooled == 5 and stats.spool_pending == 5 and stats.in_flight == 0
    next_run_sends(emitters, tmp_path, events)


def test_a_stalled_export_that_fails_keeps_its_events_ahead_of_the_newer_ones(
        tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """The held batch fails after newer events were spooled behind it: it still goes out first."""
    exporter = HeldExporter()
    em = make(emitters, exporter, batch_size=4, flush_interval_s=0.01, spool_dir=tmp_path, stall_s=0.05,
              retry_backoff_s=0.01, retry_backoff_max_s=0.05)
    events = step_events(24)
    emit_into_a_held_export(em, exporter, events, 4)
    assert em.wait_until(lambda s: s.spool_pending == 24 and s.queued == 0, WAIT), em.stats()
    assert em.stats().in_flight == 0  # the held batch counts as pending in the spool, not twice
    exporter.abort()  # the export fails: nothing of the held batch was delivered
    assert em.wait_until(lambda s: s.export_failures >= 1 and s.in_flight == 0, WAIT), em.stats()
    stats = em.stats()
    assert stats.spool_pending == 24 and stats.spooled == 24 and stats.dropped == {} and stats.exported == 0
    em.close(timeout=1.0)
    next_run_sends(emitters, tmp_path, events)  # the first four first, each once


def test_a_held_packed_export_that_half_fails_resends_only_its_failed_events(
        tmp_path: Path, emitters: list[BackgroundEmitter]) -> None:
    """A stalled packed export whose first record got through and whose second did not (the
    exporter aborted before the broker took it): only the second record's events are sent again.
    Held in emission order (rank 0, rank 1, rank 0, ...), the failed events were no suffix of the
    held batch and the spool, which can only skip a delivered prefix, resent rank 0's too."""

    class FirstRecordOnly(HeldExporter):
        def export(self, records: Sequence[OutRecord]) -> None:
            if self.records or len(records) < 2:
                return super().export(records)
            self.entered.set()
            with self._cv:
                self._cv.wait_for(lambda: self.released)
                self.records.append(records[0])
            raise ExportError("the second record was not taken", failed=records[1:])

    exporter = FirstRecordOnly()
    em = make(emitters, exporter, pack=True, batch_size=8, flush_interval_s=0.01, spool_dir=tmp_path,
              stall_s=0.05, retry_backoff_s=0.001)
    events = step_events(24, world=2)  # ranks 0 and 1 alternate: two packed records per batch
    emit_into_a_held_export(em, exporter, events, 8)
    assert em.wait_until(lambda s: s.spool_pending == 24 and s.queued == 0, WAIT), em.stats()
    exporter.release()
    assert em.flush(WAIT), em.stats()
    got = [(e.rank, e.step) for r in exporter.records for e in steps_of(r.value)]
    assert sorted(got) == sorted((e.rank, e.step) for e in events), "each event exactly once"
    for rank in (0, 1):
        assert [s for r, s in got if r == rank] == list(range(12)), f"rank {rank} in order"
    assert em.stats().exported == 24 and em.stats().dropped == {}
