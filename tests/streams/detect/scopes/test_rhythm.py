"""The job's rhythm (scopes/rhythm.py) as a pure function: periodic work learned, a slower episode named."""

from __future__ import annotations

from streams.detect.config import DetectionConfig
from streams.detect.scopes import rhythm, slow_step

PARAMS = DetectionConfig().params(slow_step.Params)
BASE = 1000.0  # the job's baseline step (ms)


def _step(state: rhythm.RhythmState, step: int, ms: float, cause: str | None = "interstep_cpu_ms",
          inter_ms: float = 0.0) -> rhythm.Judgement:
    """A step of `ms`, slow when above 1.1x the baseline; `inter_ms` of inter-step growth under the bar."""
    slow = ms > 1.1 * BASE
    grown = {"interstep_cpu_ms": inter_ms or (ms - BASE if cause == "interstep_cpu_ms" else 0.0),
             "data_ms": ms - BASE if cause == "data_ms" else 0.0, "forward_ms": 0.0}
    return rhythm.observe(state, step, slow, cause if slow else None, grown, ms, BASE, PARAMS)


def _checkpoint(state: rhythm.RhythmState, at: int, copy_ms: float, tail_steps: int,
                tail_ms: float = 120.0) -> list[str]:
    """A 'copy_ms' blocking copy at step `at`, then `tail_steps` steps of a background write."""
    out = [_step(state, at, BASE + copy_ms).verdict]
    for k in range(1, tail_steps + 1):
        out.append(_step(state, at + k, BASE + tail_ms, inter_ms=tail_ms).verdict)
    for k in range(tail_steps + 1, tail_steps + 5):
        out.append(_step(state, at + k, BASE, cause=None).verdict)
    return out


def test_an_asynchronous_checkpoints_write_is_its_aftermath_the_first_time_already() -> None:
    state = rhythm.RhythmState()
    verdicts = _checkpoint(state, 30, 600.0, 6)
    assert verdicts[0] == "normal"  # the spike alone: a slow step as before (one never opens an incident)
    assert verdicts[1:7] == ["planned"] * 6


def test_a_mild_slowdown_with_no_spike_gets_no_aftermath() -> None:
    state = rhythm.RhythmState()
    verdicts = [_step(state, s, BASE * 1.2, cause="data_ms").verdict for s in range(40, 50)]
    assert verdicts == ["normal"] * 10  # a data loader slowed from one step to the next: judged as ever


def test_a_rhythm_is_learned_and_an_episode_much_slower_than_its_past_is_named_at_once() -> None:
    state = rhythm.RhythmState()
    for at in (25, 50, 75):
        _checkpoint(state, at, 600.0, 6)
    on_time = _checkpoint(state, 100, 650.0, 7)
    assert set(on_time[:8]) == {"planned"}  # on the rhythm, within its past: the spike too
    slower = _step(state, 125, BASE + 1800.0)
    assert slower.verdict == "slower" and slower.period == 25
    assert slower.excess_ms > 2 * slower.past_excess_ms
    assert _step(state, 126, BASE + 80.0, inter_ms=80.0).verdict == "slower"  # its write goes on, under the bar


def test_a_slow_batch_before_a_checkpoint_does_not_swallow_it() -> None:
    state = rhythm.RhythmState()
    for at in (25, 50, 75):
        _checkpoint(state, at, 600.0, 6)
    assert _step(state, 98, BASE * 1.15, cause="data_ms").verdict == "normal"
    assert _step(state, 100, BASE + 1900.0).verdict == "slower"  # the checkpoint's own episode, on its rhythm


def test_an_episode_off_the_rhythm_is_not_judged_by_it() -> None:
    state = rhythm.RhythmState()
    for at in (25, 50, 75):
        _checkpoint(state, at, 600.0, 6)
    assert _step(state, 89, BASE + 1900.0).verdict == "normal"  # not 100 +- 1: an ordinary slow step


def test_two_episodes_are_no_rhythm_yet() -> None:
    """Slow steps of healthy noise (a data hiccup) fall at random: two of them some steps apart, then a
    data stall that many steps later, is no rhythm to judge the stall by."""
    state = rhythm.RhythmState()
    for at in (25, 50):
        _checkpoint(state, at, 600.0, 6)
    assert _step(state, 75, BASE + 1900.0).verdict == "normal"


def test_the_checkpoint_period_is_known_once_three_checkpoints_kept_it() -> None:
    state = rhythm.RhythmState()
    for at in (25, 50):
        _checkpoint(state, at, 600.0, 6)
    assert rhythm.checkpoint_every(state, PARAMS.rhythm_min_period) == 0  # two: no rhythm yet
    _checkpoint(state, 76, 600.0, 6)  # +-1 step: the same rhythm
    assert rhythm.checkpoint_every(state, PARAMS.rhythm_min_period) == 26
    late = rhythm.RhythmState()
    for at in (10, 35, 90):
        _checkpoint(late, at, 600.0, 6)
    assert rhythm.checkpoint_every(late, PARAMS.rhythm_min_period) == 0  # no period kept
