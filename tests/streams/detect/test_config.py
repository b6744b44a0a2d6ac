"""The detect stage's thresholds (streams/detect/config.py), loaded from the one settings table: the
[detection] TOML table and STEPLENS_DETECTION_<NAME> variables, read by the detect stage over its defaults."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from infra.settings import Settings, load_settings
from streams.detect.config import DetectionConfig


def test_the_table_and_the_variables_reach_the_detect_stage_each_read_as_its_default_s_type(tmp_path: Path) -> None:
    toml = tmp_path / "steplens.toml"
    toml.write_text('[detection]\nslow_step_ratio = 1.25\nwarmup_steps = 7\n')
    settings = load_settings({"STEPLENS_CONFIG": str(toml), "STEPLENS_DETECTION_WARMUP_STEPS": "9",
                              "STEPLENS_DETECTION_RELAY_WHATEVER": ""})  # an empty variable sets nothing
    cfg = DetectionConfig.of(settings)
    assert cfg.slow_step_ratio == 1.25 and cfg.warmup_steps == 9 and type(cfg.warmup_steps) is int
    assert DetectionConfig.of(load_settings({})) == DetectionConfig()


def test_an_unknown_or_unreadable_threshold_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown setting detection\.slow_stp_ratio"):
        DetectionConfig.of(load_settings({"STEPLENS_DETECTION_SLOW_STP_RATIO": "1.2"}))
    with pytest.raises(ValueError, match=r"setting detection\.warmup_steps: cannot read 'five'"):
        DetectionConfig.of(load_settings({"STEPLENS_DETECTION_WARMUP_STEPS": "five"}))
    toml = tmp_path / "steplens.toml"
    toml.write_text('detection = 3\n')
    with pytest.raises(ValueError, match="setting detection must be a table"):
        load_settings({"STEPLENS_CONFIG": str(toml)})


def test_the_thresholds_live_in_the_detect_stage_not_in_the_runtime_settings() -> None:
    """infra/settings.py holds the table as given; no threshold is a field of the runtime's settings."""
    import infra.settings

    assert not hasattr(infra.settings, "DetectionConfig")
    assert {f.name for f in fields(Settings)}.isdisjoint({f.name for f in fields(DetectionConfig)})
