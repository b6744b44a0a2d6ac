"""The node relay dies mid-run (real Kafka, real `python -m producers.relay` processes).

Ranks (emitters with a RelayExporter, fed by a training thread that never waits) keep emitting while
the relay gets SIGKILL or SIGTERM; a new relay starts; then every event is checked against what the
ranks know:

- the training side never blocked nor dropped: every emit accepted, nothing dropped, all exported;
- after dedup every rank's events arrive in order;
- SIGTERM (a clean stop) loses nothing;
- SIGKILL with durable acks (the default: a frame is acknowledged once its records are in Kafka or the
  relay's spool) loses nothing;
- SIGKILL with acks once queued loses only inside that mode's loss window: records the killed relay
  acknowledged but had not produced yet. Per rank those are the tail of what it acknowledged, so the
  missing steps of a rank are one run ending at its last acknowledged step;
- duplicates are only the frame that was in flight (read by the killed relay, not acknowledged,
  re-sent by the rank).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.relay import RelayExporter
from schemas import StepEvent, Topics
from tests.producers._factories import step_event
from tests.producers._records import events_of
from tests.producers.hook.test_ddp_kafka import _read
from tests.producers.relay._process import RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

RANKS = 3
STEPS = 240


def _runs(steps: set[int]) -> list[range]:
    """`steps` as maximal runs of consecutive steps."""
    out: list[range] = []
    for s in sorted(steps):
        if out and out[-1].stop == s:
            out[-1] = range(out[-1].start, s + 1)
        else:
            out.append(range(s, s + 1))
    return out


@pytest.mark.parametrize(("sig", "durable"), [(signal.SIGKILL, True), (signal.SIGKILL, False),
                                              (signal.SIGTERM, True)],
                         ids=["sigkill-durable-ack", "sigkill-queued-ack", "sigterm"])
def test_relay_dies_mid_run_ranks_never_block_and_only_the_loss_window_is_lost(
        settings: Settings, tmp_path: Path, sig: signal.Signals, durable: bool) -> None:
    # a relay that sends every 0.5 s holds up to 0.5 s of the ranks' records when it is killed
    s = replace(settings, relay_flush_interval_s=0.5)
    relay_env = {"STEPLENS_RELAY_DURABLE_ACK": "1" if durable else "0"}
    topics = Topics(s.topic_prefix)
    job = "kill-job"
    ranks = [BackgroundEmitter(RelayExporter(s.relay_path, timeout_s=5.0), topics, spool_dir=tmp_path / f"spool{r}",
                               flush_interval_s=0.02, retry_backoff_s=0.05, retry_backoff_max_s=0.2, pack=True)
             for r in range(RANKS)]
    refused: list[tuple[int, int]] = []
    done = threading.Event()
    progress = threading.Event()  # set by the test: the trainer may run past the first third

    def train() -> None:
        """The training loop: emits every step on every rank; only paced, never waits on the relay."""
        for step in range(STEPS):
            if step == STEPS * 2 // 3:
                progress.wait(120)
            for r, em in enumerate(ranks):
                if not em.emit(step_event(step, rank=r, job=job, world=RANKS)):
                    refused.append((r, step))
            done.wait(0.005)

    relay: RelayProcess | None = RelayProcess(s, relay_env)
    trainer = threading.Thread(target=train, name="trainer")
    trainer.start()
    try:
        for em in ranks:  # mid-run: the relay has acknowledged some of every rank's records
            assert em.wait_until(lambda st: st.exported >= 40, timeout=60)
        assert all(em.stats().export_failures == 0 for em in ranks)
        deadline = time.monotonic() + 60  # and produced some of them: the relay is in its steady state
        while not _read(s, topics.steps) and time.monotonic() < deadline:
            pass
        progress.set()
        assert relay is not None
        if sig == signal.SIGKILL:
            relay.kill()
        else:
            relay.stop()
        relay = None
        # the first failed export comes after every acknowledged one is counted (one export thread per rank)
        for em in ranks:
            assert em.wait_until(lambda st: st.export_failures > 0 and st.spooled > 0, timeout=60)
        acked = [em.stats().exported for em in ranks]  # rank r's steps [0, acked[r]) were acknowledged
        relay = RelayProcess(s, relay_env)
        trainer.join(300)
        assert not trainer.is_alive()
        for em in ranks:
            assert em.flush(120)
        stats = [em.stats() for em in ranks]
        for em in ranks:
            assert em.close(30)
        relay.stop()
        relay = None
    finally:
        progress.set()
        done.set()
        trainer.join(60)
        for em in ranks:
            em.close(5)
        if relay is not None:
            relay.stop()

    # the rank side never blocked, refused nor dropped: everything was handed over, some of it twice
    assert refused == []
    for st in stats:
        assert (st.emitted, st.exported, st.dropped, st.pending) == (STEPS, STEPS, {}, 0), st

    first: dict[int, list[int]] = {r: [] for r in range(RANKS)}
    dups: dict[int, set[int]] = {r: set() for r in range(RANKS)}
    for m in sorted(_read(s, topics.steps), key=lambda m: (m.partition, m.offset)):
        for e in events_of(m.value):
            assert isinstance(e, StepEvent) and e.job == job
            (dups[e.rank].add(e.step) if e.step in first[e.rank] else first[e.rank].append(e.step))
    for r in range(RANKS):
        assert first[r] == sorted(first[r]), f"rank {r} out of order after dedup"
        missing = set(range(STEPS)) - set(first[r])
        if sig == signal.SIGTERM or durable:
            # a clean stop flushes; durable acks: nothing acknowledged was only in the relay's memory
            assert missing == set(), f"rank {r}: lost steps {_runs(missing)} (acknowledged up to {acked[r]})"
        else:
            # acked once queued: only the tail of what the killed relay acknowledged, one run ending at the last
            assert not missing or _runs(missing) == [range(min(missing), acked[r])], (r, _runs(missing), acked)
        # re-sent: only the frame in flight at the signal (read, not acknowledged), right after the acknowledged ones
        assert not dups[r] or _runs(dups[r]) == [range(acked[r], max(dups[r]) + 1)], (r, _runs(dups[r]), acked)
    lost = {r: len(set(range(STEPS)) - set(first[r])) for r in range(RANKS)}
    print(f"{sig.name} durable={durable}: acknowledged before the signal {acked}, lost {lost}, "
          f"re-sent {({r: len(d) for r, d in dups.items()})}")
