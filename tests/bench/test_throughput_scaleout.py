"""The scale-out mode's pure parts (`python -m bench.throughput --workers 1,2`): events per partition from
one step's records, each worker's share, and the per-configuration summary. No broker runs here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from bench.throughput import Job, Partitions, partition_events, scaleout_summary, worker_shares


def test_partition_events_count_the_packed_arrays_every_step() -> None:
    job = Job("j", 64)
    partition = Partitions([0, 1, 2, 3])
    records = job.step(0, 0.0, packed=True)
    topic_of = {"steps": "s", "kernels": "k", "device": "d"}
    got = partition_events(records, topic_of, partition, steps=10)
    assert sum(got.values()) == 3 * 64 * 10  # every event of the 10 steps, in some partition
    assert {t for t, _ in got} == {"s", "k", "d"} and all(0 <= p < 4 for _, p in got)
    unpacked = partition_events(job.step(1, 0.0, packed=False), topic_of, partition, steps=10)
    assert sum(unpacked.values()) == 3 * 64 * 10


def test_partition_events_of_a_plain_record_is_one() -> None:
    got = partition_events([("steps", b"a", orjson.dumps({"type": "step"}))], {"steps": "s"}, lambda _k: 2, steps=5)
    assert got == {("s", 2): 5}


def test_worker_shares_over_the_groups_topics() -> None:
    events = {("s", 0): 30, ("s", 1): 10, ("s", 2): 40, ("s", 3): 20, ("other", 0): 999}
    got = worker_shares({"m-a": [("s", 0), ("s", 1)], "m-b": [("s", 2), ("s", 3)]}, events)
    assert got == [{"partitions": 2, "events": 60, "share": 0.6}, {"partitions": 2, "events": 40, "share": 0.4}]


def test_worker_shares_of_an_idle_member_and_of_unknown_partitions() -> None:
    got = worker_shares({"busy": [("p", 0), ("p", 1)], "idle": []}, {})
    assert got == [{"partitions": 2, "events": 0, "share": None}, {"partitions": 0, "events": 0, "share": None}]


def _trial(workers: int, ranks: int, passed: bool, **kw: Any) -> dict[str, Any]:
    return {"workers": workers, "ranks": ranks, "passed": passed, "events_per_s": ranks * 3.0,
            "cpu_us_per_event": {"producer": 7.0, "detect": 18.0 + workers, "land": 17.0},
            "p99_latency_s": 0.5, **kw}


def test_scaleout_summary_compares_at_the_largest_size_every_count_held() -> None:
    trials = [_trial(1, 1024, True), _trial(1, 2048, True), _trial(1, 4096, False),
              _trial(2, 1024, True, cpu_us_per_event_by_worker={"detect1": 9.0}, shares={"land": []}),
              _trial(2, 2048, True, cpu_us_per_event_by_worker={"detect1": 9.5}, shares={"land": [{"share": 0.5}]}),
              _trial(2, 4096, True, cpu_us_per_event_by_worker={}, shares={})]
    got = scaleout_summary(trials)
    assert got["max_ranks"] == {"1": 2048, "2": 4096} and got["common_ranks"] == 2048
    assert got["at_common_ranks"]["1"]["events_per_s"] == 6144.0 and "shares" not in got["at_common_ranks"]["1"]
    assert got["at_common_ranks"]["2"]["cpu_us_per_event"]["detect"] == 20.0
    assert got["at_common_ranks"]["2"]["shares"] == {"land": [{"share": 0.5}]}


def test_scaleout_summary_without_a_common_size() -> None:
    got = scaleout_summary([_trial(1, 1024, False), _trial(2, 1024, True)])
    assert got == {"max_ranks": {"1": 0, "2": 1024}, "common_ranks": None, "at_common_ranks": {}}


def test_worker_env_carries_the_clusters_replication_and_clickhouse_cluster(tmp_path: Any) -> None:
    """Workers of a cluster run create their internal topics with RF 3 / min ISR 2 and migrate ON CLUSTER:
    their environment must say so (a single-broker env would make them RF 1 on a 3-broker cluster)."""
    from dataclasses import replace

    from infra.settings import Settings
    from steplens.demo import worker_env

    settings = replace(Settings(), kafka_bootstrap="127.0.0.1:29092,127.0.0.1:29192", topic_prefix="tpx.",
                       app_id="tpx", topic_replication_factor=3, topic_min_insync_replicas=2,
                       clickhouse_url="clickhouse://127.0.0.1:29000", clickhouse_database="tpx",
                       clickhouse_cluster="steplens", home=tmp_path, kafka_request_timeout_s=2.0,
                       kafka_reconnect_backoff_max_s=0.25)
    env = worker_env(settings)
    assert env["STEPLENS_TOPIC_REPLICATION_FACTOR"] == "3" and env["STEPLENS_TOPIC_MIN_INSYNC_REPLICAS"] == "2"
    assert env["STEPLENS_CLICKHOUSE_CLUSTER"] == "steplens" and env["STEPLENS_KAFKA_BOOTSTRAP"].count(",") == 1
    assert env["STEPLENS_HOME"] == str(tmp_path) and env["STEPLENS_APP_ID"] == "tpx"
    assert env["STEPLENS_CHDB_PATH"] == str(tmp_path / "chdb")
    assert "STEPLENS_CONFIG" not in env
    # the cluster's client timeouts reach the workers' own clients
    assert env["STEPLENS_KAFKA_REQUEST_TIMEOUT_S"] == "2.0"
    assert env["STEPLENS_KAFKA_RECONNECT_BACKOFF_MAX_S"] == "0.25"


def test_a_worker_s_cpu_counts_every_process_of_its_group(tmp_path: Path) -> None:
    """The detect worker's decode process is its child: the worker's CPU is its whole process group's."""
    from bench.throughput import TICKS, group_cpu_s

    def stat(pid: int, pgrp: int, utime: int, stime: int, name: str = "python") -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n")

    stat(100, 100, 300, 50)           # the worker
    stat(101, 100, 200, 10, "a) b")   # its decode process (a name with a parenthesis and a space)
    stat(102, 7, 999, 999)            # another group
    assert group_cpu_s(100, tmp_path) == (300 + 50 + 200 + 10) / TICKS
