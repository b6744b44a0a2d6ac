"""Detect snapshots are data (format SLD1, streams/detect/state/format.py): stable type names, fields by name,
no code paths; the last pickled format (SLS8) restores once through its migration (legacy.py)."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard

from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine, JobEngine
from streams.detect.state import format as snapshot_format
from streams.detect.state import legacy
from streams.detect.state.outbox import Outbox
from streams.detect.state.store import decode_snapshot, encode
from tests.streams.detect.state.test_engine_state import CUT, _chunks, _restart_job, _run, chunks_of

# `encode(engine, outbox)` of `_restart_job` after CUT chunks, its first outputs pending in the outbox, written
# by main 2c95b98 in format SLS8 (a pickle), with the wire events of that job as its simulator made them, one
# list per decode batch (the snapshot's state is of these events; a later simulator may make other ones)
FIXTURES = Path(__file__).parent / "fixtures"
SLS8 = FIXTURES / "sls8_before_data.bin"
SLS8_EVENTS = FIXTURES / "sls8_before_data.events.json.gz"


def _sls8_chunks() -> list[dict[str, object]]:
    batches = orjson.loads(gzip.decompress(SLS8_EVENTS.read_bytes()))
    return chunks_of([[raw.encode() for raw in batch] for batch in batches])


def test_a_snapshot_written_before_the_data_format_restores_through_its_migration_and_runs_on() -> None:
    """The restored job goes on exactly as the job that never stopped (same outputs after CUT); its next
    snapshot is SLD1 and restores to the same state again."""
    raw = SLS8.read_bytes()
    assert raw[:4] == legacy.MAGIC
    snap = decode_snapshot(raw, DetectionConfig())
    assert snap is not None
    engine, outbox = snap
    assert type(engine) is JobEngine and outbox.job == engine.job == "restart"
    assert [seq for seq, _ in outbox.pending] == [1, 2] and outbox.scan_from == {("alerts", 0): 5}
    chunks = _sls8_chunks()
    whole = _run(FleetEngine(DetectionConfig()), chunks, 0)
    before = _run(FleetEngine(DetectionConfig()), chunks[:CUT], 0)
    assert [o for _, o in outbox.pending] == before[:2]
    migrated = encode(engine, outbox)
    assert migrated[:4] == snapshot_format.MAGIC
    again = decode_snapshot(migrated)
    assert again is not None and again[1] == outbox
    for restored_engine in (engine, again[0]):  # the migrated job, and its first SLD1 snapshot
        restored = FleetEngine(DetectionConfig())
        restored.jobs["restart"] = restored_engine
        assert before + _run(restored, chunks[CUT:], CUT) == whole
    assert any(getattr(o, "state", None) == "open" for o in whole)


def test_the_migration_unpickles_only_what_a_snapshot_held() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("ran",))

    raw = legacy.MAGIC + zstandard.ZstdCompressor().compress(pickle.dumps((Evil(), Outbox("j"))))
    with pytest.raises(ValueError, match=r"builtins\.print"):
        legacy.decode(raw)
    assert decode_snapshot(raw) is None  # the store ignores it: the job starts afresh


def test_a_snapshot_names_no_module_and_every_object_by_a_stable_name() -> None:
    fleet = FleetEngine(DetectionConfig())
    _run(fleet, _chunks(_restart_job())[:CUT], 0)
    raw = encode(fleet.jobs["restart"])
    plain = zstandard.ZstdDecompressor().decompress(raw[4:])
    for path in (b"streams.", b"infra.", b"schemas.", b"numpy", b"builtins"):
        assert path not in plain
    shown = snapshot_format.dump(raw)
    types = {o["$type"] for o in shown["objects"]}
    assert {"engine.JobEngine", "frames.StepFrames", "incidents.IncidentBook", "outbox.Outbox"} <= types
    assert types <= set(snapshot_format.TYPES)
    assert shown["root"]["engine"] == {"$ref": 0, "$type": "engine.JobEngine"}
    job = shown["objects"][0]["fields"]
    assert job["job"] == "restart" and "cfg" not in job  # restore gives the worker's own settings
    orjson.dumps(shown, option=orjson.OPT_NON_STR_KEYS)  # JSON as `steplens state dump` prints it


def test_restored_fields_go_by_name_a_new_one_stays_unset_and_a_gone_one_is_dropped() -> None:
    from streams.detect.engine import EngineStats

    stats = EngineStats.__new__(EngineStats)
    snapshot_format._fill(stats, {"chunks": 3, "gone_field": 1, "late": 2}, DetectionConfig())
    assert stats.chunks == 3 and stats.late == 2 and not hasattr(stats, "frames")
    assert not hasattr(stats, "gone_field")


def test_what_two_places_hold_is_one_object_after_a_restore() -> None:
    """A relaunch shares its input offsets (a dict) and counts with the attempt it replaced: a restore that
    gave each its own copy would apply the replaced attempt's later chunks to offsets the new one never sees."""
    engine = JobEngine.create("j", DetectionConfig())
    engine.offsets[3] = 41
    engine.ended = False
    fresh = engine.relaunched(1)
    assert fresh.previous is engine and fresh.offsets is engine.offsets
    restored, _ = snapshot_format.decode(encode(fresh))
    assert restored.previous is not None
    assert restored.offsets is restored.previous.offsets and restored.offsets == {3: 41}
    assert restored.stats is restored.previous.stats
    assert restored.cfg is restored.previous.cfg


def test_values_keep_their_kinds() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    engine.drift = frozenset({"ib", "roce"})
    engine.stats.rule_seconds = {"r1": 0.5}
    engine.frames.topo.grow(4)
    box = Outbox("j")
    box.scan_from = {("alerts", 2): 9}
    restored, restored_box = snapshot_format.decode(encode(engine, box))
    assert restored.drift == frozenset({"ib", "roce"}) and type(restored.drift) is frozenset
    assert restored_box.scan_from == {("alerts", 2): 9}
    for name in type(engine.frames.topo).__slots__:
        mine, theirs = getattr(engine.frames.topo, name), getattr(restored.frames.topo, name)
        if isinstance(mine, np.ndarray):
            assert theirs.dtype == mine.dtype and theirs.flags.writeable
            np.testing.assert_array_equal(theirs, mine)
        else:
            assert theirs == mine and type(theirs) is type(mine)


def test_an_open_frame_with_its_kernel_rows_and_collective_columns_round_trips() -> None:
    from streams.detect.windows.comm_columns import comm_columns
    from streams.detect.windows.step_frames import Frame
    from tests.streams.helpers import kernel_rows

    engine = JobEngine.create("j", DetectionConfig())
    engine.frames.topo.grow(4)
    frame = engine.frames.frames[3] = Frame.empty(3, 4, 0)
    frame.kernels = [kernel_rows([[r, 3, [["allreduce/dp", "comm", 4, 1000 + r, None, 64, "dp"]], 7]
                                  for r in range(4)], engine.frames.names)]
    built = comm_columns(frame)  # cached on the frame, as an evaluation leaves it
    restored, _ = snapshot_format.decode(encode(engine))
    again = restored.frames.frames[3]
    assert again.comm is not None and set(again.comm) == set(built) == {"allreduce/dp"}
    np.testing.assert_array_equal(again.comm["allreduce/dp"].total_ns, built["allreduce/dp"].total_ns)
    rows = again.kernel_rows()
    assert rows is not None and rows.rank.tolist() == [0, 1, 2, 3]
    assert encode(restored) == encode(engine)  # nothing lost or added on the way


def test_a_class_without_a_stable_name_is_refused_when_written_not_lost_silently() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    engine.device_kind = object()  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"builtins\.object.*TYPES"):
        encode(engine)


def _rewritten_head(raw: bytes, **head: object) -> bytes:
    """`raw` with these head entries replaced."""
    from msgspec.msgpack import Decoder, Encoder

    plain = zstandard.ZstdDecompressor().decompress(raw[4:])
    n = int.from_bytes(plain[:4], "little")
    new = Encoder().encode(Decoder().decode(plain[4:4 + n]) | head)
    return snapshot_format.MAGIC + zstandard.ZstdCompressor().compress(
        len(new).to_bytes(4, "little") + new + plain[4 + n:])


def test_an_unknown_type_name_or_version_is_a_clear_refusal() -> None:
    raw = encode(JobEngine.create("j", DetectionConfig()))
    types = snapshot_format.sections(raw)[0]["types"]
    assert snapshot_format.decode(_rewritten_head(raw))[0].job == "j"  # the rewriting alone changes nothing
    with pytest.raises(ValueError, match=r"engine\.Renamed"):
        snapshot_format.decode(_rewritten_head(raw, types=["engine.Renamed", *types[1:]]))
    with pytest.raises(ValueError, match="version 2"):
        snapshot_format.decode(_rewritten_head(raw, version=2))
    assert decode_snapshot(_rewritten_head(raw, version=2)) is None  # the store: the job starts afresh
    assert decode_snapshot(b"SLD1" + zstandard.ZstdCompressor().compress(b"\x00" * 9)) is None
