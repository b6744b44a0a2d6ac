"""producers/hook/aggregate.py: one step's raw kernel and collective records into its kernel summary."""

from __future__ import annotations

from producers.hook.aggregate import COLL, KERNEL, OTHER, KernelAggregator, add_raw, kernel_summary
from producers.hook.identity import RankInfo

RANK = RankInfo(job="job-u", rank=1, world=4, host="node-0", device=1, attempt=2)


def test_raw_records_aggregate_per_key_with_the_cold_launch_excluded() -> None:
    agg = KernelAggregator()
    add_raw(agg, [
        (COLL, "allreduce", 1_000, 4096, "dp", 4, 5.0),
        (COLL, "allreduce", 3_000, 4096, "dp", 4, 7.0),
        (KERNEL, "F2:8x8x8", "compute", 500, "F2", {"m": 8}, 1024.0, None, None, None, True),
        (OTHER, 200),
    ])
    snap = agg.take()
    assert snap is not None
    ev = kernel_summary(RANK, 9, snap)
    assert (ev.step, ev.attempt, ev.other_count, ev.other_ns) == (9, 2, 1, 200)
    by_key = {e.key: e for e in ev.entries}
    coll = by_key["allreduce/dp"]
    assert (coll.count, coll.total_ns, coll.max_ns, coll.bytes, coll.launch_mean_us) == (2, 4_000, 3_000, 8192, 7.0)
    assert by_key["F2:8x8x8"].flops == 1024.0


def test_add_raw_starts_the_aggregator_afresh() -> None:
    agg = KernelAggregator()
    add_raw(agg, [(OTHER, 5)])
    add_raw(agg, [])  # the next step, nothing recorded: nothing left over from the last one
    assert agg.take() is None
