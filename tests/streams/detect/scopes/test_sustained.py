"""Sustained stragglers (streams/detect/scopes/sustained.py) on hand-built groups, no simulator."""

from __future__ import annotations

import numpy as np

from streams.detect.scopes.sustained import WINDOW, StepObservation, SustainedState, update


def _step(busy: np.ndarray) -> StepObservation:
    """One 4-rank group (domain 0) with these busy times."""
    obs = StepObservation.empty(busy.size)
    median = float(np.median(busy))
    wait = 1.0 - float(busy.mean() / busy.max())
    slowest = np.zeros(busy.size, dtype=bool)
    slowest[int(np.argmax(busy))] = True
    obs.add(0, np.arange(busy.size, dtype=np.int64), busy / median - 1.0, slowest,
            np.full(busy.size, median), np.full(busy.size, wait))
    return obs


def _run(rng: np.random.Generator, steps: int, slow_factor: float, sigma: float) -> list[list[int]]:
    state = SustainedState()
    hits = []
    for _ in range(steps):
        busy = 100.0 * rng.lognormal(0.0, sigma, 4)
        busy[2] *= slow_factor
        # the job's typical relative deviation, as slow_rank estimates it (median |x/median - 1|)
        noise = float(np.median(np.abs(busy / np.median(busy) - 1.0)))
        ranks, *_ = update(state, _step(busy), noise=max(noise, sigma * 0.6745))
        hits.append(ranks.tolist())
    return hits


def test_a_rank_twice_as_slow_under_20_percent_noise_is_found_once_the_window_is_full() -> None:
    hits = _run(np.random.default_rng(7), 60, slow_factor=2.0, sigma=0.2)
    assert all(h == [] for h in hits[: WINDOW - 1]), "no verdict before a full window"
    flagged = [h for h in hits[WINDOW:] if h]
    assert len(flagged) >= 0.8 * (60 - WINDOW) and all(h == [2] for h in flagged)


def test_independent_noise_never_makes_a_sustained_straggler() -> None:
    rng = np.random.default_rng(11)
    for sigma in (0.02, 0.08, 0.35):
        assert not any(_run(rng, 2000, slow_factor=1.0, sigma=sigma)), sigma


def test_a_rank_that_is_rarely_the_slowest_is_not_sustained() -> None:
    # rank 2 is slower by about one noise deviation: often but not mostly the slowest, excess small
    hits = _run(np.random.default_rng(3), 300, slow_factor=1.05, sigma=0.08)
    assert sum(1 for h in hits if h) < 5


def test_a_rank_missing_from_the_window_gets_no_verdict() -> None:
    state = SustainedState()
    for step in range(3 * WINDOW):
        busy = np.array([100.0, 100.0, 300.0, 100.0])
        obs = _step(busy)
        if step % 4 == 0:  # rank 2 did not report this step
            obs.excess[2] = np.nan
            obs.slowest[2] = False
        ranks, *_ = update(state, obs, noise=0.01)
        assert 2 not in ranks.tolist()


def _spread_step(busy: np.ndarray, step_ms: float) -> StepObservation:
    """`_step` with each member's gap to the latest other member, over the step."""
    obs = _step(busy)
    order = np.sort(busy)
    latest_other = np.where(busy == order[-1], order[-2], order[-1])
    obs.gap[:] = (busy - latest_other) / step_ms
    return obs


def _spread_run(rng: np.random.Generator, steps: int, lead: float, sigma: float, n: int = 8) -> list[list[int]]:
    """A group whose members arrive spread out every step (fixed offsets 0..30 % of the step, plus noise);
    the last member is `lead` of the step behind the next-latest one."""
    state = SustainedState()
    base = np.linspace(70.0, 100.0, n - 1)
    hits = []
    for _ in range(steps):
        busy = np.append(base, 100.0 + 100.0 * lead) * rng.lognormal(0.0, sigma, n)
        noise = float(np.median(np.abs(busy / np.median(busy) - 1.0)))  # ~10 %: the spread itself
        ranks, *_ = update(state, _spread_step(busy, 110.0), noise=noise, gap_share=0.05)
        hits.append(ranks.tolist())
    return hits


def test_a_rank_its_spread_out_group_waits_for_alone_is_found() -> None:
    # the latest rank is 8 % of the step behind the next-latest every step: its excess (~25 % over the median) is
    # less than 4x the group's typical deviation (the spread), but the group loses those 8 % to it alone
    hits = _spread_run(np.random.default_rng(2), 40, lead=0.088, sigma=0.005)
    assert all(h == [7] for h in hits[WINDOW:])


def test_a_latest_rank_close_behind_the_next_is_not_sustained() -> None:
    assert not any(_spread_run(np.random.default_rng(2), 200, lead=0.02, sigma=0.005))


def test_independent_noise_makes_no_sustained_gap() -> None:
    rng = np.random.default_rng(13)
    for n, sigma in ((3, 0.08), (8, 0.08), (8, 0.35), (64, 0.08)):
        state = SustainedState()
        for _ in range(2000):
            busy = 100.0 * rng.lognormal(0.0, sigma, n)
            noise = float(np.median(np.abs(busy / np.median(busy) - 1.0)))
            ranks, *_ = update(state, _spread_step(busy, 120.0), noise=max(noise, sigma * 0.6745), gap_share=0.05)
            assert ranks.size == 0, (n, sigma)
