"""One advice table (streams/advice.py): every cause and suggestion detection gives comes from it."""

from __future__ import annotations

import ast
from pathlib import Path

from streams.advice import RULES, UNKNOWN, advise_rule
from tests.python_source import parse

DETECT = Path(__file__).resolve().parents[3] / "streams" / "detect"


def test_every_rule_only_finding_has_advice() -> None:
    spec = [r for r in RULES if r[1:].isdigit()]
    assert sorted(spec, key=lambda r: int(r[1:])) == [f"R{i}" for i in range(1, 11)]
    assert set(RULES) - set(spec) == {"OOM"}  # the OOM forecast (issue #44), a device-feed rule of its own
    assert advise_rule("R5") is RULES["R5"]
    assert advise_rule("R99") is UNKNOWN


def test_no_detection_module_writes_its_own_advice_text() -> None:
    """A `cause=` or `suggestion=` given a string literal (or an f-string) outside the table is advice in a
    second place: a newcomer changing one would miss the other."""
    offenders = []
    for path in sorted(DETECT.rglob("*.py")):
        if path.name == "advice.py":
            continue
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg in ("cause", "suggestion") and isinstance(
                    node.value, (ast.Constant, ast.JoinedStr)):
                if isinstance(node.value, ast.Constant) and not isinstance(node.value.value, str):
                    continue
                offenders.append(f"{path.relative_to(DETECT)}:{node.lineno}")
    assert offenders == []
