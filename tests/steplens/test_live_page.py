"""`steplens serve`: the fleet page, a job's report and an incident, from the history as it is now; and against a
running pipeline in headless Chromium, an incident on the page within seconds of its open (issue #46)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaProducer

from bench.detection.run import wait_caught_up
from infra.clients import kafka_client_config
from infra.settings import Settings, load_settings
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from sinks.backend import Backend
from steplens.demo import build_job, start_worker, stop_worker
from steplens.serve import LivePages, LiveServer
from streams.topics_admin import ensure_topics
from tests.sinks.landing import pipeline_env
from tests.steplens import chromium
from tests.steplens.fleet_data import Truth
from tests.steplens.test_report import OFFLINE

REPO = Path(__file__).resolve().parents[2]
PORT = 19480  # steplens serve's default; the integration test takes the next one


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [chromium.chromium(), *chromium.FLAGS, f"--user-data-dir={profile}", *extra,
            "--virtual-time-budget=1000", OFFLINE + ", EXCLUDE 127.0.0.1", url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def test_fleet_job_and_incident_pages(fleet: tuple[Backend, Truth]) -> None:
    backend, truth = fleet
    if hasattr(backend, "close") and backend.__class__.__name__ == "EmbeddedBackend":
        backend.close()  # the page opens the store per request, as a separate reader would
    server = LiveServer(LivePages(load_settings(), refresh_s=3, window="3d"), PORT)
    server.start()
    try:
        status, page = _get(server.url + "/")
        assert status == 200
        assert "<meta http-equiv='refresh' content='3'>" in page
        open_part = page.split("Incidents open now", 1)[1].split("<h2>", 1)[0]
        assert all(f"/incident/{i}'" in open_part for i in ("a-1", "a-2", "b-1"))
        assert "a-3" not in open_part  # resolved: not open now
        acted = page.split("Mitigation actions", 1)[1].split("<h2>", 1)[0]
        assert "SLOW_HOST:job-a:h1/drain" in acted and "steplens actions approve SLOW_HOST:job-a:h1/drain" in acted
        running = page.split("Jobs running", 1)[1].split("<h2>", 1)[0]
        assert "/job/job-a'" in running and "/job/job-b'" in running
        slow = page.split("Slowest ranks", 1)[1].split("<h2>", 1)[0]
        first_row = slow.split("<tr>")[2]
        assert f"<td>{truth.slow_rank}</td>" in first_row  # the straggler tops both jobs' lists
        assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)\s*=""", page, re.I)
        status, incident = _get(server.url + "/incident/a-1")
        assert status == 200 and "slow compute on the device" in incident and "/job/job-a'" in incident
        status, job_page = _get(server.url + "/job/job-a")
        assert status == 200 and "Throughput over time" in job_page and "http-equiv='refresh'" in job_page
        assert _get(server.url + "/job/no-such-job")[0] == 404
        assert _get(server.url + "/incident/nope")[0] == 404
        assert _get(server.url + "/elsewhere")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
@pytest.mark.kafka
@pytest.mark.clickhouse
def test_an_incident_reaches_the_live_page_within_seconds_while_the_pipeline_runs(
        kafka_settings: Settings, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "chdb"
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2, clickhouse_url="", chdb_path=store)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    env = pipeline_env(settings, tmp_path, store)
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(store))
    workers = [start_worker(role, env, tmp_path) for role in ("detect", "land")]
    server = LiveServer(LivePages(load_settings(), refresh_s=2, window="1h"), PORT + 1)
    server.start()
    producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all", linger_ms=5,
                             batch_size=1 << 20, max_request_size=2 << 20)
    try:
        # paced as a training job reports (a step every ~1.5 s): its straggler's incident opens ~10 steps in and
            # is open while the job runs
        stream = threading.Thread(target=stream_runs, args=([SimRun(build_job(unique_name, steps=30, seed=7))],
                                                            topics, lambda t, k, v: producer.send(t, key=k, value=v)),
                                  kwargs={"paced": True}, daemon=True)
        stream.start()
        deadline = time.monotonic() + 300  # workers start (Faust) and the job reaches its straggler
        seen_at: float | None = None
        while seen_at is None and time.monotonic() < deadline:
            status, page = _get(server.url + "/")
            if status == 200 and "/incident/" in page.split("Incidents open now", 1)[1].split("<h2>", 1)[0]:
                seen_at = time.time()
            else:
                time.sleep(0.5)
        assert seen_at is not None, (tmp_path / "worker-land.log").read_text(errors="replace")[-2000:]
        detected = re.search(r"<td>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)</td>", page.split("Incidents open now", 1)[1])
        assert detected is not None
        opened = time.mktime(time.strptime(detected.group(1) + " UTC", "%Y-%m-%d %H:%M:%S %Z")) - time.timezone
        # the page shows it within seconds of detect opening it (landing + one page load; whole seconds shown)
        assert seen_at - opened < 15, (seen_at, opened)
        # the served page itself, in Chromium, every other host unresolvable; read before its 2 s refresh
        result = _chromium(server.url + "/", tmp_path / "profile", "--dump-dom")
        assert result.returncode == 0, result.stderr[-2000:]
        console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert console == [], console
        assert "/incident/" in result.stdout and unique_name in result.stdout
        shot = tmp_path / "live.png"
        taken = _chromium(server.url + "/", tmp_path / "profile-shot", f"--screenshot={shot}",
                          "--window-size=1400,1100", "--hide-scrollbars")
        assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", taken.stderr[-2000:]
        if os.environ.get("STEPLENS_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, REPO / "docs" / "live.png")
        stream.join(120)
        producer.flush()
        wait_caught_up(settings, workers, 240)
    finally:
        producer.close()
        server.shutdown()
        server.server_close()
        for proc in workers:
            stop_worker(proc)
