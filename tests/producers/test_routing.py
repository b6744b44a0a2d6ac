"""producers/routing.py: each event's topic and key, and why one is not sent."""

from __future__ import annotations

from dataclasses import replace

from producers.delivery import ENCODE_ERROR, TOO_LARGE, UNROUTABLE
from producers.exporter import OutRecord
from producers.routing import route, to_record
from schemas import ControlCommand, DeviceSample, JobEvent, KernelBatch, Topics, encode, job_key, rank_key
from tests.producers._factories import START_NS, step_event


def test_routing_topics_and_keys() -> None:
    topics = Topics("p.")
    assert route(step_event(3, rank=5, job="a"), topics) == ("p.steps", rank_key("a", 5))
    kb = KernelBatch(job="a", rank=2, world=4, host="h", device=2, step=0, kernels=[])
    assert route(kb, topics) == ("p.kernels", rank_key("a", 2))
    dev = DeviceSample(host="node-3", device=6, ts_ns=START_NS)
    assert route(dev, topics) == ("p.device", b"node-3/6")
    assert route(dev, topics, pack=True) == ("p.device", b"node-3")  # packed: one record per node and tick
    job = JobEvent(job="a", phase="start", world=4, ts_ns=START_NS)
    assert route(job, topics) == ("p.jobs", job_key("a"))


def test_to_record_encodes_and_routes_or_names_the_drop_reason() -> None:
    topics = Topics("p.")
    ev = step_event(0, rank=1, job="a")
    size = len(encode(ev))
    assert to_record(ev, topics, pack=False, max_event_bytes=size) == OutRecord("p.steps", rank_key("a", 1), encode(ev))
    assert to_record(ev, topics, pack=False, max_event_bytes=size - 1) == TOO_LARGE
    assert to_record(replace(ev, flops=object()), topics, pack=False, max_event_bytes=size) == ENCODE_ERROR  # type: ignore[arg-type]
    control = ControlCommand(command_id="c", job="a", action="profile_on", ranks=[], step_first=0, step_count=1,
                             issued_ns=START_NS)
    assert to_record(control, topics, pack=False, max_event_bytes=1 << 20) == UNROUTABLE
