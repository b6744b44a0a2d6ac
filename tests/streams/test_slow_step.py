from streams.analysis.slow_step import SlowStepDetector


def feed(detector: SlowStepDetector, times: dict[int, float], gc: dict[int, float]) -> list:
    out = []
    for step in sorted(times):
        out += detector.observe(step, times[step], {"gc_ms": gc.get(step, 5.0), "forward_ms": 300.0}, now_ns=step)
    return out


def test_run_of_slow_steps_is_one_incident_with_cause() -> None:
    detector = SlowStepDetector("j", warmup_steps=3, baseline_steps=20, ratio=1.10)
    times = {s: 500.0 + (s % 3) for s in range(30)}
    gc = {}
    for s in (12, 13, 14):
        times[s] = 800.0
        gc[s] = 305.0
    out = feed(detector, times, gc)
    assert [i.state for i in out] == ["open", "update", "update", "resolved"]
    final = out[-1]
    assert (final.step_first, final.step_last) == (12, 14)
    assert final.rule == "SLOW_STEP" and final.incident_id == "SLOW_STEP:j:s12"
    assert final.cause == "Python garbage-collection pauses"
    assert final.expected is not None and 499 < final.expected < 503
    assert detector.slow_steps == [12, 13, 14]


def test_no_verdict_during_warmup_and_no_false_alarm_on_noise() -> None:
    detector = SlowStepDetector("j", warmup_steps=5, baseline_steps=20, ratio=1.10)
    times = {s: 500.0 * (1.05 if s % 7 == 0 else 1.0) for s in range(60)}
    times[2] = 2000.0  # inside warm-up: ignored
    assert feed(detector, times, {}) == []


def test_slow_steps_do_not_poison_the_baseline() -> None:
    detector = SlowStepDetector("j", warmup_steps=2, baseline_steps=5, ratio=1.10)
    times = {s: 500.0 for s in range(5)} | {s: 700.0 for s in range(5, 20)}
    feed(detector, times, {})
    assert detector.baseline_ms() == 500.0
    assert detector.slow_steps == list(range(5, 20))
