"""The contract's names that detection keeps as columns come from the contract itself."""

from __future__ import annotations

from dataclasses import fields

from schemas import DeviceSample, Phases
from schemas.columns import DEVICE_METRICS, DOMAINS, PHASES
from schemas.device import METRICS


def test_device_metrics_are_every_measurement_of_a_sample() -> None:
    measured = {f.name for f in fields(DeviceSample)} - {"host", "device", "ts_ns", "job", "rank", "device_kind"}
    assert set(METRICS) == measured and DEVICE_METRICS is METRICS


def test_phases_and_domains_are_the_contracts() -> None:
    assert tuple(f.name for f in fields(Phases)) == PHASES and DOMAINS == ("dp", "tp", "pp", "ep", "cp")
