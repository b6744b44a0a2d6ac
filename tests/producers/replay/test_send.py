"""producers/replay/send.py: the trace's pace divided by the speed, every event through the emitter, in order;
and the `steplens replay` command's refusals (no broker needed for those)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from infra.progress import Progress
from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.replay import load_replay, progress_printer, send
from schemas import JobEvent, KernelSummary, StepEvent
from schemas.codec import decode_mapping
from schemas.packing import split_record
from steplens.cli import main
from streams.profiles.samples import real_samples_dir

KINETO = [real_samples_dir() / "kineto-hta" / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
NOW = 1_800_000_000_000_000_000


class FakeClock:
    """Time that moves only when the sender sleeps: the pace is read off the sleeps."""

    def __init__(self) -> None:
        self.t = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def _sent(exporter: InMemoryExporter) -> list[object]:
    out: list[object] = []
    for record in exporter.records:
        items, _ = split_record(record.value)
        out.extend(decode_mapping(i) for i in items)
    return out


@pytest.mark.parametrize("speed", [1.0, 4.0, 0.0])
def test_steps_go_out_when_they_ended_on_the_trace_clock_divided_by_speed(speed: float, tmp_path: Path) -> None:
    replay = load_replay(KINETO, "job-p", NOW, repeats=2)
    exporter = InMemoryExporter()
    emitter = BackgroundEmitter(exporter, spool_dir=None, pack=True)
    clock = FakeClock()
    out = io.StringIO()
    bar = Progress(len(replay.steps), "replay", stream=out, unit="step", step_pct=50, tty=False, clock=lambda: 0.0)
    result = send(replay, emitter, speed=speed, clock=clock, sleep=clock.sleep, progress=progress_printer(bar))
    emitter.close()
    due = [s.end_offset_ns / 1e9 / speed for s in replay.steps] if speed else []
    assert clock.sleeps == pytest.approx([b - a for a, b in zip([0.0, *due], due, strict=False)])
    assert result.dropped == 0 and result.events == len(replay.events())
    sent = _sent(exporter)
    assert sorted(map(repr, sent)) == sorted(map(repr, replay.events()))
    assert isinstance(sent[0], JobEvent) and sent[0].phase == "start"
    assert isinstance(sent[-1], JobEvent) and sent[-1].phase == "end"
    for rank in (0, 1):  # in step order per rank (ranks report in order: what lets a frame settle)
        mine = [e.step for e in sent if isinstance(e, StepEvent) and e.rank == rank]
        assert mine == [551, 552, 553, 554]
    assert sum(isinstance(e, KernelSummary) for e in sent) == 8
    assert out.getvalue().splitlines() == ["replay: 2/4 step (50 %) 0.0s, 9 events sent",
                                           "replay: 4/4 step (100 %) 0.0s, 17 events sent"]


def test_a_terminal_gets_a_bar() -> None:
    out = io.StringIO()
    bar = Progress(2, "replay", stream=out, unit="step", tty=True)
    show = progress_printer(bar)
    show(1, 2, 5)
    show(2, 2, 9)
    bar.close()
    text = out.getvalue()
    assert "\r" in text and "2/2" in text and "9 events sent" in text  # tqdm redraws one line in place


def test_negative_speed_is_refused() -> None:
    replay = load_replay(KINETO, "job-n", NOW)
    emitter = BackgroundEmitter(InMemoryExporter(), spool_dir=None)
    with pytest.raises(ValueError, match="speed"):
        send(replay, emitter, speed=-1.0)
    emitter.close()


def test_cli_refuses_what_it_cannot_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    # two dumps of the same rank (rank 0 of two different jobs) are not one job
    other = real_samples_dir() / "kineto-hta" / "nccl_parser_config_nccl_data.json.gz"
    assert main(["replay", str(KINETO[0]), str(other)]) == 2
    assert "same rank" in capsys.readouterr().err
    assert main(["replay", "--speed", "-1", str(KINETO[0])]) == 2
    assert "--speed must be >= 0" in capsys.readouterr().err
