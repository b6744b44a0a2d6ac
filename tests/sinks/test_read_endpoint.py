"""Reading an embedded store that another process lands into (issue #46).

A second process owns the chdb store (as the land worker does: chdb locks it to one process),
loads the test fleet and serves its read endpoint; this process then reads through it with the
CLI, the report and plain HTTP, and finds writes refused by the engine.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from infra.settings import REPO_ROOT, load_settings
from sinks import SinkError, open_backend
from sinks.endpoint_backend import EndpointBackend
from sinks.read_endpoint import READER_USER, endpoint_file
from steplens.cli import main

pytestmark = pytest.mark.clickhouse

HOLDER = """
import sys
from pathlib import Path
from sinks.embedded import EmbeddedBackend
from sinks.read_endpoint import ReadEndpoint
from tests.steplens.fleet_data import load

backend = EmbeddedBackend(Path(sys.argv[1]), "steplens")
load(backend)
endpoint = ReadEndpoint(backend.path, "steplens").start() if sys.argv[2] == "serve" else None
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
if endpoint is not None:
    endpoint.stop()
backend.close()
"""


def _hold(store: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(store), mode], cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    store = tmp_path / "chdb"
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(store))
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_DATABASE", "steplens")
    proc = _hold(store, "serve")
    try:
        yield store
    finally:
        _release(proc)


def _http(url: str, sql: str, **params: str) -> tuple[int, bytes]:
    full = f"{url}/?{urllib.parse.urlencode({'query': sql, **params})}"
    try:
        with urllib.request.urlopen(full, timeout=30) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_queries_the_cli_and_the_report_read_while_another_process_holds_the_store(
        held: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = open_backend(load_settings())
    assert isinstance(backend, EndpointBackend)
    assert backend.query("SELECT count() FROM steplens.steps") == [(2 * 40 * 16,)]
    rows = backend.query("SELECT job, min(event_date) FROM steplens.steps GROUP BY job ORDER BY job")
    assert [r[0] for r in rows] == ["job-a", "job-b"] and rows[0][1].year > 2000  # Date typed back
    with pytest.raises(SinkError, match="read-only"):
        backend.execute("DROP TABLE steplens.steps")
    assert main(["ranks", "--job", "job-a", "--limit", "3", "--format", "json"]) == 0
    ranks = orjson.loads(capsys.readouterr().out)
    assert ranks[0]["rank"] == 5
    assert main(["incidents", "--job", "job-a"]) == 0
    report = tmp_path / "r.html"
    assert main(["report", "--job", "job-a", "-o", str(report)]) == 0
    assert report.stat().st_size > 10_000


def test_plain_http_clients_read_with_the_token_and_cannot_write(held: Path) -> None:
    doc = orjson.loads(endpoint_file(held).read_bytes())
    url, token = doc["url"], doc["token"]
    assert oct(endpoint_file(held).stat().st_mode & 0o777) == "0o600"
    assert _http(url, "SELECT count() FROM steplens.steps", user=READER_USER, password=token) == (200, b"1280\n")
    status, body = _http(url, "SELECT count() FROM steplens.steps")
    assert status == 403 and b"authentication failed" in body
    status, _ = _http(url, "SELECT 1", user=READER_USER, password=token + "x")
    assert status == 403
    status, body = _http(url, "SELECT 1; DROP TABLE steplens.steps", user=READER_USER, password=token)
    assert status == 400 and b"one statement" in body
    assert _http(url, "SELECT ';' AS s; -- a comment", user=READER_USER, password=token) == (200, b";\n")
    for sql in ("DROP TABLE steplens.steps", "INSERT INTO steplens.incidents (incident_id) VALUES ('x')",
                "SELECT * FROM file('/etc/hostname', 'LineAsString')",
                "CREATE TABLE steplens.x (a UInt8) ENGINE = Memory"):
        status, body = _http(url, sql, user=READER_USER, password=token)
        assert status == 403 and b"READONLY" in body, (sql, status, body[:200])
    request = urllib.request.Request(f"{url}/?default_format=JSONCompact", data=b"SELECT 41 + 1 AS x",
                                     headers={"Authorization": "Basic " + base64.b64encode(
                                         f"{READER_USER}:{token}".encode()).decode()})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert orjson.loads(resp.read())["data"] == [[42]]
    assert _http(url.replace("/?", "/"), "")[0] in (400, 403)
    with urllib.request.urlopen(f"{url}/ping", timeout=10) as resp:
        assert resp.read() == b"Ok.\n"
    backend = open_backend(load_settings())
    assert backend.query("SELECT count() FROM steplens.topology") == [(32,)]  # still fine after the refusals


def test_a_holder_without_an_endpoint_is_named_and_the_store_opens_once_it_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "chdb"
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(store))
    proc = _hold(store, "quiet")
    try:
        with pytest.raises(SinkError, match="announces no read endpoint"):
            open_backend(load_settings())
    finally:
        _release(proc)
    backend = open_backend(load_settings())
    try:
        assert not isinstance(backend, EndpointBackend)
        assert backend.query("SELECT count() FROM steplens.steps") == [(1280,)]
    finally:
        backend.close()


def test_a_store_this_process_holds_opens_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chdb allows more sessions on one path within a process: the CLI run in-process beside an open store
    (tests, the demo's own queries) opens it, it does not look for another process's endpoint."""
    from sinks.embedded import EmbeddedBackend, held_by_this_process, in_use_by_another_process

    store = tmp_path / "chdb"
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(store))
    owner = EmbeddedBackend(store, "steplens")
    try:
        assert in_use_by_another_process(store) and held_by_this_process(store)
        second = open_backend(load_settings())
        assert isinstance(second, EmbeddedBackend)
        assert second.query("SELECT 1") == [(1,)]
        second.close()
    finally:
        owner.close()
    assert not held_by_this_process(store)
