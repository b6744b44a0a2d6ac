"""Runs every analyzer over the parsed profiles and returns one diagnosis (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from streams.profiles.analysis.breakdown import Breakdown, step_breakdowns
from streams.profiles.analysis.cluster_table import cluster_table_verdict
from streams.profiles.analysis.communication import communication_causes
from streams.profiles.analysis.critical_path import CriticalPath, critical_path
from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.analysis.host import host_causes
from streams.profiles.analysis.rank_table import RankRow, rank_rows
from streams.profiles.analysis.ranks import cluster_verdict
from streams.profiles.analysis.roofline import roofline
from streams.profiles.analysis.waits import CollectiveWait, collective_waits
from streams.profiles.model import ClusterTable, Profile

_SEVERITY = {"critical": 0, "warning": 1, "info": 2}


@dataclass(slots=True)
class RankDiagnosis:
    profile: Profile
    steps: list[Breakdown]
    critical: CriticalPath
    findings: list[ProfileFinding]


@dataclass(slots=True)
class Diagnosis:
    ranks: list[RankDiagnosis] = field(default_factory=list)
    cluster: list[ProfileFinding] = field(default_factory=list)
    clusters: list[ClusterTable] = field(default_factory=list)
    waits: list[CollectiveWait] = field(default_factory=list)  # R_wait per matched collective, highest first
    rank_table: list[RankRow] = field(default_factory=list)

    def findings(self) -> list[ProfileFinding]:
        out = list(self.cluster)
        for r in self.ranks:
            out.extend(r.findings)
        return sorted(out, key=lambda f: _SEVERITY.get(f.severity, 3))

    def top(self) -> ProfileFinding | None:
        found = self.findings()
        return found[0] if found else None


def diagnose(profiles: list[Profile], clusters: list[ClusterTable] | None = None) -> Diagnosis:
    diag = Diagnosis(clusters=list(clusters or []))
    for p in profiles:
        steps = step_breakdowns(p)
        findings = [replace(f, source=f.source or p.source)
                    for f in (*communication_causes(p, steps), *host_causes(p), *roofline(p))]
        diag.ranks.append(RankDiagnosis(p, steps, critical_path(p.kernels, p.names), findings))
    diag.cluster.extend(cluster_verdict(profiles))
    for table in diag.clusters:  # tables stay apart: each finding names the table it came from
        diag.cluster.extend(replace(f, source=f.source or table.source) for f in cluster_table_verdict(table))
    diag.waits = collective_waits(profiles, diag.clusters)
    diag.rank_table = rank_rows([(r.profile, r.steps) for r in diag.ranks], diag.clusters, diag.waits)
    return diag
