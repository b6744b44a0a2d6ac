"""`steplens alerts forward` refuses to start without an Alertmanager to post to."""

from __future__ import annotations

import pytest

from steplens.cli import EXIT_USAGE, main


def test_forward_without_an_alertmanager_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STEPLENS_ALERTMANAGER_URL", raising=False)
    assert main(["alerts", "forward", "--once"]) == EXIT_USAGE
    assert "--alertmanager URL" in capsys.readouterr().err
