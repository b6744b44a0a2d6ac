import numpy as np

from streams.windows.domain_window import DomainStepWindow, VerdictThresholds
from tests.streams.helpers import domain_record

NOW = 1_000


def make_window(lateness: int = 4, idle_ns: int = 10_000) -> DomainStepWindow:
    return DomainStepWindow(lateness_steps=lateness, idle_ns=idle_ns, thresholds=VerdictThresholds(0.05, 3.0))


def test_window_closes_when_every_rank_reported_and_names_the_slowest() -> None:
    window = make_window()
    rng = np.random.default_rng(1)
    out = []
    for rank in range(8):
        busy = 400.0 * (1 + rng.normal(0, 0.01)) * (1.3 if rank == 5 else 1.0)
        out += window.add(domain_record(rank, step=0, busy=busy), NOW)
    assert len(out) == 1
    gs = out[0]
    assert gs.reported == 8 and gs.missing == 0
    assert gs.slowest_rank == 5 and gs.flagged
    assert gs.wait_ratio > 0.2
    assert gs.slowest_excess_phase == "forward_ms"
    assert window.stats.closed_complete == 1


def test_healthy_group_is_not_flagged() -> None:
    window = make_window()
    rng = np.random.default_rng(2)
    for step in range(20):
        out = []
        for rank in range(8):
            out += window.add(domain_record(rank, step=step, busy=400.0 * (1 + rng.normal(0, 0.015))), NOW)
        assert len(out) == 1 and not out[0].flagged


def test_small_group_never_gets_a_verdict() -> None:
    window = make_window()
    out = window.add(domain_record(0, 0, 400.0, size=2), NOW) + window.add(domain_record(1, 0, 900.0, size=2), NOW)
    assert len(out) == 1 and not out[0].flagged


def test_incomplete_window_closes_by_lateness_and_late_record_is_counted_not_merged() -> None:
    window = make_window(lateness=2)
    assert window.add(domain_record(0, 0, 400.0, size=3), NOW) == []
    # ranks 0..2 complete steps 1 and 2; step 0 still lacks ranks 1 and 2
    closed = []
    for step in (1, 2):
        for rank in range(3):
            closed += window.add(domain_record(rank, step, 400.0, size=3), NOW)
    by_step = {gs.step: gs for gs in closed}
    assert by_step[0].reported == 1 and by_step[0].missing == 2
    assert window.stats.closed_incomplete == 1
    assert window.add(domain_record(1, 0, 400.0, size=3), NOW) == []
    assert window.stats.late == 1


def test_duplicate_record_replaces_not_double_counts() -> None:
    window = make_window()
    window.add(domain_record(0, 0, 400.0, size=3), NOW)
    window.add(domain_record(0, 0, 400.0, size=3), NOW)
    out = window.add(domain_record(1, 0, 400.0, size=3), NOW)
    assert out == []  # still waiting for rank 2: the duplicate did not count as a third rank
    out = window.add(domain_record(2, 0, 400.0, size=3), NOW)
    assert len(out) == 1 and out[0].reported == 3
    assert window.stats.duplicates == 1


def test_idle_windows_expire_and_job_flush_closes_the_rest() -> None:
    window = make_window(idle_ns=100)
    window.add(domain_record(0, 0, 400.0, size=4), NOW)
    assert window.expire(NOW + 50) == []
    expired = window.expire(NOW + 100)
    assert [gs.step for gs in expired] == [0]
    window.add(domain_record(0, 1, 400.0, size=4), NOW + 200)
    flushed = window.flush_job("job-a")
    assert [gs.step for gs in flushed] == [1] and window.open_windows() == 0


def test_backlog_skew_does_not_close_windows_early() -> None:
    """Catching up on a backlog, one rank's partition may run far ahead of the others'."""
    window = make_window(lateness=2)
    out = []
    for step in range(30):  # rank 0's partition is replayed first
        out += window.add(domain_record(0, step, 400.0, size=3), NOW)
    assert out == [] and window.open_windows() == 30
    for rank in (1, 2):
        for step in range(30):
            out += window.add(domain_record(rank, step, 400.0, size=3), NOW)
    assert sorted(gs.step for gs in out) == list(range(30))
    assert all(gs.reported == 3 for gs in out)
    assert window.stats.late == 0 and window.stats.closed_incomplete == 0
