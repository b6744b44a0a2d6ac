"""Group consumers whose rebalances always finish: a guard around kafka-python 3.0's coordinator.

Why this exists. kafka-python 3.0.12 runs JoinGroup + SyncGroup as a task on its IO thread,
and `poll(timeout_ms)` waits for that task only while `need_rejoin()` is true. When the
group leader rejoins because the topics' metadata changed (partitions added, a topic that
reached the metadata late), `need_rejoin()` is true only through the metadata snapshot, and
the leader's own assignment step copies that snapshot: from then on `need_rejoin()` is
false while the SyncGroup is still in flight. If the poll's timer ran out before the task
finished (a 200 ms decode poll against a JoinGroup that waits ~1.5 s for the other
members, or a busy GIL), no later poll ever awaits the task again:

- the member stays REBALANCING for good, with heartbeats off, so the broker drops it and
  gives its partitions to another member, while it keeps fetching them (twice-processed input);
- every commit fails ("RebalanceInProgressError" / "not part of an active group");
- `time_to_next_heartbeat()` is 0, so `poll()` never sleeps: ~80 % of a core with no input.

Seen in 3 of ~17 detect-worker start-ups (issue #20) and reproduced by
tests/infra/test_consumer_group.py. The Java client fixed the same hole in KAFKA-9815 by
setting `rejoinNeeded` when the metadata snapshot differs; `rejoin_guard` does that, and
`heal` turns any other REBALANCING-with-nothing-pending state (and a commit refused because
of a rebalance) into a real rejoin that the next `poll()` completes. Both touch the
coordinator's private attributes of the pinned kafka-python (`_coordinator`,
`_assignment_snapshot`, `_metadata_snapshot`, `_join_task`); `check_supported` fails loudly
at start-up if a new version renamed them, instead of silently losing the guard.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import CommitFailedError, RebalanceInProgressError

from infra.clients import BOOTSTRAP_DEADLINE_S, bootstrapped

log = logging.getLogger(__name__)

REBALANCE_ERRORS = (CommitFailedError, RebalanceInProgressError)
_COORDINATOR_ATTRIBUTES = ("_assignment_snapshot", "_metadata_snapshot", "_join_task", "need_rejoin",
                           "request_rejoin", "rebalance_in_progress")


def check_supported(consumer: Any) -> Any:
    """The consumer's group coordinator, once it is known to have every attribute the guard uses."""
    coordinator = getattr(consumer, "_coordinator", None)
    missing = [name for name in _COORDINATOR_ATTRIBUTES if not hasattr(coordinator, name)]
    if coordinator is None or missing:
        raise RuntimeError(f"kafka-python's group coordinator lacks {missing or ['_coordinator']}: "
                           "infra/consumer_group.py must be updated for this kafka-python version")
    return coordinator


def rejoin_guard(consumer: Any) -> Any:
    """Make a metadata-triggered rejoin stick until it completes (KAFKA-9815), on this consumer only."""
    coordinator = check_supported(consumer)
    need_rejoin = coordinator.need_rejoin

    def guarded() -> bool:
        snapshot = coordinator._assignment_snapshot
        if snapshot is not None and snapshot != coordinator._metadata_snapshot and not coordinator.rejoin_needed:
            log.info("group %s: topic metadata changed since the last assignment: rejoining", coordinator.group_id)
            coordinator.request_rejoin()
        return bool(need_rejoin())

    coordinator.need_rejoin = guarded
    return consumer


def heal(consumer: Any) -> bool:
    """True (and a rejoin requested) when the member says REBALANCING but no join is pending
    or wanted: nothing would ever finish that rebalance, so the next poll starts one. A consumer
    without a group coordinator (manually assigned, a unit test's stand-in) has nothing to heal."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not coordinator.rebalance_in_progress() or coordinator.need_rejoin():
        return False
    task = coordinator._join_task
    if task is not None and not task.is_done:
        return False
    log.warning("group %s: member stuck rebalancing with no join pending: rejoining", coordinator.group_id)
    coordinator.request_rejoin()
    return True


def after_failed_commit(consumer: Any, exc: BaseException) -> None:
    """A commit refused because of a rebalance leads to a rejoin, never to a loop of refusals."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None and isinstance(exc, REBALANCE_ERRORS):
        coordinator.request_rejoin()


def group_consumer(*topics: str, bootstrap_deadline_s: float = BOOTSTRAP_DEADLINE_S, listener: Any = None,
                   **config: Any) -> Any:
    """A kafka-python KafkaConsumer in a consumer group, with the rejoin guard installed, subscribed to
    `topics` (if any) with the rebalance `listener` (if any); made through `infra.clients.bootstrapped` (a
    hung broker holds one bootstrap try for twice the request timeout, not 30 s: the workers make these at
    start and after a crash, when a broker may be the reason)."""
    if not config.get("group_id"):
        raise ValueError("group_consumer needs a group_id")

    consumer = rejoin_guard(bootstrapped(KafkaConsumer, config, bootstrap_deadline_s))
    if topics:
        consumer.subscribe(list(topics), listener=listener)
    return consumer
