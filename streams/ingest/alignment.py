"""Read the input topics in step with each other while the decode stage is behind.

Steps, kernel summaries and device samples of one step travel on different topics and are
fetched by bytes per partition. In a backlog (a restart, an outage, a burst) the small step
records run far ahead of the large kernel-summary records: with packed records a whole job's
steps can be decoded before its first summary. Its frames then close "complete" on steps alone
and R4–R9 and the link scopes never see that job's kernels.

So, like Kafka Streams' timestamp-synchronised tasks, the decode stage pauses a partition whose
newest consumed record is more than `window_ms` (record time) ahead of the least advanced
partition that still has records waiting, and resumes it once that one caught up. Partitions
with nothing waiting never hold others back; the least advanced one is never paused, so the
stage always makes progress. Pure: the loop feeds it positions and applies its plan.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


@dataclass
class TopicAlignment:
    window_ms: int
    newest_ms: dict[Hashable, int] = field(default_factory=dict)  # newest record time consumed per partition
    paused: set[Hashable] = field(default_factory=set)

    def consumed(self, partition: Hashable, newest_ms: int) -> None:
        if newest_ms > self.newest_ms.get(partition, -1):
            self.newest_ms[partition] = newest_ms

    def plan(self, waiting: Mapping[Hashable, int]) -> tuple[set[Hashable], set[Hashable]]:
        """(to pause, to resume) given the records still waiting per assigned partition.

        A partition with records waiting but none consumed yet counts as the least advanced
        (time 0): everything ahead waits until it has been read once.
        """
        for gone in set(self.newest_ms) - set(waiting):
            del self.newest_ms[gone]
        self.paused &= set(waiting)
        behind = [self.newest_ms.get(tp, 0) for tp, n in waiting.items() if n > 0]
        if not behind or self.window_ms <= 0:
            resume, self.paused = set(self.paused), set()
            return set(), resume
        frontier = min(behind)
        ahead = {tp for tp in waiting if self.newest_ms.get(tp, 0) > frontier + self.window_ms}
        pause, resume = ahead - self.paused, self.paused - ahead
        self.paused = ahead
        return pause, resume
