"""Per-file test timings at the end of every run (issue #47): where `make test`'s minutes go.

pytest's --durations names single tests; a suite that creeps past its budget does so file by
file, so the summary adds each file's setup + call + teardown seconds, slowest first, with the
share of the run they take. Registered by tests/conftest.py.
"""

from __future__ import annotations

from collections import defaultdict

import pytest


class FileTimings:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        if report.when == "call":
            self.tests[path] += 1

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        total = sum(self.seconds.values())
        terminalreporter.section(f"time per test file ({total:.0f} s in tests, slowest 25)")
        for path, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1])[:25]:
            share = 100 * seconds / total
            terminalreporter.write_line(f"{seconds:8.1f} s {share:5.1f} %  {self.tests[path]:4d} tests  {path}")
