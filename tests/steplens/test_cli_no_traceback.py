"""Every `steplens` subcommand, run as a user runs it (its own process, its own stderr and logging), with bad
values, unknown jobs, missing or unwritable folders, a store it cannot open and services down: a message and a
non-zero exit, never a Python traceback (issue #46). A library that logs a failed connection with its traceback
(clickhouse-driver does) counts as a traceback here: the process's whole stderr is read."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

QUERIES: list[list[str]] = [
    ["ranks", "--job", "j"], ["hosts", "--job", "j"], ["incidents"], ["incidents", "--job", "j", "--rule", "R4"],
    ["perf", "--job", "j"], ["perf", "--job", "j", "--breakdown"], ["memory", "--job", "j"], ["offenders"],
    ["lost"], ["health"], ["report", "--job", "j", "-o", "{tmp}/r/j.html"], ["report", "-o", "{tmp}/r/all.html"],
    ["timeline", "--job", "j", "--ranks", "0-3", "--steps", "0-9", "-o", "{tmp}/t/j.json"],
    ["model", "show"], ["model", "export", "-o", "{tmp}/m.json"], ["migrate"],
]
FORMATTED = ("ranks", "hosts", "incidents", "perf", "memory", "offenders", "lost", "health")
BAD_VALUES: list[list[str]] = [
    ["ranks", "--job", "j", "--since", "yesterday"], ["ranks", "--job", "j", "--since", "2026-13-45"],
    ["ranks", "--job", "j", "--until", "6x"], ["ranks", "--job", "j", "--limit", "-5"],
    ["ranks", "--job", "j", "--limit", "0"], ["ranks", "--job", "j", "--limit", "ten"],
    ["hosts", "--job", "j", "--limit", "-1"], ["hosts"], ["incidents", "--rank", "-3"], ["incidents", "--rank", "x"],
    ["perf", "--job", "j", "--recompute", "-1"], ["perf", "--job", "j", "--recompute", "nan"], ["perf"],
    ["memory", "--job", "j", "--limit", "0"], ["memory"], ["memory", "--job", "j", "--since", "tomorrow"],
    ["lost", "--slow-ratio", "0"], ["lost", "--slow-ratio", "1"], ["lost", "--slow-ratio", "fast"],
    ["offenders", "--min-jobs", "0"], ["health", "--limit", "-2"], ["health", "--since", "1y"],
    ["timeline", "--job", "j", "--ranks", "x", "--steps", "0"], ["timeline", "--job", "j", "--ranks", "0"],
    ["timeline", "--job", "j", "--ranks", "0", "--steps", "9-2-1"], ["report", "--since", "-1h"],
    ["model", "show", "--version", "0"], ["model", "fit", "--min-jobs", "-2"], ["model"], ["model", "nope"],
    ["migrate", "--version", "x"], ["ranks", "--job", "j", "--format", "xml"], ["nope"], [],
    ["ranks", "--job", "j", "--bogus"], ["analyse"], ["analyse", "{tmp}/no/such/trace.json"],
    ["replay"], ["alerts"], ["alerts", "forward", "--bogus"], ["serve", "--port", "-1"], ["serve", "--port", "x"],
    ["demo", "--steps", "x"], ["demo", "--seed", "-"], ["--config", "{tmp}/no/such.toml", "ranks", "--job", "j"],
]


def _run(argv: list[str], env: dict[str, str], tmp: Path) -> tuple[list[str], int, str]:
    args = [a.replace("{tmp}", str(tmp)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "steplens.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp)
    return args, proc.returncode, proc.stdout + proc.stderr


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLENS_")}
    env.update({"STEPLENS_HOME": extra.pop("home"), **extra})
    return env


def _all_quiet(cases: list[tuple[list[str], dict[str, str]]], tmp: Path) -> list[tuple[list[str], int, str]]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = list(pool.map(lambda c: _run(c[0], c[1], tmp), cases))
    for args, code, said in done:
        assert "Traceback" not in said, (args, said[-3000:])
        assert code != 0 and said.strip(), (args, code, said)  # refused, with a message
    return done


def test_services_down_and_unwritable_paths_show_no_traceback(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    closed = "127.0.0.1:1"  # nothing listens on port 1
    server_down = _env(home=home, STEPLENS_CLICKHOUSE_URL=f"clickhouse://{closed}", STEPLENS_KAFKA_BOOTSTRAP=closed,
                       STEPLENS_KAFKA_REQUEST_TIMEOUT_S="2")
    (tmp_path / "not-a-dir").write_text("a file where the store's folder would go")
    no_store = _env(home=home, STEPLENS_CLICKHOUSE_URL="", STEPLENS_CHDB_PATH=str(tmp_path / "not-a-dir" / "chdb"))
    cases = [(q, server_down) for q in QUERIES] + [(q, no_store) for q in QUERIES if q[0] != "migrate"]
    cases += [([*q, "--format", f], server_down) for q in QUERIES if q[0] in FORMATTED[:3] for f in ("json", "csv")]
    # output paths that cannot be written: under a file, and under /proc
    for out in ("{tmp}/not-a-dir/r.html", "/proc/steplens/r.html"):
        cases += [(["report", "-o", out], server_down), (["model", "export", "-o", out], server_down),
                  (["timeline", "--job", "j", "--ranks", "0", "--steps", "0", "-o", out], server_down)]
    # Kafka down: without its credentials (a set-up message), and with them (the broker named, after a bootstrap
    # of `kafka_request_timeout_s`)
    kafka_down = {**server_down, "STEPLENS_KAFKA_USER": "reader", "STEPLENS_KAFKA_PASSWORD": "x",
                  "STEPLENS_KAFKA_CA_FILE": "/etc/ssl/certs/ca-certificates.crt"}  # any CA: no broker answers
    forward = ["alerts", "forward", "--once", "--alertmanager", f"http://{closed}"]
    cases += [(forward, server_down), (forward, kafka_down)]
    assert len(cases) >= 40
    done = _all_quiet(cases, tmp_path)
    said = {(" ".join(args), id(env)): out for (args, _, out), (_, env) in zip(done, cases, strict=True)}
    assert "no Kafka password" in said[(" ".join(forward), id(server_down))]
    assert "Kafka at 127.0.0.1:1" in said[(" ".join(forward), id(kafka_down))]
    assert "clickhouse://127.0.0.1:1" in said[("ranks --job j", id(server_down))]
    assert "Connection refused" in said[("ranks --job j", id(server_down))]
    assert "not-a-dir" in said[("ranks --job j", id(no_store))]


def test_bad_values_are_refused_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Values argparse or the command refuses before any service is reached: in this process (it is argparse's
    and the command's own checking, no client library's logging), each with its message and a non-zero exit."""
    from steplens.cli import main

    for key in [k for k in os.environ if k.startswith("STEPLENS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "clickhouse://127.0.0.1:1")
    monkeypatch.chdir(tmp_path)
    refused = 0
    for argv in BAD_VALUES + [[*q, "--format", f] for q in QUERIES if q[0] in FORMATTED[3:] for f in ("json", "csv")]:
        code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and code != 0 and captured.err.strip(), (argv, code, captured)
        refused += 1
    assert refused >= 55


@pytest.mark.clickhouse
def test_an_empty_embedded_store_says_so_for_every_query(tmp_path: Path) -> None:
    """A fresh machine's default (embedded chdb, nothing landed yet): each query says there is no such job or
    nothing to show, never a traceback, never an empty artefact."""
    env = _env(home=str(tmp_path / "home"), STEPLENS_CLICKHOUSE_URL="", STEPLENS_CHDB_PATH=str(tmp_path / "chdb"))
    done = _all_quiet([(q, env) for q in QUERIES if q[0] not in ("migrate",)], tmp_path)
    assert all(code in (1, 3) for _, code, _ in done), [(a, c) for a, c, _ in done]
    assert not list((tmp_path / "r").glob("*.html")) and not (tmp_path / "t").exists()
