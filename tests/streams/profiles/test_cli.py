"""`steplens analyse` (streams.profiles.cli.main) on the real samples, mixed formats."""

from __future__ import annotations

import re
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


def test_help_exits_0_on_both_front_ends(capsys: pytest.CaptureFixture[str]) -> None:
    from steplens.cli import main as steplens_main

    assert steplens_main(["analyse", "--help"]) == 0
    assert "--html" in capsys.readouterr().out
    assert main(["analyse", "--help"]) == 0
    assert "--html" in capsys.readouterr().out


def test_options_before_between_and_after_paths(real_samples: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from steplens.cli import main as steplens_main

    rank0, rank1 = (str(KINETO / f"trace_filter_sampled_rank-{r}.json.gz") for r in (0, 1))
    for argv in (["--html", str(tmp_path / "a.html"), rank0, rank1],
                 [rank0, "--html", str(tmp_path / "b.html"), rank1],
                 [rank0, rank1, "--html", str(tmp_path / "c.html")]):
        assert steplens_main(["analyse", *argv]) == 0, argv
        out = capsys.readouterr().out
        assert "rank 0 (kineto" in out and "rank 1 (kineto" in out
    assert {p.name for p in tmp_path.iterdir()} == {"a.html", "b.html", "c.html"}
    assert steplens_main(["analyse", rank0, "--no-such-option"]) == 2
    assert steplens_main(["analyse", "--html", str(tmp_path / "d.html")]) == 2  # no path


def test_a_cluster_step_trace_csv_passed_as_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "run7_step_trace.csv"  # renamed: recognised by its header
    table.write_text((FIXTURES / "msprof_cluster" / "cluster_step_trace_time.csv").read_text())
    assert main(["analyse", str(table), "--html", str(tmp_path / "r.html")]) == 0
    assert "rank 2" in capsys.readouterr().out


def test_a_folder_with_an_unknown_json_is_analysed_with_a_warning(
    real_samples: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "trace.json.gz").symlink_to(KINETO / "trace_filter_sampled_rank-1.json.gz")
    (folder / "hparams.json").write_text('{"lr": 0.001, "batch": 32}')
    (folder / "losses.json").write_text("[2.31, 2.12, 1.98]")
    (folder / "runs.json").write_text('[{"run": 1, "loss": 1.9}]')
    assert main(["analyse", str(folder), "--html", str(tmp_path / "r.html")]) == 0
    captured = capsys.readouterr()
    assert "rank 1 (kineto" in captured.out
    assert len(re.findall(r"^== rank \d+ |^== /", captured.out, re.MULTILINE)) == 1  # one profile, no empty ones
    for name in ("hparams.json", "losses.json", "runs.json"):
        assert f"skipped {folder / name}" in captured.err
    # named on the command line, the same file is an error: the user asked for it
    assert main(["analyse", str(folder / "hparams.json"), "--html", str(tmp_path / "r.html")]) == 2


def _step_table(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
                    "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing\n" + "\n".join(rows) + "\n")
    return path


def test_cluster_table_late_arriver_and_stages_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 8 ranks, one stage, level Computing; rank 5 exposes 4 ms of communication where the others wait ~30 ms, and
    # idles 36 ms: the one they wait for. The old rule read Computing only: "nothing abnormal found".
    rows = [f"7,rank,{r},{100000 + 100 * (r % 3)},{30000 + 100 * r},4000,{34000 + 100 * r},{10000 - 100 * r},0,0,"
            f"{30000 + 100 * r},500" for r in range(8)]
    rows[5] = "7,rank,5,100100,4000,4000,8000,36000,0,0,4000,9000"
    assert main(["analyse", str(_step_table(tmp_path, "one_stage.csv", rows)), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "rank 5 is the one the others wait for" in out and "nothing abnormal found" not in out
    # two stages, stage 1 (ranks 8-15) computes 15 % more by design: the old rule pooled them, "rank 8 computes 1.07x"
    rows = [f"3,rank,{r},{(115000 if r >= 8 else 100000) + 100 * (r % 3)},{30000 + 100 * (r % 8)},4000,"
            f"{34000 + 100 * (r % 8)},10000,0,0,{30000 + 100 * (r % 8)},500" for r in range(16)]
    rows += [f'3,stage,"{tuple(range(8))}",0,0,0,0,0,0,0,0,0', f'3,stage,"{tuple(range(8, 16))}",0,0,0,0,0,0,0,0,0']
    table = _step_table(tmp_path, "two_stages.csv", rows)
    assert main(["analyse", str(table), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "computes" not in out and "nothing abnormal found" in out


def test_formats_are_told_by_content_under_any_name(real_samples: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Renamed dumps: a gzipped Kineto trace without .gz, msprof's communication table and group file
    under a run's name, a folder of renamed step tables (issue #45: each was refused)."""
    trace = tmp_path / "rank1.trace"
    trace.write_bytes((KINETO / "trace_filter_sampled_rank-1.json.gz").read_bytes())
    comm = tmp_path / "run7_comm.json"
    comm.write_bytes((FIXTURES / "msprof_cluster" / "cluster_communication.json").read_bytes())
    groups = tmp_path / "run7_groups.json"
    groups.write_bytes((FIXTURES / "msprof_cluster" / "communication_group.json").read_bytes())
    for path, expect in ((trace, "rank 1 (kineto"), (comm, "== collectives by wait ratio"), (groups, "== diagnosis")):
        assert main(["analyse", str(path), "--html", str(tmp_path / "r.html")]) == 0, path
        assert expect in capsys.readouterr().out
    folder = tmp_path / "tables"
    folder.mkdir()
    step_csv = (FIXTURES / "msprof_cluster" / "cluster_step_trace_time.csv").read_text()
    for name in ("run1.csv", "run2.txt"):
        (folder / name).write_text(step_csv)
    assert main(["analyse", str(folder), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "run1.csv" in out and "run2.txt" in out
    traces = tmp_path / "traces"  # a folder of renamed traces: each was skipped for its name
    traces.mkdir()
    for rank, name in ((0, "rank0.dat"), (1, "rank1")):
        (traces / name).write_bytes((KINETO / f"trace_filter_sampled_rank-{rank}.json.gz").read_bytes())
    (traces / "notes.txt").write_text("not a trace\n")
    assert main(["analyse", str(traces), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "rank 0 (kineto" in out and "rank 1 (kineto" in out


def test_two_tables_stay_apart_and_each_finding_names_its_source(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rows = [f"7,rank,{r},{100000 + 100 * (r % 3)},{30000 + 100 * r},4000,{34000 + 100 * r},{10000 - 100 * r},0,0,"
            f"{30000 + 100 * r},500" for r in range(8)]
    rows[5] = "7,rank,5,100100,4000,4000,8000,36000,0,0,4000,9000"
    slow = _step_table(tmp_path, "job_a.csv", rows)
    healthy = _step_table(tmp_path, "job_b.csv", [r if i != 5 else rows[4].replace(",4,", ",5,", 1)
                                                 for i, r in enumerate(rows)])
    assert main(["analyse", str(slow), str(healthy), "--html", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    verdicts = [line for line in out.splitlines() if "the one the others wait for" in line]
    assert verdicts and all("(job_a.csv)" in line for line in verdicts), verdicts
    table = out.split("== ranks", 1)[1].split("==", 1)[0]
    assert table.count("job_a.csv") == 8 and table.count("job_b.csv") == 8


def test_help_says_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyse", "--help"]) == 0
    usage = " ".join(capsys.readouterr().out.split("\n\n", 1)[0].split())  # wrapped: one line
    assert usage.endswith("[--progress] PATH [PATH ...]"), usage
