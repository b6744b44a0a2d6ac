"""The outbox of one job: its incidents and commands, written into the job's snapshot BEFORE they are sent.

Why: the detect worker has no Kafka transaction around "apply input, send alerts, commit
input". Sending first and snapshotting after means a SIGKILL in between replays the input
into the older state and sends the same `open` again (a second page for one fault).
The order here is snapshot → send → acknowledge input:

1. outputs of applied input go into the job's outbox, each with a per-job sequence number;
2. the snapshot (state, input offsets AND outbox) is written and flushed;
3. the outbox is sent; every record carries the header `steplens-out: <job>#<seq>`;
4. the input is acknowledged, and the job's next snapshot records the outbox empty.

A kill before 2 loses nothing (the input is re-read, the outputs re-derived with the same
sequence numbers). A kill after 2 restores the outbox with the state; the input behind it
is skipped (its offsets are in the snapshot), so nothing is derived twice. What is left
is whether step 3 had happened: the restored worker reads the output topics back from
`scan_from` (positions known before these outputs could have been sent) and drops every
pending output whose header it finds, then sends the rest. So each output reaches its
topic once, whatever the moment of the kill. The cost on the hot path: a snapshot before
each send of outputs (outputs are rare: incident transitions, profile commands).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import ControlCommand, Incident

Output = Incident | ControlCommand
HEADER = "steplens-out"
Position = tuple[str, int]  # (topic, partition)


def output_id(job: str, seq: int) -> bytes:
    return f"{job}#{seq}".encode()


@dataclass(slots=True)
class Outbox:
    """Outputs of one job that are not yet known to be on their topics."""

    job: str
    seq: int = 0  # outputs the job ever produced; the next one gets seq + 1
    pending: list[tuple[int, Output]] = field(default_factory=list)
    scan_from: dict[Position, int] = field(default_factory=dict)  # no pending output lies before these

    def add(self, outputs: list[Output], known: dict[Position, int]) -> None:
        """Queue outputs; `known`: output topic positions no output sent from now on can precede."""
        if not outputs:
            return
        if not self.pending:
            self.scan_from = dict(known)
        for item in outputs:
            self.seq += 1
            self.pending.append((self.seq, item))

    def take(self) -> list[tuple[bytes, Output]]:
        """The pending outputs with their ids, in order; the caller sends them all, then calls `sent`."""
        return [(output_id(self.job, seq), item) for seq, item in self.pending]

    def sent(self) -> None:
        self.pending.clear()
        self.scan_from = {}

    def drop_delivered(self, delivered: set[bytes]) -> int:
        """After a restore: forget the pending outputs found on their topics; how many were."""
        before = len(self.pending)
        self.pending = [(seq, item) for seq, item in self.pending if output_id(self.job, seq) not in delivered]
        return before - len(self.pending)


def scan_start(outboxes: list[Outbox]) -> dict[Position, int]:
    """Where reading back must start to see every pending output of these outboxes."""
    start: dict[Position, int] = {}
    for box in outboxes:
        if not box.pending:
            continue
        for pos, offset in box.scan_from.items():
            start[pos] = min(offset, start.get(pos, offset))
    return start
