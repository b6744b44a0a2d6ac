"""The chaos case's hostile inputs cover every kind issue 10 names, on every topic, within budget."""

from __future__ import annotations

from collections import Counter

from bench.chaos_inputs import KINDS, MAX_TWO_MB, TWO_MB, stream

TOPICS = ("steps", "jobs", "incidents", "detect_partials", "detect_state")


def test_ten_thousand_messages_cover_every_kind_on_every_topic() -> None:
    items = list(stream(TOPICS, "job", 10_000))
    assert len(items) == 10_000
    seen = Counter((topic, kind) for topic, kind, _, _ in items)
    assert {(t, k) for t in TOPICS for k in KINDS} <= set(seen)
    values = [v for *_, v in items]
    assert any(v is None for v in values)
    big = [v for v in values if v is not None and len(v) > TWO_MB]
    assert 0 < len(big) <= MAX_TWO_MB
    assert any(v is not None and b"\xff" in v for v in values)
    assert any(v is not None and "١".encode() in v for v in values)
    assert any(v is not None and b"9" * 5000 in v for v in values)
    assert any(v is not None and b"[" * 5000 in v for v in values)
