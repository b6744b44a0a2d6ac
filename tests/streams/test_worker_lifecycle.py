"""A real worker subprocess stops cleanly on SIGTERM, with the broker up and with no broker at all,
and without a broker it logs a bounded number of client errors instead of thousands a second."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import REPO_ROOT, Settings, load_settings
from schemas import Topics
from streams.topics_admin import TopicsUnavailable, ensure_topics


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def _start(env: dict[str, str], log: Path, role: str = "land") -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen([sys.executable, "-m", "streams", "worker", "--role", role], cwd=REPO_ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_SECRETS_DIR": str(settings.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
            "STEPLENS_TOPIC_PARTITIONS": "1", "STEPLENS_CHDB_PATH": str(settings.home / "chdb")}


def _terminate(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("worker ignored SIGTERM") from None


@pytest.mark.integration
@pytest.mark.kafka
def test_sigterm_with_broker_stops_cleanly(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    settings = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
        secrets_dir=kafka_settings.secrets_path,
                       topic_prefix=f"{unique_name}.", app_id=unique_name, topic_partitions=1)
    log = tmp_path / "worker.log"
    proc = _start(_env(settings), log)
    try:
        # running = Faust says the worker is ready (it joined its group and got its partitions)
        _wait_for(lambda: proc.poll() is not None or "Ready" in log.read_text(errors="replace"), 120,
                  "the worker to start")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        code = _terminate(proc) if proc.poll() is None else proc.returncode
    assert code == 0, log.read_text(errors="replace")[-3000:]


@pytest.mark.integration
def test_sigterm_without_broker_stops_cleanly_and_client_errors_are_rate_limited(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    settings = replace(load_settings({}), home=tmp_path, kafka_bootstrap=f"127.0.0.1:{_closed_port()}",
        secrets_dir=kafka_settings.secrets_path,
                       app_id="nobroker")
    log = tmp_path / "worker.log"
    started = time.monotonic()
    proc = _start(_env(settings), log)
    try:
        # let it try (and fail) to reach the broker for a while: several retry rounds of topic creation
        _wait_for(lambda: log.read_text(errors="replace").count("topic creation failed") >= 3, 120,
                  "repeated topic-creation attempts")
        assert proc.poll() is None, "the worker must keep retrying, not exit"
    finally:
        code = _terminate(proc) if proc.poll() is None else proc.returncode
    periods = (time.monotonic() - started) / 10.0 + 1  # the filter's period is 10 s
    assert code == 0
    text = log.read_text(errors="replace")
    # every retry makes kafka-python log connection errors; the filter lets 5 per template per 10 s through
    client_errors = [line for line in text.splitlines() if line.startswith(("ERROR:kafka", "ERROR:aiokafka"))]
    templates = {line.split(":", 2)[1] for line in client_errors}
    assert client_errors, "the client errors must still be reported"
    assert len(client_errors) <= 5 * len(templates) * periods, f"{len(client_errors)} client error lines"
    assert "similar messages suppressed" in text


def test_ensure_topics_gives_up_after_its_deadline() -> None:
    # nothing listens: plaintext keeps the test off the local broker's secrets directory (CI runs it first)
    settings = replace(load_settings({"STEPLENS_KAFKA_SECURITY": "plaintext"}),
                       kafka_bootstrap=f"127.0.0.1:{_closed_port()}")
    with pytest.raises(TopicsUnavailable, match="attempts"):
        ensure_topics(settings, Topics("x."), 1, wait_s=1.0)


@pytest.mark.integration
@pytest.mark.kafka
def test_a_second_land_worker_on_one_embedded_store_exits_with_a_clear_error(
        kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    """Embedded chdb is one process's store. A second land worker on it used to join the group, take
    its share of the partitions and fail every insert while holding them ("Cannot lock file
    .../status", make soak); it now refuses to start (exit 2) and says why."""
    from sinks import open_backend
    from sinks.read_endpoint import ReadEndpoint

    settings = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
                       secrets_dir=kafka_settings.secrets_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=1, chdb_path=tmp_path / "chdb")
    owner = open_backend(settings)  # this test process plays the first land worker, announcing its reads
    endpoint = ReadEndpoint(settings.embedded_path, settings.clickhouse_database).start()
    log = tmp_path / "second.log"
    try:
        proc = _start(_env(settings), log)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            _terminate(proc)
            raise
    finally:
        endpoint.stop()
        owner.close()
    text = log.read_text(errors="replace")
    assert code == 2, text[-3000:]
    assert "is open in another process (a land worker (pid" in text, text[-3000:]
