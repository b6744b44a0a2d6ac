"""Hostile inputs for `make chaos`: the malformed messages a real fleet (or an attacker) produces.

Pure: (kind, key, value) triples, no I/O. Every kind named in issue 10 is here: null value
(tombstone), non-ASCII digits in `v`, huge digit strings, out-of-range numbers, deep nesting,
2 MB messages, non-UTF-8, plus junk, wrong types and a wrong event type per topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

TWO_MB = 2 * 1024 * 1024
MAX_TWO_MB = 10  # 2 MB messages are few (20 MB in all): enough to hit every size check, cheap to send


def _base(topic_kind: str, job: str, i: int) -> dict[str, object]:
    if topic_kind == "jobs":
        return {"type": "job", "v": "1.0", "job": job, "phase": "start", "world": 4, "ts_ns": 1 + i}
    if topic_kind == "incidents":
        return {"type": "incident", "v": "1.0", "incident_id": f"x{i}", "job": job, "rule": "SLOW_RANK",
                "state": "open", "severity": "warning", "scope": "rank", "summary": "s", "detected_ns": 1 + i}
    if topic_kind == "detect_partials":
        return {"job": job, "domain": "dp", "group": 0, "step": i, "rank": 0}
    if topic_kind == "detect_state":
        return {"kind": "group_step", "job": job, "domain": "dp", "group": 0, "step": i}
    return {"type": "step", "v": "1.0", "job": job, "rank": 0, "world": 4, "host": "node-0", "device": 0,
            "step": i, "start_ns": 1, "end_ns": 2}


def _with_raw_field(base: dict[str, object], name: str, raw: bytes) -> bytes:
    """The JSON of `base` plus a field whose value is `raw` verbatim (orjson cannot write these)."""
    body = orjson.dumps(base)
    return body[:-1] + b',"' + name.encode() + b'":' + raw + b"}"


KINDS = (
    "null_value", "v_superscript", "v_arabic_digits", "v_huge_digits", "step_huge_digits", "end_ns_2_64",
    "negative_rank", "float_overflow", "deep_nesting", "two_mb", "non_utf8", "junk", "empty", "json_array",
    "wrong_type", "other_event_type",
)


def malformed(topic_kind: str, job: str, i: int, two_mb_sent: int) -> tuple[str, bytes | None, bytes | None]:
    """The i-th malformed message for a topic of `topic_kind` (a `schemas.Topics` attribute name)."""
    kind = KINDS[i % len(KINDS)]
    if kind == "two_mb" and two_mb_sent >= MAX_TWO_MB:
        kind = "junk"
    base = _base(topic_kind, job, i)
    key = job.encode()
    value: bytes | None
    if kind == "null_value":
        value = None
    elif kind == "v_superscript":
        value = orjson.dumps({**base, "v": "1.²"})
    elif kind == "v_arabic_digits":
        value = orjson.dumps({**base, "v": "١.٠"})
    elif kind == "v_huge_digits":
        value = orjson.dumps({**base, "v": "1." + "9" * 5000})
    elif kind == "step_huge_digits":
        value = _with_raw_field({k: v for k, v in base.items() if k != "step"}, "step", b"9" * 5000)
    elif kind == "end_ns_2_64":
        value = orjson.dumps({**base, "end_ns": 2**64 - 1, "ts_ns": 2**64 - 1, "detected_ns": 2**64 - 1})
    elif kind == "negative_rank":
        value = orjson.dumps({**base, "rank": -1, "world": -4, "group": -1})
    elif kind == "float_overflow":
        value = _with_raw_field(base, "duration_ms", b"1e400")
    elif kind == "deep_nesting":
        value = _with_raw_field(base, "nested", b"[" * 5000 + b"]" * 5000)
    elif kind == "two_mb":
        value = orjson.dumps({**base, "host": "h" * TWO_MB})
    elif kind == "non_utf8":
        value = orjson.dumps(base)[:-1] + b',"host":"\xff\xfe\xfa"}'
    elif kind == "junk":
        value = b"\x00\x01 not json \xc3\x28"
    elif kind == "empty":
        value = b""
    elif kind == "json_array":
        value = b"[1, 2, 3]"
    elif kind == "wrong_type":
        value = orjson.dumps({**base, "rank": "zero", "step": "one", "world": None, "job": 7})
    else:  # another event type on this topic
        value = orjson.dumps({"type": "control", "v": "1.0", "command_id": "c", "job": job, "action": "profile_on",
                              "ranks": [0], "step_first": 0, "step_count": 1, "issued_ns": 1})
    return kind, key, value


def stream(topic_kinds: tuple[str, ...], job: str, count: int) -> Iterator[tuple[str, str, bytes | None, bytes | None]]:
    """`count` malformed messages spread round-robin over the topic kinds: (topic_kind, kind, key, value)."""
    two_mb = 0
    for i in range(count):
        topic_kind = topic_kinds[i % len(topic_kinds)]
        kind, key, value = malformed(topic_kind, job, i // len(topic_kinds), two_mb)
        two_mb += kind == "two_mb"
        yield topic_kind, kind, key, value
