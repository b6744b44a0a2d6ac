"""Who may do what on the broker: the ACL table of the steplens principals, as data.

Why: with Kafka's StandardAuthorizer nothing is allowed unless an ACL says so. The table
below is the single source of those rules (docs/security.md renders it): producers may
only write telemetry and read control; only ``detect`` (and ``parse``) may write incidents
and only ``detect`` control, only ``mitigate`` actions; only the workers and ``reader`` read them. ``admin`` is a
super user and needs no ACL. ``acl_bindings`` is pure; ``streams.topics_admin`` applies
it (as admin) for the topics and consumer groups of a deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas import Topics

Operation = Literal["READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS"]
Resource = Literal["TOPIC", "GROUP"]
Pattern = Literal["LITERAL", "PREFIXED"]


@dataclass(frozen=True, slots=True)
class Binding:
    """ALLOW ``principal`` to do ``operation`` on ``resource`` ``name`` (matched as ``pattern``)."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation


def _topics(principal: str, names: tuple[str, ...], *operations: Operation) -> list[Binding]:
    return [Binding(f"User:{principal}", "TOPIC", n, "LITERAL", op) for n in names for op in operations]


def _own_namespace(principal: str, app_id: str) -> list[Binding]:
    """Consumer groups ``<app_id>-<principal>*`` and Faust's internal topics under that app id."""
    prefix = f"{app_id}-{principal}"
    user = f"User:{principal}"
    bindings = [Binding(user, "GROUP", prefix, "PREFIXED", "READ")]
    ops: tuple[Operation, ...] = ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
    bindings += [Binding(user, "TOPIC", prefix, "PREFIXED", op) for op in ops]
    return bindings


def acl_bindings(topics: Topics, app_id: str) -> list[Binding]:
    """Every ALLOW rule steplens needs for ``topics`` and the consumer groups of ``app_id``."""
    telemetry = topics.inputs()  # steps, kernels, kernel-summaries, device, profiles, jobs
    internal = (topics.detect_partials, topics.detect_state)
    b: list[Binding] = []
    # producer: rank hooks, samplers, simulator
    b += _topics("producer", telemetry, "WRITE", "DESCRIBE")
    b += _topics("producer", (topics.control,), "READ", "DESCRIBE")
    b.append(Binding("User:producer", "GROUP", f"{app_id}-producer", "PREFIXED", "READ"))
    # detect: windows and analyses -> incidents and control
    b += _topics("detect", (*telemetry, *internal), "READ", "DESCRIBE")
    # detect reads back its own outputs after a crash: each is sent once (streams/detect/state/outbox.py)
    b += _topics("detect", (topics.incidents, topics.control), "READ")
    b += _topics("detect", (topics.incidents, topics.control, topics.deadletter, *internal), "WRITE", "DESCRIBE")
    b += _own_namespace("detect", app_id)
    # land: everything to ClickHouse, bad input to the dead-letter topic
    b += _topics("land", (*telemetry, topics.incidents, topics.control, topics.actions), "READ", "DESCRIBE")
    b += _topics("land", (topics.deadletter,), "WRITE", "DESCRIBE")
    b += _own_namespace("land", app_id)
    # parse: profiler dumps -> findings
    b += _topics("parse", (topics.profiles, topics.control), "READ", "DESCRIBE")  # control: command -> incident
    b += _topics("parse", (topics.incidents, topics.deadletter), "WRITE", "DESCRIBE")
    b += _own_namespace("parse", app_id)
    # mitigate: culprit incidents and job launches -> decisions and actions; reads its own back after a crash
    b += _topics("mitigate", (topics.incidents, topics.jobs, topics.actions), "READ", "DESCRIBE")
    b += _topics("mitigate", (topics.actions,), "WRITE")
    b += _own_namespace("mitigate", app_id)
    # reader: downstream alert consumers, reports
    b += _topics("reader", (topics.incidents, topics.actions), "READ", "DESCRIBE")
    b.append(Binding("User:reader", "GROUP", f"{app_id}-reader", "PREFIXED", "READ"))
    return b


def to_kafka_acls(bindings: list[Binding]) -> list[object]:
    """kafka-python ``ACL`` objects for ``bindings`` (host ``*``, permission ALLOW)."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    return [
        ACL(
            principal=x.principal,
            host="*",
            operation=ACLOperation[x.operation],
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(ResourceType[x.resource], x.name, ACLResourcePatternType[x.pattern]),
        )
        for x in bindings
    ]
