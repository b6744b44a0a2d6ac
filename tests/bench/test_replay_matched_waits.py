"""bench/replay.py's judging: the per-step wait of a pair whose traces lost different collectives (the live rule's
figure on the collectives both traces hold), and each verdict against the anchor's on the anchor's own question."""

from __future__ import annotations

from typing import Any

from bench.replay import _why_not, history_verdict, judge, keyed, matched_waits
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


def _row(anchor_kind: str, anchor: int | None, alerts: int | None, offline: int | None,
         named: int | None = None) -> dict[str, Any]:
    """`offline`: the rank of its warnings; `named`: of any slow_rank finding (an info one too)."""
    tool = "HolisticTraceAnalysis 0.5.0" if anchor_kind == "hta" else "msprof-analyze 26.2.0"
    return {"name": "t", "anchor_kind": anchor_kind, "format": "kineto", "trace_ranks": [0, 1],
            "reference": {"tool": tool, "verdict": anchor},
            "offline": {"verdict": offline, "named": offline if named is None else named},
            "live": {"verdict": alerts}}


def _history(*busy: float) -> list[dict[str, Any]]:
    return [{"rank": r, "busy_ms": b} for r, b in sorted(enumerate(busy), key=lambda x: -x[1])]


def test_the_slowest_rank_of_the_history_is_its_first_only_when_busier_than_the_next() -> None:
    assert history_verdict(_history(497.0, 506.0)) == 1
    assert history_verdict(_history(500.0, 500.0)) is None  # a tie names nobody
    assert history_verdict(_history(500.0)) is None


def test_hta_is_answered_by_the_history_when_no_incident_names_a_rank() -> None:
    # HTA names the later starter whatever it costs: the live answer is the landed history's slowest rank,
    # while the incidents (5 % bar) stay none and are reported as not agreeing
    row = _row("hta", 1, None, 1)
    verdict = judge(row, _history(497.0, 506.0), 2, [])
    assert (verdict["live"], verdict["offline"], verdict["both"], verdict["live_answer"]) == (True, True, True, 1)
    assert verdict["live_alerts"] is False and "5 %" in verdict["why_alerts_differ"]
    assert judge(row, _history(506.0, 497.0), 2, [])["live"] is False  # the history naming rank 0 disagrees
    row = _row("hta", 1, 0, 1)  # an incident's rank answers before the history
    assert judge(row, _history(497.0, 506.0), 2, [])["live_answer"] == 0


def test_hta_is_answered_offline_by_a_late_arriver_under_the_slow_rank_bar() -> None:
    # steplens analyse names rank 1 as a late arriver (info: its peer waits 2.6 % of a step), no slow rank
    verdict = judge(_row("hta", 1, None, None, named=1), _history(497.0, 506.0), 2, [])
    assert (verdict["offline"], verdict["offline_answer"], verdict["offline_warnings"]) == (True, 1, False)
    # for msprof-analyze the same info finding is no answer: it asks for a slow rank
    verdict = judge(_row("msprof", None, None, None, named=1), _history(497.0, 506.0), 2, [])
    assert (verdict["offline"], verdict["offline_answer"]) == (True, None)


def test_msprof_is_answered_by_the_incidents_alone() -> None:
    # msprof-analyze's advisor can answer none (no dimension over 5 %): the history's slowest rank is no answer
    verdict = judge(_row("msprof", None, None, None), _history(497.0, 506.0), 2, [])
    assert (verdict["live"], verdict["live_answer"], verdict["both"]) == (True, None, True)
    verdict = judge(_row("msprof", 1, None, 1), _history(497.0, 506.0), 2, [])
    assert (verdict["live"], verdict["live_answer"], verdict["both"]) == (False, None, False)


def test_a_trace_entry_carries_the_result_files_keys() -> None:
    row = _row("hta", 1, None, 1)
    row["agreement"] = judge(row, _history(497.0, 506.0), 2, [])
    entry = keyed(row)
    assert {k: entry[k] for k in ("ranks", "format", "live_verdict", "offline_verdict", "anchor", "anchor_verdict",
                                  "agreement")} == {
        "ranks": 2, "format": "kineto", "live_verdict": 1, "offline_verdict": 1,
        "anchor": "HolisticTraceAnalysis 0.5.0", "anchor_verdict": 1, "agreement": True}
    assert entry["live_alerts_verdict"] is None and "name" not in entry
