"""The decode stage's child process: it dies with the worker, and its metrics reach the worker's."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from streams.detect.ingest.process import DecodeProcess, _counts, _Recorder
from streams.metrics import DetectMetrics

PARENT = """
import multiprocessing, os, time
from streams.detect.ingest.process import die_with_parent

def child(parent, armed):
    if die_with_parent(parent):
        armed.set()
        time.sleep(600)

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    armed = ctx.Event()
    proc = ctx.Process(target=child, args=(os.getpid(), armed), daemon=False)
    proc.start()
    armed.wait(60)
    print(proc.pid, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_child_dies_when_the_worker_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=Path(__file__).parents[4])
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)  # no chance to stop its children
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the decode process outlived the worker"
    finally:
        parent.kill()


def test_a_child_whose_worker_is_already_gone_says_so() -> None:
    code = "import os; from streams.detect.ingest.process import die_with_parent as d; print(d(os.getppid()), d(-1))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[4])
    assert out.stdout.split() == ["True", "False"]


def test_the_child_s_counters_and_batch_sizes_reach_the_worker_s_metrics() -> None:
    child = _Recorder()
    child.events_in.labels("steps").inc(5)
    child.bad.inc(2)
    child.batch.labels("decode").observe(7)
    worker = DetectMetrics()
    proc = DecodeProcess.__new__(DecodeProcess)
    proc.metrics = worker
    receive, send = multiprocessing.Pipe(duplex=False)
    proc._conn = receive
    send.send((_counts(child), child.sizes))
    child.events_in.labels("steps").inc(1)
    send.send(({("events_in", "steps"): 1.0}, []))
    send.close()
    proc._read_reports()  # returns at the pipe's end
    assert _counts(worker)[("events_in", "steps")] == 6.0
    assert _counts(worker)[("bad", "")] == 2.0
    sizes = [s.value for f in worker.batch.collect() for s in f.samples if s.name.endswith("_count")]
    assert sizes == [1.0]


def test_the_decode_process_is_the_default_and_a_thread_on_request() -> None:
    from infra.settings import load_settings

    assert load_settings(env={}).detect_decode_process is True
    assert load_settings(env={"STEPLENS_DETECT_DECODE_PROCESS": "false"}).detect_decode_process is False


def test_the_child_logs_like_the_worker_on_the_worker_s_stderr(capfd: object) -> None:
    """Spawned children start without logging: the decode group's INFO lines were lost and warnings came bare."""
    import logging

    from infra.settings import load_settings

    settings = load_settings(env={"STEPLENS_KAFKA_BOOTSTRAP": "127.0.0.1:9", "STEPLENS_KAFKA_SECURITY": "plaintext"})
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        proc = DecodeProcess(settings, DetectMetrics())
        proc.start()
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline and "[INFO]" not in text:
            time.sleep(0.5)
            text += capfd.readouterr().err  # type: ignore[attr-defined]
        proc.stop(10)
    finally:
        root.setLevel(level)
    child_lines = [line for line in text.splitlines() if f"] [{proc._proc.pid}] [" in line]
    assert any("[INFO]" in line for line in child_lines), text[-2000:]
