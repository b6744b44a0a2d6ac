"""`steplens serve`: the live page. A fleet page (jobs running, incidents open now, the slowest ranks and
hosts of the last hour), each job's report, each incident; refreshing while the pipeline runs.

Why a server and not only the report file: an operator paged at 3 a.m. follows the alert's link
(`generatorURL` = this page's incident) and wants what is true now, not a file someone wrote an
hour ago. Every request opens the fleet's history as the CLI does (the ClickHouse server, or the
land worker's read endpoint while it lands into embedded chdb: sinks/read_endpoint.py), asks its
questions and closes it again, so the page never holds a store a land worker needs.

Pages are self-contained (no script, style or font from anywhere else) and refresh themselves
(`<meta http-equiv="refresh">`): the fleet page every `refresh_s`, a job's report less often (it
carries plotly.js). Served on 127.0.0.1 only, like the rest of the local stack.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import urllib.parse
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from infra.settings import Settings
from sinks.backend import SinkError
from steplens.queries.base import Result, TimeRange, run

log = logging.getLogger(__name__)

_CSS = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}h2{margin-top:24px}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
        "th{background:#f2f2f2}p.note{color:#555;font-size:13px}.critical{color:#b00}.warning{color:#a60}"
        "p.error{color:#b00}")


def _cell(column: str, value: Any) -> str:
    if column == "job":
        return f"<a href='/job/{urllib.parse.quote(str(value), safe='')}'>{escape(str(value))}</a>"
    if column == "incident_id":
        return f"<a href='/incident/{urllib.parse.quote(str(value), safe='')}'>{escape(str(value))}</a>"
    if column == "severity":
        return f"<span class='{escape(str(value))}'>{escape(str(value))}</span>"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return escape(", ".join(str(v) for v in value[:8]) + (" …" if len(value) > 8 else ""))
    return escape(str(value))


def _table(result: Result, empty: str) -> str:
    if not result.rows:
        return f"<p class='note' data-name='{escape(result.name)}'>{escape(empty)}</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in result.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c, v)}</td>" for c, v in zip(result.columns, row, strict=True))
                   + "</tr>" for row in result.rows)
    return f"<table data-name='{escape(result.name)}'><tr>{head}</tr>{body}</table>"


def _page(title: str, body: str, refresh_s: float) -> bytes:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='{refresh_s:g}'>"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"
            f"<p class='note'>{escape(now)} · refreshes every {refresh_s:g} s · <a href='/'>fleet</a></p>"
            f"{body}</body></html>").encode()


class LivePages:
    """What each URL shows (pure of HTTP: the handler below only routes)."""

    def __init__(self, settings: Settings, refresh_s: float = 5.0, window: str = "1h") -> None:
        self.settings = settings
        self.refresh_s = refresh_s
        self.window = window

    def _backend(self) -> Any:
        from sinks import open_backend
        from sinks.migrations.runner import migrate

        backend = open_backend(self.settings, "read")
        migrate(backend, cluster=self.settings.clickhouse_cluster)
        return backend

    def fleet(self) -> bytes:
        from steplens.queries import live

        window = TimeRange.parse(self.window, None)
        with self._backend() as backend:
            jobs = run(backend, live.jobs_running(window))
            open_now = run(backend, live.incidents_open())
            ranks = run(backend, live.slowest_ranks_now(window))
            hosts = run(backend, live.slowest_hosts_now(window))
            actions = run(backend, live.actions_recent(window))
        body = (f"<h2>Incidents open now ({len(open_now.rows)})</h2>{_table(open_now, 'no incident is open')}"
                f"<h2>Mitigation actions (last {escape(self.window)})</h2>"
                f"{_table(actions, 'no node drained or awaiting approval')}"
                f"<h2>Jobs running (a step in the last {escape(self.window)})</h2>"
                f"{_table(jobs, 'no job reported a step in this window')}"
                f"<h2>Slowest ranks (against their job's median, last {escape(self.window)})</h2>"
                f"{_table(ranks, 'no rank reported')}"
                f"<h2>Slowest hosts</h2>{_table(hosts, 'no host reported')}")
        return _page("steplens: the fleet now", body, self.refresh_s)

    def job(self, job: str) -> bytes | None:
        from steplens.queries.report import collect
        from steplens.report_html import render

        with self._backend() as backend:
            known = backend.query(f"SELECT count() FROM `{backend.database}`.topology WHERE job = %(job)s",
                                  {"job": job})
            if not known or not known[0][0]:
                return None
            data = collect(backend, job, TimeRange())
        html = render(data, dt.datetime.now(dt.UTC))
        refresh = f"<meta http-equiv='refresh' content='{max(30.0, 6 * self.refresh_s):g}'>"
        return html.replace("<head>", "<head>" + refresh, 1).encode()

    def incident(self, incident_id: str) -> bytes | None:
        from steplens.queries import live

        with self._backend() as backend:
            found = run(backend, live.incident(incident_id))
        if not found.rows:
            return None
        rec = dict(zip(found.columns, found.rows[0], strict=True))
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{_cell(k, v)}</td></tr>" for k, v in rec.items())
        body = f"<table data-name='incident'>{rows}</table>"
        return _page(f"{rec['rule']}: {rec['summary'][:120]}", body, self.refresh_s)


class _Handler(BaseHTTPRequestHandler):
    server: LiveServer

    def log_message(self, format: str, *args: Any) -> None:  # the base class's name for it
        log.debug("live page: " + format, *args)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        pages = self.server.pages
        try:
            if path in ("/", "/index.html"):
                self._reply(200, pages.fleet())
                return
            kind, _, name = path.strip("/").partition("/")
            name = urllib.parse.unquote(name)
            body = pages.job(name) if kind == "job" and name else (
                pages.incident(name) if kind == "incident" and name else None)
            if body is None:
                self._reply(404, _page("not found", f"<p class='error'>nothing at {escape(path)}</p>",
                                       pages.refresh_s))
                return
            self._reply(200, body)
        except SinkError as exc:  # ClickHouse or the read endpoint is down: say so, keep serving
            self._reply(503, _page("steplens: the fleet's history cannot be read now",
                                   f"<p class='error'>{escape(str(exc))}</p>", pages.refresh_s))


class LiveServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: LivePages, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.pages = pages

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="steplens-live", daemon=True)
        thread.start()
        return thread
