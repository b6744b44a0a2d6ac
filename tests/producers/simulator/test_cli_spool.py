"""The simulator CLI spools by default (a broker restart must not cost events), or not with --no-spool."""

from __future__ import annotations

from pathlib import Path

import pytest

from producers.simulator.__main__ import main

ARGS = ["--dry-run", "--steps", "3", "--dp", "2", "--tp", "1", "--pp", "1"]


def test_default_spool_is_private_under_steplens_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    assert main(ARGS) == 0
    spool = tmp_path / "spool" / "simulator"
    assert spool.is_dir() and spool.stat().st_mode & 0o777 == 0o700


def test_no_spool_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    assert main([*ARGS, "--no-spool"]) == 0
    assert not (tmp_path / "spool").exists()
