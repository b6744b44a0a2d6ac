"""The parse worker's pure half: a ProfileReady in, rows and an incident update out (no Kafka here)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from schemas import ControlCommand, ProfileReady
from streams.profiles.worker import CommandIndex, DumpError, analyse_dump, diagnosis_incident
from tests.streams.profiles.conftest import ASCEND, KINETO


def _event(uri: str, fmt: str = "kineto", command_id: str | None = "cmd-1") -> ProfileReady:
    return ProfileReady(job="j", rank=1, host="h", format=fmt, uri=uri, step_first=50, step_last=50,  # type: ignore[arg-type]
                        ts_ns=1, command_id=command_id)


def _command() -> ControlCommand:
    return ControlCommand(command_id="cmd-1", job="j", action="profile_on", ranks=[1], step_first=50, step_count=1,
                          issued_ns=1, incident_id="inc-42")


def test_ascend_dump_gives_breakdown_rows_and_a_diagnosis(real_samples: Path) -> None:
    root = ASCEND / "rank1_ascend_pt"
    result = analyse_dump(_event(str(root), "ascend_pt"), (ASCEND,), now_ns=10**18)
    breakdowns = [r for r in result.rows if r.table == "profile_breakdowns"]
    kernels = [r for r in result.rows if r.table == "profile_kernels"]
    assert len(breakdowns) == 1 and len(kernels) > 100
    row = dict(zip(breakdowns[0].columns, breakdowns[0].row, strict=True))
    assert row["rank"] == 1 and row["step"] == 50
    assert row["compute_us"] == pytest.approx(8878.295, rel=0.02)  # step_trace_time.csv of rank 1
    assert result.cause and result.suggestion and "evidence" in result.summary
    incident = diagnosis_incident(_event(str(root), "ascend_pt"), _command(), result, None, 10**18)
    assert incident.incident_id == "inc-42" and incident.state == "update" and incident.rule == "DIAGNOSIS"
    assert incident.cause == result.cause and incident.suggestion == result.suggestion


def test_uri_outside_roots_is_refused(real_samples: Path, tmp_path: Path) -> None:
    with pytest.raises(DumpError) as err:
        analyse_dump(_event(str(KINETO / "trace_filter_sampled_rank-0.json.gz")), (tmp_path,), now_ns=1)
    assert err.value.field == "uri"


def test_missing_and_truncated_dumps_are_clear_errors(real_samples: Path, tmp_path: Path) -> None:
    with pytest.raises(DumpError, match="does not exist"):
        analyse_dump(_event(str(tmp_path / "nope.json")), (tmp_path,), now_ns=1)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes((KINETO / "trace_filter_sampled_rank-0.json.gz").read_bytes()[:30_000])
    with pytest.raises(DumpError) as err:
        analyse_dump(_event(str(cut)), (tmp_path,), now_ns=1)
    assert err.value.field == "content"
    incident = diagnosis_incident(_event(str(cut)), _command(), None, err.value, 1)
    assert incident.incident_id == "inc-42" and "could not be analysed" in incident.summary
    plain = tmp_path / "half.json"
    with gzip.open(KINETO / "trace_filter_sampled_rank-0.json.gz") as fh:
        plain.write_bytes(fh.read()[:100_000])
    with pytest.raises(DumpError, match="truncated"):
        analyse_dump(_event(str(plain)), (tmp_path,), now_ns=1)


def test_command_index_is_bounded() -> None:
    index = CommandIndex(capacity=2)
    for i in range(3):
        index.add(ControlCommand(command_id=f"c{i}", job="j", action="profile_on", ranks=[0], step_first=0,
                                 step_count=1, issued_ns=1, incident_id=f"i{i}"))
    assert index.get("c0") is None
    assert index.get("c2") is not None and index.get("c2").incident_id == "i2"  # type: ignore[union-attr]


def test_errors_cross_a_spawned_process_pool(real_samples: Path, tmp_path: Path) -> None:
    """The worker parses in a process pool: results and DumpErrors must survive pickling."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cut = tmp_path / "cut.json"
    cut.write_bytes(b'{"traceEvents": [{"ph": "X", "na')
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(DumpError) as err:
            pool.submit(analyse_dump, _event(str(cut)), (tmp_path,), 1).result(timeout=120)
        assert err.value.field == "content" and "truncated" in str(err.value)
        ok = pool.submit(analyse_dump, _event(str(ASCEND / "rank0_ascend_pt"), "ascend_pt"), (ASCEND,), 1)
        assert ok.result(timeout=120).rows
