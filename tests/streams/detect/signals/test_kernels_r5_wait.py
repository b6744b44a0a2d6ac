"""R5/R6 judge transfer time, not waiting (streams/detect/signals/kernels.py, comm_columns.transfer_ns).

A collective kernel spins until the group's last member arrives, so a rank that waited for a
late peer shows a long kernel although its link is fine. Hand-built frames: 16 ranks, TP groups
of 4 consecutive ranks, DP groups of the ranks with the same TP slot (4 groups of 4).
"""

from __future__ import annotations

import numpy as np

from schemas.columns import DOMAINS
from streams.detect.config import DetectionConfig
from streams.detect.scopes.finding import Finding
from streams.detect.signals.kernels import KernelParams, kernel_findings
from streams.detect.signals.shared import SignalState
from streams.detect.windows.comm_columns import CommColumn, transfer_ns
from streams.detect.windows.step_frames import Frame, ReportedLayout
from tests.streams.helpers import hosts_topology, kernel_rows

WORLD, CALLS, MB = 16, 8, 1 << 26
TP_MS, DP_MS = 20.0, 100.0  # one step's transfer time of each collective (all calls)


def _topo() -> ReportedLayout:
    topo = hosts_topology(WORLD, 8)
    ranks = np.arange(WORLD)
    topo.groups[DOMAINS.index("tp")] = ranks // 4
    topo.groups[DOMAINS.index("dp")] = ranks % 4
    return topo


def _frame(step: int, rng: np.random.Generator, *, late: dict[int, float], dp_slow: dict[int, float],
           spread_ms: float = 5.0) -> Frame:
    """One step: each rank arrives at its collectives `spread_ms` x U(0, 1) (healthy start skew) plus
    `late[rank]` ms late; DP group g's transfer is `dp_slow[g]` x nominal, and its members start the next
    layer's TP all-reduce late by that extra transfer. Every kernel = wait for the group's last
    arrival + the transfer (1 % per-rank jitter)."""
    topo_tp, topo_dp = np.arange(WORLD) // 4, np.arange(WORLD) % 4
    arrive = rng.uniform(0.0, spread_ms, WORLD) + np.array([late.get(r, 0.0) for r in range(WORLD)])
    dp_transfer = DP_MS * np.array([dp_slow.get(int(g), 1.0) for g in topo_dp])
    frame = Frame.empty(step, WORLD, 0)
    frame.seen[:] = True
    rows: list[list[list[object]]] = [[] for _ in range(WORLD)]
    for key, domain, gids, transfer, arrival in (
            ("allreduce/tp", "tp", topo_tp, np.full(WORLD, TP_MS), arrive + dp_transfer - DP_MS),
            ("allreduce/dp", "dp", topo_dp, dp_transfer, arrive)):
        last = np.array([arrival[gids == g].max() for g in gids])
        total = (last - arrival + transfer * rng.lognormal(0.0, 0.01, WORLD)) * 1e6
        for r in range(WORLD):
            rows[r].append([key, "comm", CALLS, int(total[r]), None, MB, domain, None, None, None,
                            int(total[r] / CALLS)])
    frame.kernels.append(kernel_rows([[r, step, rows[r], 0] for r in range(WORLD)]))
    return frame


def _findings(steps: int, onset: int, *, late: dict[int, float] | None = None, dp_slow: dict[int, float] | None = None,
              spread_ms: float = 5.0, seed: int = 0) -> list[Finding]:
    rng, state, cfg, topo = np.random.default_rng(seed), SignalState(), DetectionConfig(), _topo()
    out: list[Finding] = []
    for step in range(steps):
        on = step >= onset
        frame = _frame(step, rng, late=(late or {}) if on else {}, dp_slow=(dp_slow or {}) if on else {},
                       spread_ms=spread_ms)
        out += [f for f in kernel_findings(frame, topo, state, cfg.params(KernelParams), {}) if f.rule in ("R5", "R6")]
    return out


def test_transfer_is_the_least_waiting_members_rate() -> None:
    nan = float("nan")

    def col(total: list[float], nbytes: list[float]) -> CommColumn:
        return CommColumn(domain="pp", total_ns=np.array(total), calls=np.full(len(total), 1.0),
                          nbytes=np.array(nbytes), longest_ns=np.full(len(total), nan))

    groups = np.array([0, 0, 1, 1, 1])
    recv = col([30.0, 10.0, 40.0, 12.0, nan], [10.0, 10.0, 20.0, 10.0, 10.0])
    # group 0: rank 1 waited least (1 ns a byte); group 1: rank 3's 1.2 ns a byte, rank 2 moved twice the bytes
    assert transfer_ns([recv], groups)[0][:4].tolist() == [10.0, 10.0, 24.0, 12.0]
    assert np.isnan(transfer_ns([recv], groups)[0][4])  # no report: no transfer
    assert np.isnan(transfer_ns([recv], np.array([0, 0, -1, 1, 1]))[0][2])  # no group: no verdict
    # point-to-point: the sends of group 1 show a faster rate than any of its recvs (the recvs all waited)
    send = col([nan, nan, 5.0, 5.0, 5.0], [nan, nan, 10.0, 10.0, 10.0])
    pooled = transfer_ns([recv, send], groups)
    assert pooled[0][:4].tolist() == [10.0, 10.0, 10.0, 5.0] and pooled[1][2:].tolist() == [5.0, 5.0, 5.0]


def test_the_peers_of_a_late_rank_raise_no_r5() -> None:
    # rank 5 arrives 300 ms late from step 30: its TP peers 4, 6, 7 and DP peers 1, 9, 13 spin in their
    # all-reduce for it, their kernels 4x and 16x the transfer; their links are fine
    assert _findings(60, 30, late={5: 300.0}) == []


def test_a_slow_link_is_found_behind_the_spread_of_waits() -> None:
    # healthy steps with a wide start skew (waits of 0-100 ms on a 100 ms DP transfer): from step 30 DP
    # group 1's transfer is 1.6x. Its members' kernels (wait + transfer) moved by less than the waits'
    # spread, so bandwidth over kernel time hid it; over transfer time it is 1.6x the group's history
    found = _findings(40, 30, dp_slow={1: 1.6}, spread_ms=100.0)
    r5 = {f.key for f in found if f.rule == "R5"}
    assert r5 == {f"link:dp/1/{r}" for r in (1, 5, 9, 13)}
    assert all(f.step >= 30 for f in found)


def test_a_slow_group_raises_r6_and_no_r5_on_its_members_tp_peers() -> None:
    # DP group 1 on a halved link from step 30: its members reach the next TP all-reduce 100 ms late, so
    # every TP group waits for its member of DP group 1 (kernels 6x the TP transfer)
    found = _findings(60, 30, dp_slow={1: 2.0})
    assert {f.key for f in found if f.rule == "R6"} == {"group:dp/1"}
    assert {f.key for f in found if f.rule == "R5"} <= {f"link:dp/1/{r}" for r in (1, 5, 9, 13)}, \
        "R5 only on the slow group's own members (its onset, before R6 has a baseline)"
    assert not [f for f in found if f.metric == "allreduce/tp"]
