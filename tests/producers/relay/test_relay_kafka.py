"""Real processes, real Kafka: ranks' emitters -> RelayExporter -> `python -m producers.relay` -> the broker.

- the relay not running at first: the ranks spool, the relay starts, everything arrives exactly once
  and in order per rank;
- the DDP workload (2 ranks, gloo) with STEPLENS_RELAY_SOCKET: every step event once, in order, keyed job/rank.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.relay import RelayExporter
from producers.workloads.ddp_transformer import WorkloadConfig, load_results, run
from schemas import StepEvent, Topics, rank_key
from tests.producers._factories import step_event
from tests.producers._records import events_of
from tests.producers.hook.test_ddp_kafka import _env, _read
from tests.producers.relay._process import REPO, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _steps_by_rank(s: Settings) -> tuple[dict[int, list[int]], list[tuple[bytes | None, int]]]:
    by_rank: dict[int, list[int]] = {}
    keys: list[tuple[bytes | None, int]] = []
    for m in sorted(_read(s, Topics(s.topic_prefix).steps), key=lambda m: (m.partition, m.offset)):
        for e in events_of(m.value):
            assert isinstance(e, StepEvent)
            by_rank.setdefault(e.rank, []).append(e.step)
            keys.append((m.key, e.rank))
    return by_rank, keys


def test_ranks_spool_until_the_relay_starts_then_all_arrive_once_in_order(settings: Settings, tmp_path: Path) -> None:
    topics = Topics(settings.topic_prefix)
    job, n = "relay-job", 60
    ranks = [BackgroundEmitter(RelayExporter(settings.relay_path), topics, spool_dir=tmp_path / f"spool{r}",
                               flush_interval_s=0.02, retry_backoff_s=0.05, retry_backoff_max_s=0.2, pack=True)
             for r in range(3)]
    relay: RelayProcess | None = None
    try:
        for step in range(n // 2):
            for r, em in enumerate(ranks):
                assert em.emit(step_event(step, rank=r, job=job, world=3))
        for em in ranks:  # no relay yet: every rank spools, none drops
            assert em.wait_until(lambda st: st.spooled >= n // 2 and st.export_failures > 0, timeout=60)
        relay = RelayProcess(settings)
        for step in range(n // 2, n):
            for r, em in enumerate(ranks):
                assert em.emit(step_event(step, rank=r, job=job, world=3))
        for em in ranks:
            assert em.flush(60)
            st = em.stats()
            assert (st.exported, st.dropped) == (n, {})
        for em in ranks:
            assert em.close(30)
        err = relay.stop()
        relay = None
        assert "dropped {}" in err, err
        by_rank, keys = _steps_by_rank(settings)
        assert by_rank == {r: list(range(n)) for r in range(3)}  # exactly once, in order per rank
        assert all(k == rank_key(job, r) for k, r in keys)
    finally:
        for em in ranks:
            em.close(5)
        if relay is not None:
            relay.stop()


def test_ddp_ranks_send_through_the_relay(settings: Settings, tmp_path: Path) -> None:
    relay = RelayProcess(settings)
    try:
        steps = 12
        cfg = WorkloadConfig(job="relay-ddp", world=2, steps=steps, follow_control=False, block=6,
                             out_dir=str(tmp_path / "out"),
                             env={**_env(settings), "STEPLENS_RELAY_SOCKET": settings.relay_socket})
        run(cfg)
        for r in load_results(Path(cfg.out_dir)):
            assert not r["emitter_dropped"], r["emitter_dropped"]
        deadline = time.monotonic() + 60
        by_rank: dict[int, list[int]] = {}
        while time.monotonic() < deadline and by_rank != {r: list(range(steps)) for r in range(2)}:
            by_rank, keys = _steps_by_rank(settings)
        assert by_rank == {r: list(range(steps)) for r in range(2)}
        assert all(k == rank_key(cfg.job, r) for k, r in keys)
    finally:
        err = relay.stop()
    m = re.search(r"(\d+) connections, (\d+) records in, (\d+) exported", err)
    assert m and int(m[1]) >= 2 and int(m[2]) > 0 and m[2] == m[3], err  # both ranks' records, all sent


def test_sampler_runs_the_relay_and_sends_its_own_samples_through_it(settings: Settings) -> None:
    env = {**os.environ, **_env(settings), "STEPLENS_RELAY_SOCKET": settings.relay_socket}
    res = subprocess.run([sys.executable, "-m", "producers.sampler", "--relay", "--source", "host", "--ticks", "3",
                          "--interval", "0.1", "--host", "relay-node"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    samples = [e for m in _read(settings, Topics(settings.topic_prefix).device) for e in events_of(m.value)]
    assert len(samples) >= 3 and all(getattr(e, "host", None) == "relay-node" for e in samples), samples
    assert not Path(settings.relay_socket).exists()  # the relay removed its socket on exit
