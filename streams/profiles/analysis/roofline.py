"""Roofline class per kernel (spec §3): memory-bound, compute-bound or under-utilised, plus down-clocking.

With FLOP and byte counts: AI = P/B against AI_necessary = P_peak/B_peak and the utilisation
threshold U_thr. Ascend dumps give pipe ratios instead (aic_mac_ratio / aiv_vec_ratio for the
arithmetic units, mte2 for memory traffic), used as U_arith and U_mem directly.
Peak tables per device kind are configuration (`PeakTable`; defaults below).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.model import Profile


@dataclass(frozen=True, slots=True)
class Peak:
    flops: float  # FLOP/s (dense, the training dtype)
    bytes_per_s: float  # HBM bandwidth
    clock_mhz: float


# Vendor datasheet figures; override per deployment (steplens.toml [profiles.peaks]).
DEFAULT_PEAKS: dict[str, Peak] = {
    "A100": Peak(312e12, 2.0e12, 1410.0),
    "H100": Peak(989e12, 3.35e12, 1980.0),
    "H200": Peak(989e12, 4.8e12, 1980.0),
    "Ascend910B": Peak(313e12, 1.6e12, 1800.0),
    "Ascend": Peak(313e12, 1.6e12, 1800.0),
}


def peak_for(device: str | None, peaks: dict[str, Peak] | None = None) -> Peak | None:
    table = peaks or DEFAULT_PEAKS
    if not device:
        return None
    for key in sorted(table, key=len, reverse=True):
        if key.lower() in device.lower():
            return table[key]
    return None


def classify(u_arith: float, u_mem: float, ai: float | None, ai_necessary: float | None, u_thr: float) -> str:
    if ai is not None and ai_necessary is not None:
        if ai <= ai_necessary and u_mem >= u_thr:
            return "memory_bound"
        if ai > ai_necessary and u_arith >= u_thr:
            return "compute_bound"
        return "under_utilised"
    if u_arith >= u_thr and u_arith >= u_mem:
        return "compute_bound"
    if u_mem >= u_thr:
        return "memory_bound"
    return "under_utilised"


def roofline(profile: Profile, u_thr: float = 0.6, min_share: float = 0.2,
             measured_clock_mhz: float | None = None, peaks: dict[str, Peak] | None = None) -> list[ProfileFinding]:
    """Findings for the roofline class that holds the largest share of device compute time."""
    pipes: dict[str, tuple[float, float, float, float]] = profile.meta.get("pipe_utilisation") or {}
    findings: list[ProfileFinding] = []
    if pipes:
        time_by_class: dict[str, float] = {}
        for _name, (time_us, mac, vec, mte2) in pipes.items():
            cls = classify(max(mac, vec), mte2, None, None, u_thr)
            time_by_class[cls] = time_by_class.get(cls, 0.0) + time_us
        total = sum(time_by_class.values()) or 1.0
        cls, share = max(time_by_class.items(), key=lambda kv: kv[1])
        if share / total >= min_share:
            findings.append(ProfileFinding(
                cause=cls,
                summary=f"{share / total:.0%} of compute time is in {cls.replace('_', '-')} kernels",
                evidence={f"{k}_share": v / total for k, v in time_by_class.items()} | {"u_thr": u_thr},
                rank=profile.rank, severity="info",
            ))
    if measured_clock_mhz is None and isinstance(profile.meta.get("clock_mhz_min"), float):
        measured_clock_mhz = profile.meta["clock_mhz_min"]  # Ascend: the 'AI Core Freq' counter
    peak = peak_for(profile.device, peaks)
    if peak is not None and measured_clock_mhz is not None and measured_clock_mhz < 0.95 * peak.clock_mhz:
        findings.append(ProfileFinding(
            cause="down_clocking",
            summary=f"device clock {measured_clock_mhz:.0f} MHz is {1 - measured_clock_mhz / peak.clock_mhz:.0%} "
                    f"below its rated {peak.clock_mhz:.0f} MHz",
            evidence={"clock_mhz": measured_clock_mhz, "rated_mhz": peak.clock_mhz}, rank=profile.rank,
        ))
    return findings
