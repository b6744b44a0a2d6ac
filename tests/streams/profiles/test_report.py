"""The per-rank table and R_wait per collective, in the text report and the HTML page."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from streams.profiles.analysis.diagnose import diagnose
from streams.profiles.analysis.waits import collective_waits
from streams.profiles.cli import main
from streams.profiles.model import COMMUNICATION, Collective, HostOps, Kernels, Names, Profile, Step
from streams.profiles.report import html_report, text_report
from tests.streams.profiles.conftest import ASCEND


def _rank(rank: int, durations: list[float]) -> Profile:
    """One rank running all-reduces of the given durations (µs), plus a p2p send that must not count."""
    names = Names()
    colls = [Collective("ncclDevKernel_AllReduce", "allreduce", 1000.0 * i, d, 1e6, "pg0", i)
             for i, d in enumerate(durations)]
    colls.append(Collective("ncclDevKernel_Send", "send", 9000.0, 500.0 * (rank + 1), 1e6, "pg1", 0))
    ts = np.array([c.ts for c in colls])
    dur = np.array([c.dur for c in colls])
    kernels = Kernels(ts, dur, np.full(ts.size, COMMUNICATION, np.int8), np.zeros(ts.size, np.int32),
                      np.full(ts.size, names.id("nccl"), np.int32), np.full(ts.size, -1, np.int64))
    return Profile(source=f"rank{rank}.json", format="kineto", rank=rank, names=names, kernels=kernels,
                   runtime=HostOps.empty(), collectives=colls, steps=[Step(1, 0.0, 10_000.0)])


def test_r_wait_per_collective_and_the_rank_table() -> None:
    # all-reduce #0: 400, 100, 400 µs -> rank 1 was waited for, R_wait = 1 - 300/400 = 0.25; #1: level -> 0
    profiles = [_rank(0, [400.0, 200.0]), _rank(1, [100.0, 200.0]), _rank(2, [400.0, 200.0])]
    waits = collective_waits(profiles)
    assert [(w.op, w.index, w.late_rank, w.ranks) for w in waits] == [("allreduce", "#0", 1, 3),
                                                                       ("allreduce", "#1", 0, 3)]
    assert waits[0].r_wait == pytest.approx(0.25) and waits[1].r_wait == 0.0
    diag = diagnose(profiles)
    assert [(r.rank, r.waited_for) for r in diag.rank_table] == [(0, 0), (1, 1), (2, 0)]
    text = text_report(diag)
    assert "R_wait = 1 - T_avg/T_max" in text and "send" not in text.split("== collectives")[1].split("==")[0]
    assert re.search(r"allreduce\s+pg0\s+#0\s+3\s+0\.40\s+0\.30\s+0\.250\s+1", text)
    assert re.search(r"^\s+1\s+rank1\.json\s+-\s+1\s", text, re.MULTILINE)  # the rank table's row for rank 1
    page = html_report(diag)
    assert "<h2>Ranks</h2>" in page and "<h2>Collective waits</h2>" in page
    assert "<td>0.250</td>" in page and "<td>rank1.json</td>" in page


def test_real_ranks_table_and_waits_in_text_and_html(real_samples: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.html"
    assert main(["analyse", str(ASCEND / "rank0_ascend_pt"), str(ASCEND / "rank1_ascend_pt"),
                 "--html", str(report)]) == 0
    out = capsys.readouterr().out
    ranks = out.split("== ranks")[1].split("== collectives")[0]
    # the per-rank means are the step breakdowns' (step 50: 136.58 and 131.91 ms, torch_npu's Stage column)
    assert re.search(r"^\s+0\s+rank0_ascend_pt\s+-\s+1\s+136\.58\s+8\.87\s", ranks, re.MULTILINE)
    assert re.search(r"^\s+1\s+rank1_ascend_pt\s+-\s+1\s+131\.91\s+8\.88\s", ranks, re.MULTILINE)
    # the first all-reduce: rank 0 in it 79.09 ms, rank 1 (late by 5.6 ms) 73.48 ms -> R_wait 0.035
    assert re.search(r"allreduce\s+\d+\s+#0\s+2\s+79\.09\s+76\.28\s+0\.035\s+1", out)
    page = report.read_text()
    assert "<h2>Ranks</h2>" in page and "<td>0.035</td>" in page
