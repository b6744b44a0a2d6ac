"""`steplens analyse` (streams.profiles.cli.main) on the real samples, mixed formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.profiles.cli import main
from tests.streams.profiles.conftest import ASCEND, FIXTURES, KINETO


def test_analyse_prints_diagnosis_and_writes_self_contained_html(
    real_samples: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.html"
    code = main(["analyse", str(ASCEND / "rank0_ascend_pt"), str(KINETO / "trace_filter_sampled_rank-1.json.gz"),
                 str(FIXTURES / "msprof_cluster"), "--html", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert "rank 0 (ascend_pt" in out and "rank 1 (kineto" in out
    assert "cause:" in out and "evidence:" in out
    page = report.read_text()
    assert "<svg" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "<script" not in page


def test_unreadable_dump_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    assert main(["analyse", str(bad), "--html", str(tmp_path / "r.html")]) == 2
    assert "truncated" in capsys.readouterr().err
