"""A backlog that delivers a job's steps (and its end) minutes before its kernel summaries.

Packed records of a long Kafka backlog are fetched by bytes per partition, so a job's small
step records run far ahead of its large summary records, and the tiny `job end` record comes
first of all. A job whose start declares summaries (contract 1.3) keeps its windows open
while the input lags, so R4–R9 and the slow-link scope still see them. Judged against the
simulator's ground truth with the bench's own scorer.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bench.detection.run import run_record, score_records
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics, bounded, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine, Output
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import T0

pytestmark = pytest.mark.slow  # ~20-50 s: left out of make test-quick

TOPICS = Topics("")
BATCH = 2048


def _replay(run: SimRun, summaries_first: bool = False) -> list[dict[str, Any]]:
    fleet = FleetEngine(DetectionConfig())
    now = [T0]
    out: list[Output] = []
    first: list[bytes] = []
    summaries: list[bytes] = []
    stream_runs([run], TOPICS, lambda t, k, v: (summaries if t == TOPICS.kernel_summaries else first).append(v))

    def feed(raws: list[bytes]) -> None:
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 120 * 10**9, 50_000  # read from a backlog
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now[0]))
        now[0] += 20_000_000
        out.extend(fleet.tick(now[0]))

    other: list[bytes] = []  # another job's backlog, read between this job's steps and its summaries
    stream_runs([SimRun(scenario_job("healthy", ranks=64, steps=150, seed=9, job_id="other"), include=("step",))],
                TOPICS, lambda t, k, v: other.append(v))
    order = ((summaries, BATCH), (other, 1), (first, BATCH)) if summaries_first else \
        ((first, BATCH), (other, 1), (summaries, BATCH))  # `other`: 24 s, past the window timeout
    for raws, batch in order:
        for i in range(0, len(raws), batch):
            feed(raws[i:i + batch])
    for _ in range(100):  # the backlog is drained: no more chunks
        now[0] += 500_000_000
        out.extend(fleet.tick(now[0]))
    assert fleet.jobs[run.job.job_id].finished
    if summaries_first:
        assert fleet.jobs[run.job.job_id].frames.stats.incomplete == 0, "every frame closed complete"
    assert 2 * fleet.jobs[run.job.job_id].frames.timeout_ns() < 24 * 10**9, "the gap outlasts a window timeout"
    return [orjson.loads(encode(bounded(o))) for o in out if isinstance(o, Incident)]


@pytest.mark.parametrize("name", ["link_degradation", "compile_defect"])
def test_summaries_read_after_the_job_ended_still_find_the_fault(name: str) -> None:
    run = SimRun(scenario_job(name, ranks=64, steps=60, seed=1, job_id=f"backlog-{name}"))
    messages = _replay(run)
    scores = score_records([run_record(name, run)], messages)["scenarios"][name]
    assert scores["recall"] == scores["precision"] == scores["localisation"] == 1.0, scores
    assert scores["rule_attribution"] == 1.0, scores


@pytest.mark.parametrize("name", ["link_degradation", "slow_host"])
def test_summaries_read_before_the_jobs_first_step_are_kept(name: str) -> None:
    """The other order (a summary partition read first, e.g. after a rebalance of the decode
    stage): summaries of a job with no step seen yet open its frames instead of being dropped,
    so its frames close complete as soon as the steps come, not on a timeout after the backlog."""
    run = SimRun(scenario_job(name, ranks=64, steps=60, seed=1, job_id=f"early-{name}"))
    messages = _replay(run, summaries_first=True)
    scores = score_records([run_record(name, run)], messages)["scenarios"][name]
    assert scores["recall"] == scores["precision"] == scores["localisation"] == 1.0, scores
    assert scores["rule_attribution"] == 1.0, scores


def test_a_job_that_declares_no_summaries_is_not_held_by_the_backlog() -> None:
    run = SimRun(scenario_job("slow_rank", ranks=64, steps=60, seed=1, job_id="backlog-steps-only"),
                 include=("step", "device"))
    messages = _replay(run)
    scores = score_records([run_record("slow_rank", run)], messages)["scenarios"]["slow_rank"]
    assert scores["recall"] == scores["precision"] == 1.0, scores
