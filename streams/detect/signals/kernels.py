"""The kernel feed, on a released frame's kernel summaries: R4 (per kernel key: the job's trend, and ranks
against each other on all their compute kernels), R5/R6 per collective key and group (SLOW_LINK / SLOW_GROUP),
R7 (the job's median minority-kernel gap), R8 per rank, R9 per copy direction."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from schemas.columns import DOMAINS
from streams.detect.rules import r04_kernel_efficiency as r4
from streams.detect.rules import r05_slow_rank_in_group as r5
from streams.detect.rules import r06_slow_group as r6
from streams.detect.rules import r07_minority_kernel_gap as r7
from streams.detect.rules import r08_launch_latency as r8
from streams.detect.rules import r09_copy_rate as r9
from streams.detect.rules.base import Alarms, FloatArray
from streams.detect.scopes.finding import Finding
from streams.detect.signals.shared import FindingParams, SignalState, grow, rank_findings, rule_finding, timed
from streams.detect.windows.comm_columns import comm_columns, transfer_ns
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, IntArray, ReportedLayout

# domains whose collectives are point-to-point: a send and its recv are the two ends of one transfer, so R5/R6
# take their transfer rate from both keys together (a stage's recv waits on both neighbours and holds the
# pipeline bubble; the matching send of the stage that waited less shows the transfer)
POINT_TO_POINT = ("pp",)


@dataclass(frozen=True, slots=True)
class KernelParams(FindingParams):
    """The settings the kernel feed reads (infra/settings.py `DetectionConfig.params` fills them)."""

    r4_history: int
    r4_iqr_k: float
    r4_bench_samples: int
    r4_p_bench: float
    r4_min_deviation: float
    r4_trend_min_deviation: float
    r4_compute_min_deviation: float
    r5_periods: int
    r5_k: float
    r5_min_deviation: float
    r6_k: float
    r6_min_deviation: float
    r7_bound: float
    r7_jump: float
    r8_min_cu: float
    r9_low_gbps: float
    r9_high_gbps: float
    r9_learned_low: float
    r9_learned_high: float


def _spread(world: int, ranks: IntArray, values: FloatArray, fill: float) -> FloatArray:
    """A column over the world: `values` at `ranks` (a rank twice: the later row), `fill` elsewhere."""
    out = np.full(world, fill)
    out[ranks] = values
    return out


def kernel_findings(frame: Frame, topo: ReportedLayout, state: SignalState, params: KernelParams,
                    timings: dict[str, float]) -> list[Finding]:
    out: list[Finding] = []
    resolve_after = params.resolve_after_steps
    world = frame.seen.size
    # per key, per rank columns
    compute: dict[str, FloatArray] = {}
    compute_flops: dict[str, FloatArray] = {}
    compute_calls: dict[str, FloatArray] = {}
    # collectives: each rank's bandwidth, bytes over its transfer time (its kernel time less its wait for
    # the group's last arriver: comm_columns.transfer_ns; a domain's point-to-point keys judged together)
    comm: dict[str, tuple[FloatArray, str]] = {}
    collectives = {name: col for name, col in comm_columns(frame).items()
                   if col.domain in DOMAINS and np.isfinite(col.nbytes).any()}
    for domain in sorted({str(col.domain) for col in collectives.values()}):
        names = [n for n, col in collectives.items() if col.domain == domain]
        in_domain = topo.groups[DOMAINS.index(domain), :world]
        for subset in [names] if domain in POINT_TO_POINT else [[n] for n in names]:
            for name, transfer in zip(subset, transfer_ns([collectives[n] for n in subset], in_domain), strict=True):
                comm[name] = (collectives[name].nbytes / transfer, domain)
    copy: dict[str, FloatArray] = {}
    launch: dict[str, tuple[FloatArray, FloatArray, FloatArray]] = {}
    rows = frame.kernel_rows()
    if rows is not None:
        timed_rows = (rows.total_ns > 0) & (rows.rank < world)
        for key, r in rows.by_name(rows.key, timed_rows & (rows.flops > 0)):
            ranks, flops = rows.rank[r], rows.flops[r]
            compute[key] = _spread(world, ranks, flops / rows.total_ns[r] * 1e9, np.nan)
            compute_calls[key] = _spread(world, ranks, rows.count[r], np.nan)
            compute_flops[key] = _spread(world, ranks, flops, 0.0)
        # a copy is judged per direction (the key where the summary names none)
        named = (rows.direction >= 0) & (rows.direction != rows.code(""))
        label = np.where(named, rows.direction, rows.key)
        for direction, r in rows.by_name(label, timed_rows & (rows.cat == rows.code("memcpy"))
                                         & np.isfinite(rows.nbytes)):
            copy[direction] = _spread(world, rows.rank[r], rows.nbytes[r] / rows.total_ns[r], np.nan)
        for key, r in rows.by_name(rows.key, timed_rows & np.isfinite(rows.launch_mean_us)
                                   & np.isfinite(rows.launch_mad_us)):
            ranks = rows.rank[r]
            launch[key] = (_spread(world, ranks, rows.launch_mean_us[r], np.nan),
                           _spread(world, ranks, rows.launch_mad_us[r], np.nan),
                           _spread(world, ranks, np.nan_to_num(rows.count[r]), 0.0))
    t0 = time.perf_counter()
    weighted, weight = np.zeros(world), np.zeros(world)
    job_ratio: list[float] = []
    job_flops: list[float] = []
    for key, p in compute.items():
        # P = FLOPs of the calls the model makes / device time of the calls launched (repeated work halves it)
        calls = compute_calls[key]
        state.rules[f"r4c:{key}"], model = r4.model_calls(calls, state.rules.get(f"r4c:{key}"),
                                                           params.r4_bench_samples)
        p = np.where(calls >= 1, p * model / np.where(calls >= 1, calls, 1.0), p)
        sk = f"r4:{key}"
        med = np.array([float(np.nanmedian(p))])
        st4, a = r4.evaluate(med, state.rules.get(sk), r4.Params(history=params.r4_history, iqr_k=params.r4_iqr_k,
                                                                bench_samples=params.r4_bench_samples,
                                                                p_bench=params.r4_p_bench,
                                                                min_deviation=params.r4_trend_min_deviation))
        state.rules[sk] = st4
        for i in range(len(a)):
            out.append(rule_finding("R4", "job", "job", frame.step, f"kernel {key}: efficiency {a.value[i]:.2f} of "
                                    "benchmark, outside its IQR fences", a, i, resolve_after, metric=key,
                                    open_after=params.rule_open_after))
        if np.isfinite(st4.bench[0]) and np.isfinite(med[0]):
            job_ratio.append(float(med[0] / st4.bench[0]))
            job_flops.append(float(compute_flops[key].sum()))
        ratio = p / med[0]
        ok = np.isfinite(ratio)
        w = compute_flops[key]
        weighted[ok] += ratio[ok] * w[ok]
        weight[ok] += w[ok]
    if job_ratio and sum(job_flops) > 0:
        # the job's compute as one R4 series: each kernel's ratio to its benchmark, FLOP-weighted. Each kernel's
        # median carries its own rank noise (a kernel of one PP stage: a median over few ranks), so its series
        # needs r4_trend_min_deviation (10 %); over every kernel that noise averages out and what is left is the
        # job-wide step jitter (1.5 %): a job-wide slowdown of a few percent (spec §4 kernel compile defect,
        # "R4, R8") stands 4 sigma out at r4_compute_min_deviation (6 %)
        w = np.asarray(job_flops)
        agg = np.array([float(np.dot(w, np.asarray(job_ratio)) / w.sum())])
        stc, a = r4.evaluate(agg, state.rules.get("r4:compute"), r4.Params(
            history=params.r4_history, iqr_k=params.r4_iqr_k, p_bench=1.0,
            min_deviation=params.r4_compute_min_deviation))
        state.rules["r4:compute"] = stc
        for i in range(len(a)):
            out.append(rule_finding("R4", "job", "job", frame.step, f"compute kernels ({len(job_ratio)}, "
                                    f"FLOP-weighted): efficiency {a.value[i]:.2f} of benchmark, outside its IQR "
                                    "fences", a, i, resolve_after, metric="compute",
                                    open_after=params.rule_open_after))
    if compute:
        # ranks against each other on ALL their compute kernels at once (FLOP-weighted mean of each
        # kernel's FLOP/s ratio to the job's median): a degraded or throttled chip is slow on most of
        # them, while per-kernel jitter averages out; one cross-section per kernel flagged some rank's
        # noisiest kernel every few steps (8 % jitter, dozens of kernels: false alarms)
        rank_ratio = np.where(weight > 0, weighted / np.where(weight > 0, weight, 1.0), np.nan)
        cross = r4.cross_section(rank_ratio, params.r4_iqr_k, min_deviation=params.r4_min_deviation)
        low = cross.value < cross.baseline
        slow = Alarms(cross.index[low], cross.value[low], cross.baseline[low], cross.threshold[low])
        out.extend(rank_findings("R4", slow, topo, frame, params, "compute kernels' FLOP/s ratio to the job's median "
                                 "(FLOP-weighted)", "compute", present=int(np.isfinite(rank_ratio).sum())))
    timed(timings, "R4", t0)

    t0 = time.perf_counter()
    for key, (bw, domain) in comm.items():
        groups = topo.groups[DOMAINS.index(domain), :world]
        sk = f"r5:{key}"
        st5, a = r5.evaluate(bw, groups, state.rules.get(sk), r5.Params(periods=params.r5_periods, k=params.r5_k,
                                                                        min_deviation=params.r5_min_deviation))
        state.rules[sk] = st5
        low = a.value < a.baseline
        cand_groups: set[int] = set()
        for i, rank in enumerate(a.index.tolist()):
            if not low[i]:
                continue
            g = int(groups[rank])
            cand_groups.add(g)
            h = int(topo.host_of[rank])
            host = topo.hosts[h] if h >= 0 else None
            link = f"{domain} group {g}: rank {rank} ({host})"
            out.append(rule_finding("R5", f"link:{domain}/{g}/{rank}", "link", frame.step,
                                    f"slow link {link}: {key} bandwidth {a.value[i]:.2f} GB/s vs group "
                                    f"{a.baseline[i]:.2f}", a, i, resolve_after, metric=key, ranks=[rank],
                                    host=host, domain=domain, group=g, link=link, open_after=params.rule_open_after))
        ok = np.isfinite(bw) & (groups >= 0)
        gids = np.unique(groups[ok])
        if gids.size:
            means = np.array([float(np.mean(bw[ok & (groups == g)])) for g in gids.tolist()])
            has = np.array([int(g) in cand_groups for g in gids.tolist()])
            a6 = r6.evaluate(means, has, r6.Params(k=params.r6_k, min_deviation=params.r6_min_deviation))
            for i, gi in enumerate(a6.index.tolist()):
                if a6.value[i] >= a6.baseline[i]:
                    continue
                g = int(gids[gi])
                members = np.flatnonzero(groups == g).tolist()
                out.append(rule_finding("R6", f"group:{domain}/{g}", "group", frame.step,
                                        f"slow group {domain.upper()} {g}: {key} bandwidth {a6.value[i]:.2f} GB/s vs "
                                        f"other groups {a6.baseline[i]:.2f}", a6, i, resolve_after, metric=key,
                                        ranks=members, domain=domain, group=g, open_after=params.rule_open_after))
    timed(timings, "R5/R6", t0)

    t0 = time.perf_counter()
    v = r7.gap(frame.duration_ms, frame.phases[PHASE_INDEX["interstep_cpu_ms"]], frame.kernel_ns / 1e6)
    vv = v[np.isfinite(v)]
    if vv.size:
        st7, a = r7.evaluate(np.array([float(np.median(vv))]), state.rules.get("r7"),
                             r7.Params(bound=params.r7_bound, jump=params.r7_jump))
        state.rules["r7"] = st7
        for i in range(len(a)):
            out.append(rule_finding("R7", "job", "job", frame.step, f"minority-kernel gap V {a.value[i]:.2f} "
                                    f"(threshold {a.threshold[i]:.2f})", a, i, resolve_after, metric="V_minority",
                                    open_after=params.rule_open_after))
    timed(timings, "R7", t0)

    t0 = time.perf_counter()
    for key, (mean, mad, count) in launch.items():
        a = r8.evaluate(mean, mad, count, r8.Params(min_cu=params.r8_min_cu))
        out.extend(rank_findings("R8", a, topo, frame, params, f"launch-latency uniformity CU of {key}", "T15",
                                 present=int(np.count_nonzero(np.isfinite(mean) & np.isfinite(mad) & (count >= 2)))))
    timed(timings, "R8", t0)

    t0 = time.perf_counter()
    for direction, rate in copy.items():
        sk = f"r9:{direction}"
        st9, a = r9.evaluate(rate, grow(state.rules.get(sk), world, "pos"),
                             r9.Params(low=params.r9_low_gbps, high=params.r9_high_gbps,
                                       learned_low=params.r9_learned_low, learned_high=params.r9_learned_high))
        state.rules[sk] = st9
        out.extend(rank_findings("R9", a, topo, frame, params, f"{direction} copy rate GB/s", f"copy_{direction}",
                                 present=int(np.isfinite(rate).sum())))
    timed(timings, "R9", t0)
    return out
