"""Each feed's `Params` is a slice of `DetectionConfig` (the same settings, names and types, filled from it),
and the device feed's per-metric settings go to the metrics their names say."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from streams.detect.config import DetectionConfig
from streams.detect.signals.device import R2_DEVICE, DeviceParams
from streams.detect.signals.kernels import KernelParams
from streams.detect.signals.shared import FindingParams
from streams.detect.signals.steps import StepParams

FEED_PARAMS = [DeviceParams, StepParams, KernelParams, FindingParams]
SETTINGS = {f.name: f for f in fields(DetectionConfig)}


@pytest.mark.parametrize("cls", FEED_PARAMS, ids=lambda c: c.__name__)
def test_every_field_is_a_setting_of_that_name_and_type(cls: type) -> None:
    for f in fields(cls):
        assert f.name in SETTINGS, f"{cls.__name__}.{f.name} is no DetectionConfig setting"
        assert f.type == SETTINGS[f.name].type, f.name


@pytest.mark.parametrize("cls", FEED_PARAMS, ids=lambda c: c.__name__)
def test_params_carry_the_configured_values(cls: type) -> None:
    changed = {f.name: _other(getattr(DetectionConfig(), f.name), i) for i, f in enumerate(fields(cls))}
    params = replace(DetectionConfig(), **changed).params(cls)
    assert {f.name: getattr(params, f.name) for f in fields(cls)} == changed


def test_device_settings_go_to_the_metric_their_name_says() -> None:
    """R1's bound `r1_<metric bound>` and R2's `r2_warmup_<metric>` (else `r2_warmup`) and `r2_sigma_min_<metric>`:
    every setting set apart, each metric gets its own."""
    names = [f.name for f in fields(DeviceParams)]
    cfg = replace(DetectionConfig(), **{n: _other(getattr(DetectionConfig(), n), i) for i, n in enumerate(names)})
    params = cfg.params(DeviceParams)
    bounds = {metric: (bound, lower, gate) for metric, bound, lower, gate in params.r1_bounds()}
    assert bounds == {"temp_c": (cfg.r1_temp_max_c, False, None), "mem_pct": (cfg.r1_mem_max_pct, False, None),
                      "power_w": (cfg.r1_power_max_w, False, None), "aicore_pct": (cfg.r1_aicore_min_pct, True, "job"),
                      "membw_pct": (cfg.r1_membw_min_pct, True, "device")}
    r2 = params.r2_params()
    assert set(r2) == set(R2_DEVICE)
    for metric, p in r2.items():
        assert p.warmup == getattr(cfg, f"r2_warmup_{metric}", cfg.r2_warmup), metric
        assert p.sigma_min == getattr(cfg, f"r2_sigma_min_{metric}"), metric
        assert (p.k, p.h, p.history) == (cfg.r2_k, cfg.r2_h, cfg.r2_history)


def _other(value: float, i: int) -> float:
    """A value no default has, of the same type, different for each setting (`i`)."""
    return value + 7 + i if isinstance(value, int) else value * 1.5 + 0.25 + i
