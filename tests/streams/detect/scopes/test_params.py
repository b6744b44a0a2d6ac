"""Each scope's `Params` is a slice of `DetectionConfig`: the same settings, names and types, filled from it."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from streams.detect.config import DetectionConfig
from streams.detect.scopes import group_split, hung, pp_stage, slow_link, slow_pair, slow_rank, slow_step, stall

SCOPE_PARAMS = [m.Params for m in (slow_step, slow_rank, slow_pair, pp_stage, group_split, slow_link, hung, stall)]
SETTINGS = {f.name: f for f in fields(DetectionConfig)}


@pytest.mark.parametrize("cls", SCOPE_PARAMS, ids=lambda c: c.__module__.rsplit(".", 1)[-1])
def test_every_field_is_a_setting_of_that_name_and_type(cls: type) -> None:
    for f in fields(cls):
        assert f.name in SETTINGS, f"{cls.__module__}.Params.{f.name} is no DetectionConfig setting"
        assert f.type == SETTINGS[f.name].type, f.name


@pytest.mark.parametrize("cls", SCOPE_PARAMS, ids=lambda c: c.__module__.rsplit(".", 1)[-1])
def test_params_carry_the_configured_values(cls: type) -> None:
    changed = {f.name: _other(getattr(DetectionConfig(), f.name)) for f in fields(cls)}
    params = replace(DetectionConfig(), **changed).params(cls)
    assert {f.name: getattr(params, f.name) for f in fields(cls)} == changed


def _other(value: float) -> float:
    """A value no default has, of the same type."""
    return value + 7 if isinstance(value, int) else value * 1.5 + 0.25
