"""msprof-analyze cluster tables (spec §3 slow rank): who the others wait for, and why, per pipeline stage.

`cluster_step_trace_time.csv`, read the way mstt reads it (its README's tips and the advisor's
`SlowRankAnalyzer`, which sums Computing, Communication(Not Overlapped) and Free per step and rank
and flags a dimension whose max − min exceeds 5 % of the mean step):

- In a synchronous collective the ranks that arrive early wait *inside* it, and the wait is
  exposed communication. The rank the others wait for is the one with the **least**
  Communication(Not Overlapped) — the receive-excluded column when the table has it, so a
  pipeline's receive waits (its bubble) do not count as collective waits.
- Every rank's step has the same length, so the late rank's missing wait reappears as more
  Computing (slow device, load imbalance) or more Free (device idle: host bound — dispatch,
  data loading, CPU contention), which is what mstt says Free tells; Preparing (step start to
  the first task) is the host-side part of Free. Whichever exceeds the stage's median more is the
  stated cause.
- Confirmation: the late rank's exposed communication must be a low outlier of its stage,
  Dixon's Q (r10, 99.5 % one-sided, the project's table in `streams/detect/scopes/outliers.py`) for
  3–30 ranks, 3σ of the other ranks beyond. A difference past mstt's 5 % that the test does not
  confirm is reported as `info`, as mstt's advisor reports it: the column that differs most and its
  extreme rank (the most Computing or Free, the least exposed communication).
- Ranks are compared only within their pipeline stage: the `stage` rows' rank sets (mstt's own
  grouping), else the `PP Index` column; stages differ by design (bubble, different layers).
- Other columns: Overlapped / Communication give the overlap ratio; the least-waiting rank's
  exposed communication is the stage's real communication cost (≥ 30 % of its step: the stage is
  communication bound, whoever is late); Bubble and Preparing are reported.

`cluster_communication.json`: per communication group, the rank that waits least in the group's
collectives is the one the others wait for. Point-to-point transfers (send/receive, p2p groups)
are left out: their waits are the pipeline's bubble, not a late rank.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.dixon import DIXON_Q995
from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.model import ClusterTable

GAP_SHARE = 0.05  # mstt: max − min above 5 % of the mean step is an issue
COMPUTING, COMM_NO, FREE = "Computing", "Communication(Not Overlapped)", "Free"
COMM_NO_EXCL_RECV = "Communication(Not Overlapped and Exclude Receive)"
OVERLAPPED, COMMUNICATION, BUBBLE, PREPARING = "Overlapped", "Communication", "Bubble", "Preparing"
_P2P_OP = re.compile(r"(send|recv|receive)", re.IGNORECASE)  # hcom_send, hcom_receive, hcom_batchSendRecv


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True, slots=True)
class Outlier:
    """The extreme value of a sample and whether a test confirms it (Dixon 3–30 values, 3σ beyond)."""

    index: int
    confirmed: bool
    method: str  # "dixon" | "3sigma" | "none"
    statistic: float  # Dixon's Q, or the distance to the others' mean in their σ
    critical: float


def low_outlier(values: Sequence[float]) -> Outlier | None:
    """Is the smallest value an outlier? None with fewer than 3 values."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 3:
        return None
    order = np.argsort(x, kind="stable")
    low = int(order[0])
    if n <= 30:
        spread = float(x[order[-1]] - x[low])
        q = float(x[order[1]] - x[low]) / spread if spread > 0 else 0.0
        crit = DIXON_Q995[n - 3]
        return Outlier(low, q > crit, "dixon", q, crit)
    others = np.delete(x, low)
    sd = float(np.std(others, ddof=1))
    z = float(np.mean(others) - x[low]) / sd if sd > 0 else (math.inf if x[low] < others.mean() else 0.0)
    return Outlier(low, z > 3.0, "3sigma", z, 3.0)


@dataclass(slots=True)
class _RankRow:
    rank: int
    step: str
    values: dict[str, float]

    def get(self, column: str) -> float:
        return self.values.get(column, math.nan)


def _ranks_of(text: Any) -> frozenset[int]:
    return frozenset(int(t) for t in re.findall(r"\d+", str(text)))


def stages_of(table: ClusterTable) -> dict[int, int]:
    """rank -> stage number: the `stage` rows' rank sets (ordered by lowest rank), else `PP Index`."""
    sets = sorted({_ranks_of(r.get("Index")) for r in table.steps if str(r.get("Type")) == "stage"} - {frozenset()},
                  key=min)
    out: dict[int, int] = {}
    for i, ranks in enumerate(sets):
        for rank in ranks:
            out.setdefault(rank, i)
    if out:
        return out
    for r in table.steps:
        pp = _float(r.get("PP Index"))
        if str(r.get("Type")) == "rank" and not math.isnan(pp):
            out[int(r["Index"])] = int(pp)
    return out


def _rank_rows(table: ClusterTable) -> list[_RankRow]:
    rows = []
    for r in table.steps:
        if str(r.get("Type", "rank")) != "rank":
            continue
        idx = _float(r.get("Index"))
        if math.isnan(idx):
            continue
        values = {k: _float(v) for k, v in r.items() if k not in ("Step", "Type", "Index")}
        rows.append(_RankRow(int(idx), str(r.get("Step", "")), values))
    return rows


@dataclass(frozen=True, slots=True)
class StageVerdict:
    """One (step, stage) of the step-trace table."""

    step: str
    stage: int | None
    ranks: tuple[int, ...]
    late_rank: int | None  # least exposed communication
    outlier: Outlier | None
    gap_share: dict[str, float]  # per column: (max − min) / mean step
    extremes: dict[str, tuple[int, float, int, float]]  # per column: rank and value of the max, then of the min
    cause: str  # "compute" | "host" (Free) | ""
    evidence: dict[str, float]


def _excess(value: float, column: list[float]) -> float:
    """`value` over the column's median; NaN when the table has no such column (no all-NaN median warning)."""
    known = [v for v in column if not math.isnan(v)]
    return value - float(np.median(known)) if known else math.nan


def _comm_column(rows: list[_RankRow]) -> str:
    if all(not math.isnan(r.get(COMM_NO_EXCL_RECV)) for r in rows):
        return COMM_NO_EXCL_RECV
    return COMM_NO


def stage_verdicts(table: ClusterTable) -> list[StageVerdict]:
    stage_of = stages_of(table)
    groups: dict[tuple[str, int | None], list[_RankRow]] = {}
    for row in _rank_rows(table):
        groups.setdefault((row.step, stage_of.get(row.rank)), []).append(row)
    out = []
    for (step, stage), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        rows.sort(key=lambda r: r.rank)
        comm_col = _comm_column(rows)
        comp = np.array([r.get(COMPUTING) for r in rows])
        comm = np.array([r.get(comm_col) for r in rows])
        free = np.array([r.get(FREE) for r in rows])
        if len(rows) < 2 or np.isnan(comp).any() or np.isnan(comm).any() or np.isnan(free).any():
            continue
        total = comp + np.array([r.get(COMM_NO) for r in rows]) + free  # the advisor's step time
        mean_total = float(np.nanmean(total)) or 1.0
        columns = ((COMPUTING, comp), (comm_col, comm), (FREE, free))
        gaps = {name: float(v.max() - v.min()) / mean_total for name, v in columns}
        extremes = {name: (rows[int(np.argmax(v))].rank, float(v.max()), rows[int(np.argmin(v))].rank, float(v.min()))
                    for name, v in columns}
        late = int(np.argmin(comm))
        outlier = low_outlier(comm.tolist())
        others = np.arange(len(rows)) != late
        excess_comp = float(comp[late] - np.median(comp[others]))
        excess_free = float(free[late] - np.median(free[others]))
        cause = "host" if excess_free > excess_comp else "compute"
        r = rows[late]
        comm_total = r.get(COMMUNICATION)
        evidence = {
            "comm_not_overlapped_ms": float(comm[late]) / 1e3,
            "others_median_comm_not_overlapped_ms": float(np.median(comm[others])) / 1e3,
            "computing_excess_ms": excess_comp / 1e3, "free_excess_ms": excess_free / 1e3,
            "preparing_excess_ms": _excess(r.get(PREPARING), [x.get(PREPARING) for x in rows]) / 1e3,
            "step_ms": float(total[late]) / 1e3,
            "exposed_comm_share": float(comm[late] / total[late]) if total[late] > 0 else 0.0,
            "overlap_ratio": r.get(OVERLAPPED) / comm_total if comm_total and comm_total > 0 else math.nan,
            "bubble_ms": r.get(BUBBLE) / 1e3,
            "ranks": float(len(rows)),
        }
        if outlier is not None:
            evidence[f"{outlier.method}_stat"] = outlier.statistic
            evidence[f"{outlier.method}_critical"] = outlier.critical
        evidence = {k: v for k, v in evidence.items() if not math.isnan(v)}
        out.append(StageVerdict(step, stage, tuple(x.rank for x in rows), rows[late].rank, outlier, gaps, extremes,
                                cause, evidence))
    return out


def _where(v: StageVerdict) -> str:
    stage = f"stage {v.stage} " if v.stage is not None else ""
    return f"{stage}({len(v.ranks)} ranks)"


def step_table_findings(table: ClusterTable, exposed_share: float = 0.3) -> list[ProfileFinding]:
    findings: list[ProfileFinding] = []
    for v in stage_verdicts(table):
        step = int(v.step) if v.step.isdigit() else None
        share = v.evidence.get("exposed_comm_share", 0.0)
        if share >= exposed_share:  # the least-waiting rank's exposed communication is the stage's real cost
            findings.append(ProfileFinding(
                "exposed_communication",
                f"{_where(v)}: even the rank that waits least has {share:.0%} of its step in exposed "
                f"communication", {"exposed_comm_share": share, "overlap_ratio": v.evidence.get("overlap_ratio", 0.0)},
                rank=v.late_rank, step=step, severity="info"))
        worst = max(v.gap_share, key=lambda k: v.gap_share[k])
        if v.gap_share[worst] <= GAP_SHARE or v.late_rank is None:
            continue
        why = (f"it computes {v.evidence['computing_excess_ms']:.2f} ms longer than the stage's median"
               if v.cause == "compute" else
               f"its device idles {v.evidence['free_excess_ms']:.2f} ms longer (Free: host bound — dispatch, "
               f"data loading or CPU contention on its host)")
        head = (f"{_where(v)}: rank {v.late_rank} is the one the others wait for — least exposed communication "
                f"({v.evidence['comm_not_overlapped_ms']:.2f} ms vs a median "
                f"{v.evidence['others_median_comm_not_overlapped_ms']:.2f} ms); {why}")
        evidence = {**v.evidence, "max_gap_share": v.gap_share[worst]}
        if v.outlier is not None and v.outlier.confirmed:
            findings.append(ProfileFinding("slow_rank", head, evidence, rank=v.late_rank, step=step))
        else:
            # not one late rank: report the spread the way mstt's advisor does, naming the extreme rank of the
            # column that differs most (the most Computing or Free, the least exposed communication)
            test = ("too few ranks for an outlier test" if v.outlier is None else
                    f"not confirmed as an outlier: {v.outlier.method} {v.outlier.statistic:.3f} ≤ "
                    f"{v.outlier.critical:.3f}")
            hi_rank, hi, lo_rank, lo = v.extremes[worst]
            named = lo_rank if worst in (COMM_NO, COMM_NO_EXCL_RECV) else hi_rank
            findings.append(ProfileFinding(
                "slow_rank", f"{_where(v)}: {worst} differs by {v.gap_share[worst]:.0%} of the step across ranks "
                f"(mstt flags > 5 %): rank {hi_rank} {hi / 1e3:.2f} ms, rank {lo_rank} {lo / 1e3:.2f} ms; least "
                f"exposed communication: rank {v.late_rank}, {test}", evidence, rank=named, step=step,
                severity="info"))
    return findings


def is_p2p(row: dict[str, Any], p2p_groups: set[frozenset[int]]) -> bool:
    """A point-to-point transfer (or a `Total Op Info` summary row, which sums them in): not a collective wait."""
    if str(row.get("op", "")).startswith("Total"):
        return True
    path = [str(p) for p in row.get("path", [])]
    if "p2p" in path or _P2P_OP.search(str(row.get("op", ""))):
        return True
    return bool(path) and _ranks_of(path[0]) in p2p_groups


def wait_findings(table: ClusterTable) -> list[ProfileFinding]:
    """Per communication group: the rank with the least mean wait in its collectives (p2p left out)."""
    p2p_groups = {frozenset(g["ranks"]) for g in table.groups if g.get("kind") == "p2p"}
    waits: dict[str, dict[int, list[float]]] = {}
    for row in table.collectives:
        if row.get("rank", -1) < 0 or "Wait Time(ms)" not in row or is_p2p(row, p2p_groups):
            continue
        waits.setdefault(str(row.get("group", "")), {}).setdefault(int(row["rank"]), []).append(
            float(row["Wait Time(ms)"]))
    findings = []
    for group, per_rank in waits.items():
        if len(per_rank) < 2:
            continue
        mean_wait = {r: sum(v) / len(v) for r, v in per_rank.items()}
        late = min(mean_wait, key=lambda r: mean_wait[r])
        others = [w for r, w in mean_wait.items() if r != late]
        if sum(others) / len(others) > 2 * mean_wait[late] + 0.1:
            findings.append(ProfileFinding(
                "slow_rank", f"group {group}: rank {late} waits {mean_wait[late]:.2f} ms per collective, the others "
                f"{sum(others) / len(others):.2f} ms: they wait for rank {late}",
                {"wait_ms": mean_wait[late], "others_wait_ms": sum(others) / len(others)}, rank=late))
    return findings


def cluster_table_verdict(table: ClusterTable) -> list[ProfileFinding]:
    return [*step_table_findings(table), *wait_findings(table)]
