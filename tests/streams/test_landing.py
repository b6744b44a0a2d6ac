import base64

from schemas import Topics, encode
from streams.landing import Landed, LandingProcessor
from tests.streams.helpers import step_event

TOPICS = Topics("p.")


def test_good_step_becomes_a_steps_row() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    processor.process(TOPICS.steps, 0, 7, b"job-a/1", encode(step_event(1, 3, 400.0)), 123, out)
    assert out.dead == [] and [r.table for r in out.rows] == ["steps"]


def test_bad_events_become_dead_letters_with_reason_and_exact_bytes() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=2_000)
    out = Landed()
    bad = {
        b"not json": "is not valid JSON",
        encode(step_event(1, 3, 400.0)).replace(b'"rank":1', b'"rank":99'): "must be in [0, world=8)",
        b'{"type":"step","v":"9.0"}': "unsupported major version 9",
        b"{" + b" " * 3000 + b"}": "larger than the 2000-byte limit",
        encode(step_event(1, 3, 400.0)).replace(b'"step":3', b'"step":-3'): "must be >= 0",
    }
    for offset, raw in enumerate(bad):
        processor.process(TOPICS.steps, 1, offset, b"k", raw, 5, out)
    assert len(out.dead) == len(bad)
    for letter, (raw, reason) in zip(out.dead, bad.items(), strict=True):
        assert reason in letter.problem
        assert letter.raw == raw
        headers = dict(letter.headers())
        assert headers["steplens-source-topic"] == TOPICS.steps.encode()
    rows = [r for r in out.rows if r.table == "dead_letters"]
    assert len(rows) == len(bad)
    payloads = {base64.b64decode(r.row[r.columns.index("payload_b64")]) for r in rows}
    assert payloads == set(bad)
    assert processor.counts == {"dead": len(bad)}


def test_wrong_event_type_for_topic_is_a_dead_letter() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    processor.process(TOPICS.jobs, 0, 0, None, encode(step_event(1, 3, 400.0)), 5, out)
    assert out.dead and "carries 'job' events" in out.dead[0].problem
