"""`steplens replay` end to end: real two-rank traces through the real broker and a detect worker.

A pair is judged by the peer's wait (streams/detect/scopes/slow_pair.py). On the Kineto pair's collectives that
both traces hold, rank 0 waits 1.4 % of step 551 and 2.8 % of step 552 for rank 1: under the pair rule's 5 %,
no incident names it; the landed history (`steplens ranks`) has rank 1 as the slowest rank (HTA's straggler). The
trace itself shows job-wide: the GPUs idle half of every step (device kernels explain 50 % of the step), R7's
minority-kernel gap, opened at the third step of persistence. The torch_npu
level-0 pair: rank 0 waits 16.9 ms (13 % of the step) for rank 1 every step, msprof-analyze's slow
rank: one SLOW_RANK incident for rank 1.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from bench.replay import history_verdict, live_verdict, run_live
from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.replay import load_replay
from schemas import JobEvent, KernelSummary, StepEvent, Topics
from schemas.codec import decode_mapping
from schemas.packing import split_record
from steplens.cli import main
from streams.profiles.samples import real_samples_dir

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

KINETO = [real_samples_dir() / "kineto-hta" / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
LEVEL0 = Path(__file__).resolve().parents[3] / "bench" / "data" / "real" / "msinsight-torch_npu-level0"


def test_real_trace_replayed_through_kafka_is_judged_by_the_detect_worker(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2)
    replay = load_replay(KINETO, f"{unique_name}-kineto", time.time_ns(), repeats=5)
    live = run_live(settings, [replay], speed=0.0, logs=tmp_path, stall_s=60.0, land_db=tmp_path / "chdb")[replay.job]
    log = (tmp_path / "worker-detect.log").read_text(errors="replace")[-3000:]
    assert live["finished"], log
    assert (live["dropped"], live["events"]) == (0, len(replay.events()))
    incidents = live["incidents"]
    assert [(i["state"], i["rule"], i["scope"]) for i in incidents] == [("open", "R7", "job"),
                                                                        ("resolved", "R7", "job")], log
    assert incidents[0]["step_first"] == 553 and incidents[0]["observed"] == pytest.approx(0.50, abs=0.01)
    assert live_verdict(incidents, replay.trace_rank) is None
    history = live["slowest_ranks"]  # landed by the land worker, read as `steplens ranks` reads it
    assert [(r["rank"], r["steps"]) for r in history] == [(1, 10), (0, 10)]
    assert history_verdict(history) == 1 and history[0]["busy_ms"] > history[1]["busy_ms"]


def test_a_real_pair_whose_peer_waits_opens_one_slow_rank_incident(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2)
    replay = load_replay([LEVEL0], f"{unique_name}-level0", time.time_ns(), repeats=20)
    live = run_live(settings, [replay], speed=0.0, logs=tmp_path, stall_s=60.0)[replay.job]
    log = (tmp_path / "worker-detect.log").read_text(errors="replace")[-3000:]
    assert live["finished"] and live["dropped"] == 0, log
    incidents = live["incidents"]
    assert [(i["state"], i["rule"], i["scope"], i["ranks"]) for i in incidents] == [
        ("open", "SLOW_RANK", "rank", [1]), ("resolved", "SLOW_RANK", "rank", [1])], log
    # rank 0 waits 12.3 % of the step for rank 1 (13.1 % of a shorter step before rank 1's step began when
    # rank 0's did: it opens its own range 16 ms late; producers/replay/convert.py `_aligned_starts`)
    assert incidents[0]["evidence"]["wait_gap_share_dp"] == pytest.approx(0.123, abs=0.002)
    assert live_verdict(incidents, replay.trace_rank) == 1


def test_cli_replay_writes_every_event_to_the_topics(
    kafka_settings: Settings, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`steplens replay` as a user runs it: settings from the environment, topics created when missing."""
    for name, value in {"STEPLENS_HOME": str(tmp_path), "STEPLENS_KAFKA_BOOTSTRAP": kafka_settings.kafka_bootstrap,
                        "STEPLENS_TOPIC_PREFIX": f"{unique_name}.", "STEPLENS_TOPIC_PARTITIONS": "2",
                        "STEPLENS_SECRETS_DIR": str(kafka_settings.secrets_path)}.items():
        monkeypatch.setenv(name, value)
    job = f"{unique_name}-cli"
    assert main(["replay", *map(str, KINETO), "--job", job, "--speed", "0", "--repeat", "2"]) == 0
    assert "18 events sent, 0 dropped" in capsys.readouterr().err
    topics = Topics(f"{unique_name}.")
    got: dict[str, list[object]] = {}
    for topic in (topics.jobs, topics.steps, topics.kernel_summaries):
        consumer = KafkaConsumer(topic, **kafka_client_config(kafka_settings, "admin"),
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
        got[topic] = [decode_mapping(item) for msg in consumer for item in split_record(msg.value)[0]]
        consumer.close()
    assert [(e.phase, e.world) for e in got[topics.jobs] if isinstance(e, JobEvent)] == [("start", 2), ("end", 2)]
    steps = sorted((e.step, e.rank) for e in got[topics.steps] if isinstance(e, StepEvent) and e.job == job)
    assert steps == [(s, r) for s in (551, 552, 553, 554) for r in (0, 1)]
    assert len([e for e in got[topics.kernel_summaries] if isinstance(e, KernelSummary)]) == 8
