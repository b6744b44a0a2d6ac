"""bench/replay.py's per-step wait of a pair whose traces lost different collectives: what `replay.json` gives as
the live rule's figure on the collectives both traces hold."""

from __future__ import annotations

from bench.replay import _why_not, matched_waits
from streams.profiles.model import Collective, Profile, Step


def _rank(rank: int, spans: list[tuple[float, float]]) -> Profile:
    colls = [Collective("ncclKernel_SendRecv", "sendrecv", end - dur, dur, 1e6, "pg0", i)
             for i, (end, dur) in enumerate(spans)]
    return Profile(source=f"r{rank}", format="kineto", rank=rank, collectives=colls,
                   steps=[Step(7, 0.0, 100_000.0), Step(8, 100_000.0, 100_000.0)])


def test_each_step_names_the_later_starter_of_the_collectives_both_traces_hold() -> None:
    # step 7: two all-to-alls, rank 1 starts 1 ms and 3 ms late; rank 0's trace lost a third one.
    # step 8: rank 0 starts 2 ms late at one; rank 1's trace lost another
    r0 = _rank(0, [(20_000.0, 9_000.0), (40_000.0, 9_000.0), (150_000.0, 4_000.0)])
    r1 = _rank(1, [(20_000.0, 8_000.0), (40_000.0, 6_000.0), (60_000.0, 5_000.0), (150_000.0, 6_000.0),
                   (170_000.0, 5_000.0)])
    waits = matched_waits([r0, r1])
    assert waits == {"collectives": 3, "unmatched": 2,
                     "steps": [{"step": 7, "late": 1, "peer_wait_share": 0.04},
                               {"step": 8, "late": 0, "peer_wait_share": 0.02}]}
    why = _why_not(2, None, 1, [], waits)
    assert why is not None and "step 7: rank 1 late, its peer waits 4.0 %; step 8: rank 0 late" in why


def test_complete_traces_have_no_matched_figure() -> None:
    r0 = _rank(0, [(20_000.0, 9_000.0)])
    r1 = _rank(1, [(20_000.0, 8_000.0)])
    assert matched_waits([r0, r1]) is None
