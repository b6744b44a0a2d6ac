"""infra.progress: plain lines every N % off a terminal, a tqdm bar on one."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable

from infra.progress import Progress, track


def _clock() -> Callable[[], float]:
    ticks = itertools.count()
    return lambda: float(next(ticks))  # one second per reading: elapsed times are deterministic


def test_off_a_terminal_it_prints_one_plain_line_every_step_pct() -> None:
    out = io.StringIO()  # not a TTY
    with Progress(200, "replay", stream=out, unit="parts", step_pct=25.0, clock=_clock()) as bar:
        assert not bar.tty
        for i in range(200):
            bar.update(1, item=f"part {i}")
    lines = out.getvalue().splitlines()
    assert lines == [
        "replay: 50/200 parts (25 %) 1.0s, part 49",
        "replay: 100/200 parts (50 %) 2.0s, part 99",
        "replay: 150/200 parts (75 %) 3.0s, part 149",
        "replay: 200/200 parts (100 %) 4.0s, part 199",
    ]
    assert "\r" not in out.getvalue()


def test_big_updates_print_once_and_step_zero_prints_every_update() -> None:
    out = io.StringIO()
    bar = Progress(10, "load", stream=out, step_pct=10.0)
    bar.update(7)
    bar.update(3)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["load: 7/10 it", "load: 10/10 it"]
    every = io.StringIO()
    with Progress(3, "report", stream=every, unit="queries", step_pct=0.0) as bar:
        for name in ("a", "b", "c"):
            bar.update(1, item=name)
    assert [line.rsplit(", ", 1)[1] for line in every.getvalue().splitlines()] == ["a", "b", "c"]


def test_updates_past_the_total_print_the_end_once() -> None:
    out = io.StringIO()
    with Progress(4, "send", stream=out, unit="steps", step_pct=50.0) as bar:
        for _ in range(7):  # a producer that runs a few rounds past its estimate
            bar.update(1)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["send: 2/4 steps", "send: 4/4 steps"]


def test_track_yields_every_item_and_reports_the_end() -> None:
    out = io.StringIO()
    assert list(track(range(5), 5, "bench", stream=out, step_pct=50.0)) == [0, 1, 2, 3, 4]
    assert out.getvalue().splitlines()[-1].startswith("bench: 5/5 it (100 %)")


def test_on_a_terminal_it_draws_a_bar_not_lines() -> None:
    out = io.StringIO()
    with Progress(4, "report", stream=out, unit="queries", tty=True) as bar:
        for name in ("a", "b", "c", "d"):
            bar.note(name)
            bar.update(1, item=name)
    text = out.getvalue()
    assert "\r" in text and "4/4" in text and "report" in text  # tqdm redraws one line in place
    assert "report: 4/4 queries (100 %)" not in text
