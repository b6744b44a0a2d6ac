"""Communication causes (spec §3): small packets, 512 B alignment, retransmission (> 4 s), bandwidth
contention with concurrent compute, exposed communication."""

from __future__ import annotations

import math

import numpy as np

from streams.profiles.analysis.breakdown import Breakdown
from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.model import Profile

SATURATION_BYTES = 32e6  # HCCS saturates at ≈ 32 MB messages
ALIGN = 512
RETRANSMISSION_US = 4e6


def communication_causes(profile: Profile, steps: list[Breakdown], small_share: float = 0.5,
                         exposed_share: float = 0.3) -> list[ProfileFinding]:
    findings: list[ProfileFinding] = []
    sizes = np.array([c.bytes for c in profile.collectives if not math.isnan(c.bytes)], dtype=float)
    transfers = np.array([b for c in profile.collectives for b in c.transfers_bytes], dtype=float)
    transfer_us = np.array([t for c in profile.collectives for t in c.transfers_us], dtype=float)
    msgs = transfers if transfers.size else sizes
    if msgs.size:
        small = float(np.mean(msgs < SATURATION_BYTES))
        if small >= small_share:
            findings.append(ProfileFinding(
                "small_packets", f"{small:.0%} of {msgs.size} messages are under 32 MB (link not saturated)",
                {"small_ratio": small, "median_bytes": float(np.median(msgs)), "messages": float(msgs.size)},
                profile.rank, severity="info"))
        misaligned = float(np.mean(np.mod(np.round(msgs), ALIGN) != 0))
        if misaligned > 0:
            findings.append(ProfileFinding(
                "alignment", f"{misaligned:.0%} of messages are not multiples of 512 B",
                {"misaligned_ratio": misaligned, "messages": float(msgs.size)}, profile.rank, severity="info"))
    if transfer_us.size and float(transfer_us.max()) > RETRANSMISSION_US:
        findings.append(ProfileFinding(
            "retransmission", f"a transfer took {transfer_us.max() / 1e6:.1f} s (> 4 s: RDMA retransmission)",
            {"max_transfer_s": float(transfer_us.max()) / 1e6}, profile.rank, severity="critical"))
    for b in steps:
        if b.span <= 0:
            continue
        share = b.communication_not_overlapped / b.span
        if share >= exposed_share:
            findings.append(ProfileFinding(
                "exposed_communication",
                f"step {b.step}: non-overlapped communication is {share:.0%} of the step "
                f"({b.communication_not_overlapped / 1e3:.1f} ms); overlap ratio {b.overlap_ratio:.0%}",
                {"comm_not_overlapped_us": b.communication_not_overlapped, "span_us": b.span,
                 "overlap_ratio": b.overlap_ratio}, profile.rank, b.step))
            if b.overlap_ratio < 0.2:
                findings.append(ProfileFinding(
                    "poor_parallelism", f"step {b.step}: only {b.overlap_ratio:.0%} of communication overlaps compute",
                    {"overlap_ratio": b.overlap_ratio}, profile.rank, b.step, severity="info"))
    # bandwidth contention: collectives slower while overlapped with compute than alone
    durs_overlap, durs_alone = _collective_durations_by_overlap(profile)
    if len(durs_overlap) >= 3 and len(durs_alone) >= 3:
        ratio = float(np.median(durs_overlap) / max(np.median(durs_alone), 1e-9))
        if ratio > 1.5:
            findings.append(ProfileFinding(
                "bandwidth_contention",
                f"collectives overlapped with compute take {ratio:.1f}× those running alone (per byte)",
                {"slowdown": ratio}, profile.rank))
    return findings


def _collective_durations_by_overlap(profile: Profile) -> tuple[list[float], list[float]]:
    """Per-byte time of collectives split by whether compute ran during them."""
    k = profile.kernels
    comp = k.kind == 0
    cs, ce = k.ts[comp], k.ts[comp] + k.dur[comp]
    order = np.argsort(cs)
    cs, ce = cs[order], ce[order]
    over: list[float] = []
    alone: list[float] = []
    for c in profile.collectives:
        if math.isnan(c.bytes) or c.bytes <= 0 or c.dur <= 0:
            continue
        hi = int(np.searchsorted(cs, c.ts + c.dur))
        busy = bool(np.any(ce[:hi] > c.ts)) if hi else False
        (over if busy else alone).append(c.dur / c.bytes)
    return over, alone
