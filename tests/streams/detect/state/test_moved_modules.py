"""Snapshots stay readable across module moves: classes pickled under their old paths
(streams.engine, streams.scopes..., before the detect stage moved under streams/detect/) restore
into the moved classes (streams/detect/state/store.py `MOVED_MODULES`)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import orjson

from infra.settings import DetectionConfig
from streams.advice import Advice
from streams.detect.engine import FleetEngine, JobEngine
from streams.detect.signals.device import _Hits
from streams.detect.signals.shared import SignalState
from streams.detect.state.outbox import Outbox
from streams.detect.state.store import DECOMPRESS, MOVED_MODULES, SnapshotUnpickler, current_module, decode_snapshot
from streams.detect.state.store import encode as encode_state
from streams.detect.windows.step_frames import StepFrames
from tests.streams.detect.state.test_engine_state import CUT, _chunks, _restart_job, _run, chunks_of

# `encode(engine, outbox)` of `_restart_job` after CUT chunks, its first 3 outputs pending in the outbox, written by
# main 000a825, before the detect stage moved under streams/detect/: its classes are pickled as
# streams.engine.JobEngine, streams.scopes.slow_rank..., streams.state.outbox.Outbox and so on.
BEFORE_MOVE = Path(__file__).parent / "fixtures" / "sls6_before_move.bin"
# the wire events of that job as the simulator of that time made them (SimulatedJob: the snapshot's engine state
# is of these events; the one simulator of today makes other ones), one list per decode batch
BEFORE_MOVE_EVENTS = Path(__file__).parent / "fixtures" / "sls6_before_move.events.json.gz"


def _before_move_chunks() -> list[dict[str, object]]:
    batches = orjson.loads(gzip.decompress(BEFORE_MOVE_EVENTS.read_bytes()))
    return chunks_of([[raw.encode() for raw in batch] for batch in batches])


def test_moved_modules_map_old_class_paths_to_the_moved_classes() -> None:
    unpickler = SnapshotUnpickler(io.BytesIO(b""))
    assert unpickler.find_class("streams.engine", "JobEngine") is JobEngine
    assert unpickler.find_class("streams.state.outbox", "Outbox") is Outbox
    assert unpickler.find_class("streams.windows.step_frames", "StepFrames") is StepFrames
    assert unpickler.find_class("streams.detect.engine", "JobEngine") is JobEngine  # today's paths as they are
    # signals.py became a package: its pickled classes are still found under the module path they had
    assert unpickler.find_class("streams.signals", "SignalState") is SignalState
    assert unpickler.find_class("streams.detect.signals", "SignalState") is SignalState
    assert unpickler.find_class("streams.detect.signals", "_Hits") is _Hits
    assert current_module("streams.analysis.advisor") == "streams.advice"
    assert current_module("streams.detect.advice") == "streams.advice"
    assert unpickler.find_class("streams.detect.advice", "Advice") is Advice  # snapshots before it moved down
    assert current_module("streams.scopes.slow_rank") == "streams.detect.scopes.slow_rank"
    assert current_module("schemas.events") == "schemas.events"
    assert current_module("streams.enginex") == "streams.enginex"  # a prefix only where a dot follows
    for new in MOVED_MODULES.values():
        __import__(new)  # every target exists


def test_a_snapshot_round_trips_under_the_new_paths() -> None:
    fleet = FleetEngine(DetectionConfig())
    before = _run(fleet, _chunks(_restart_job())[:CUT], 0)
    outbox = Outbox("restart")
    outbox.add(before[:2], {("alerts", 0): 5})  # type: ignore[arg-type]
    raw = encode_state(fleet.jobs["restart"], outbox)
    assert b"streams.detect.engine" in pickle_of(raw) and b"streams.engine" not in pickle_of(raw)
    snap = decode_snapshot(raw)
    assert snap is not None and type(snap[0]) is JobEngine and type(snap[1]) is Outbox
    assert snap[1] == outbox and snap[0].job == "restart"


def pickle_of(raw: bytes) -> bytes:
    return DECOMPRESS[raw[:4]](raw[4:])


def test_a_snapshot_written_before_the_move_restores_and_runs_on() -> None:
    """The restored job goes on exactly as the job that never stopped (same outputs after CUT)."""
    raw = BEFORE_MOVE.read_bytes()
    assert raw[:4] in DECOMPRESS, ("its format is no longer read: snapshots from before the move are ignored now; "
                                   "drop MOVED_MODULES (streams/detect/state/store.py) and this fixture")
    assert b"streams.engine" in pickle_of(raw) and b"streams.detect" not in pickle_of(raw)
    snap = decode_snapshot(raw)
    assert snap is not None
    engine, outbox = snap
    assert type(engine) is JobEngine and type(outbox) is Outbox and outbox.job == engine.job == "restart"
    assert [seq for seq, _ in outbox.pending] == [1, 2, 3]
    chunks = _before_move_chunks()
    whole = _run(FleetEngine(DetectionConfig()), chunks, 0)
    restored = FleetEngine(DetectionConfig())
    restored.jobs["restart"] = engine
    after = _run(restored, chunks[CUT:], CUT)
    # the incident the snapshot carried open (the straggler's) goes on exactly as in the job that never stopped
    carried = "SLOW_RANK:restart:rank:3:s10"
    assert [o for o in after if getattr(o, "incident_id", None) == carried] == [
        o for o in whole if getattr(o, "incident_id", None) == carried and (getattr(o, "step_last", 0) or 0) >= CUT]
    # the writing code also held a job-scope SLOW_STEP for the straggler's slow steps (today they join the
    # straggler's incident: incidents/join.py): restored, it only updates and resolves; nothing new opens
    assert len(after) == 4 and all(getattr(o, "state", None) in ("update", "resolved") for o in after)
