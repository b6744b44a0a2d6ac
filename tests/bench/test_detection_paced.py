"""The paced plan of bench-detection: several faults at once, healthy steps of at most 1 s (issue #6's 1 step/s)."""

from __future__ import annotations

import argparse

from bench.detection.run import PACED, PACED_STEP_S, plan_paced
from producers.simulator.catalogue import SCENARIOS


def _args(**kw: object) -> argparse.Namespace:
    values: dict[str, object] = {"scenario": None, "paced_seeds": None, "paced_steps": 40, "ranks": 64}
    values.update(kw)
    return argparse.Namespace(**values)


def test_every_paced_scenario_and_seed_is_planned_with_its_fault_inside_the_run() -> None:
    runs = plan_paced(_args(), "t")
    expected = [f"{name}@paced" for name, seeds in PACED.items() for _ in range(seeds)]
    assert sorted(label for label, _ in runs) == sorted(expected)
    assert len({run.job.job_id for _, run in runs}) == len(runs)
    for _, run in runs:
        assert run.faults and all(0 < f.start < run.job.steps for f in run.faults)


def test_paced_steps_take_at_most_the_target_and_not_much_less() -> None:
    for label, run in plan_paced(_args(paced_seeds=1), "t"):
        nominal_s = run.job.nominal_ms / 1000
        assert 0.8 * PACED_STEP_S < nominal_s <= PACED_STEP_S, (label, nominal_s)
        default = SCENARIOS[label.split("@")[0]].model(run.job.topology)
        assert run.job.model.seq <= default.seq  # only the sequence is shortened


def test_scenario_filter_and_seed_override() -> None:
    runs = plan_paced(_args(scenario=["slow_host"], paced_seeds=2), "t")
    assert [label for label, _ in runs] == ["slow_host@paced", "slow_host@paced"]
