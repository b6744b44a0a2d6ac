"""Below what the fleet achieves: a job slow from its first step, on every rank alike (issue #44).

Every other scope judges a rank against its peers or a step against the job's past, so a job
whose collectives fell back to TCP sockets (a wrong NCCL_SOCKET_IFNAME, IB disabled) or whose
every device is down-clocked raises nothing: no peer differs and its history starts slow. This
scope judges the job against the fleet's reference models (`streams/model/reference.py`):

- per collective key (op / domain): the transfer time of one call with the wait removed (the
  group's least time per byte, `comm_columns.transfer_ns`, as R5/R6 read it) against the
  reference curve of (op, link class of the group: "intra" when its ranks share one host, else
  "inter", group size) at the call's bytes; the job's figure is the median over its ranks;
- per compute kernel key: the job's FLOP/s (median over ranks) against the fleet's benchmark of
  that key on the job's device kind (`KernelBench`); a benchmark that is only the vendor prior
  judges nothing (a new device kind raises nothing until the fleet has history on it).

The verdict is taken once per component, early: the job's first `expected_warmup_steps` frames are
skipped, then each component's first `expected_steps` frames with a reference for it (a kernel's
only once the device samples told the job's device kind) are judged, and it is
below when it is below on `expected_share` of them and its median is: a collective at
`expected_comm_ratio` x its expected time or more, a kernel at `expected_compute_ratio` x the
fleet's p50 or less AND under the fleet's p10. No verdict by `expected_decide_by` frames: none.
A job found below yields one finding per frame while its recent frames stay below (the incident
resolves when the job is fixed); a job found matching the fleet stays silent for good (a later
slowdown is the relative scopes' to find, against the job's own past).

The scope also gathers what the fleet learns from the job (`ExpectedState.learned`): per curve
(op, link, group size) the job's median (bytes, transfer) per call, per (kernel, device kind) its
median FLOP/s. The FleetEngine pools them from jobs under no incident (`FleetLearner`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.columns import DOMAINS
from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding
from streams.detect.windows.comm_columns import comm_columns, transfer_ns
from streams.detect.windows.step_frames import PHASE_INDEX, FloatArray, Frame, ReportedLayout
from streams.model.collectives import expected_transfer_ns, fit_curves
from streams.model.kernels import KernelFlops, fit_kernel_bench
from streams.model.reference import CollectiveCurve, KernelBench, ReferenceModels, link_class_of

NETWORK = SCOPES["BELOW_EXPECTED_NETWORK"]
COMPUTE = SCOPES["BELOW_EXPECTED_COMPUTE"]
POINT_TO_POINT = ("pp",)  # a send and its recv are the two ends of one transfer (as signals/kernels.py)
OP_NAMES = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
            "alltoall": "all-to-all", "broadcast": "broadcast", "send": "send", "recv": "recv"}
LINK_NAMES = {"intra": "intra-host HCCS/NVLink", "inter": "inter-host RDMA", "tcp": "TCP"}
LEARN_KEEP = 32  # per-frame figures a job keeps per curve or kernel for the fleet to learn from
NO_REFERENCE_DECIDE_BY = 4  # no verdict after this many x `expected_decide_by` frames, reference or not


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    expected_warmup_steps: int
    expected_steps: int
    expected_decide_by: int
    expected_share: float
    expected_comm_ratio: float
    expected_compute_ratio: float
    resolve_after_steps: int


@dataclass(frozen=True, slots=True)
class Component:
    """One collective or kernel key of one frame against its reference."""

    name: str          # "comm:allreduce/dp", "compute:F2:4096x4096x4096"
    kind: str          # "comm" or "compute"
    ratio: float       # comm: observed / expected time (>= 1 slow); compute: FLOP/s / fleet p50 (<= 1 slow)
    below: bool        # past its threshold in this frame
    excess_ms: float   # per rank (median): what it cost the step over its expectation
    text: str          # the component and its expected figure, for the incident


@dataclass(slots=True)
class ExpectedState:
    frames: int = 0                 # frames seen (from the job's first)
    judged: dict[str, list[float]] = field(default_factory=dict)  # component -> ratios of judged frames
    flagged: dict[str, list[bool]] = field(default_factory=dict)  # component -> below in those frames
    decided: bool = False           # past `expected_decide_by` frames: no component gets a verdict any more
    below: list[str] = field(default_factory=list)  # components whose verdict was "below the fleet"
    cleared: list[str] = field(default_factory=list)  # ... and "matches the fleet" (judged no more)
    reviewed: list[str] = field(default_factory=list)  # below verdicts the fleet's drift judgement has seen
    below_frame: int = 0            # the frame of the job's first "below" verdict (0: none)
    # per kind of component ("comm", "compute"): the frame one was first judged against a reference
    first_judged: dict[str, int] = field(default_factory=dict)
    # what the fleet may learn from this job (pooled while it has no incident): curve -> (bytes, ns) per call,
    # "kernel|device kind" -> FLOP/s; the job's per-frame medians, the newest LEARN_KEEP
    learned_comm: dict[tuple[str, str, int], list[tuple[float, float]]] = field(default_factory=dict)
    learned_flops: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.0f} MB" if nbytes >= 1e7 else f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 \
        else f"{nbytes / 1e3:.0f} KB"


def _hosts_per_group(groups: Any, host_of: Any) -> FloatArray:
    """Per rank: how many hosts its group spans (NaN: no group)."""
    ok = (groups >= 0) & (host_of >= 0)
    out = np.full(groups.size, np.nan)
    if not ok.any():
        return out
    g, h = groups[ok], host_of[ok]
    pairs = np.unique(g * (int(h.max()) + 1) + h)
    count = np.bincount(pairs // (int(h.max()) + 1), minlength=int(g.max()) + 1).astype(np.float64)
    out[ok] = count[g]
    return out


def _comm(frame: Frame, topo: ReportedLayout, ref: ReferenceModels | None, params: Params,
          state: ExpectedState, learn: bool) -> list[Component]:
    world = min(frame.seen.size, topo.world)
    cols = {k: c for k, c in comm_columns(frame).items() if c.domain in DOMAINS and np.isfinite(c.nbytes).any()}
    out: list[Component] = []
    exposed = frame.phases[PHASE_INDEX["comm_exposed_ms"], :world]
    exposed_ms = float(np.nanmedian(exposed)) if np.isfinite(exposed).any() else math.inf
    for domain in sorted({str(c.domain) for c in cols.values()}):
        d = DOMAINS.index(domain)
        groups = topo.groups[d, :world]
        sizes = topo.sizes[d, :world]
        spans = _hosts_per_group(groups, topo.host_of[:world])
        names = [n for n, c in cols.items() if c.domain == domain]
        for subset in [names] if domain in POINT_TO_POINT else [[n] for n in names]:
            moved = transfer_ns([cols[n] for n in subset], groups)
            for name, tr in zip(subset, moved, strict=True):
                col = cols[name]
                calls = col.calls[:world]
                with np.errstate(invalid="ignore", divide="ignore"):
                    t_call = tr[:world] / calls
                    m_call = col.nbytes[:world] / calls
                op = name.split("/", 1)[0]
                ok = np.isfinite(t_call) & np.isfinite(m_call) & (calls > 0) & np.isfinite(spans) & (sizes > 1)
                if not ok.any():
                    continue
                inter = spans > 1
                for link_ok, link_of in ((ok & ~inter, False), (ok & inter, True)):
                    if not link_ok.any():
                        continue
                    link = link_class_of(2 if link_of else 1)
                    size = int(np.median(sizes[link_ok]))
                    m_med, t_med = float(np.median(m_call[link_ok])), float(np.median(t_call[link_ok]))
                    if learn:
                        got = state.learned_comm.setdefault((op, link, size), [])
                        got.append((m_med, t_med))
                        del got[:-LEARN_KEEP]
                    curve = ref.curve(op, link, size) if ref is not None else None
                    if ref is None or curve is None or curve.samples == 0:
                        continue
                    # the nearest group size's curve, the message scaled by the two bus factors' ratio
                    expected = np.array([expected_transfer_ns(ref, op, link, size, float(m))
                                         for m in m_call[link_ok]])
                    ratio = float(np.median(t_call[link_ok] / expected))
                    exp_med = float(np.median(expected))
                    excess = float(np.median((t_call[link_ok] - expected) * calls[link_ok])) / 1e6
                    where = f"{domain.upper()} {OP_NAMES.get(op, op)} {_mb(m_med)} on {LINK_NAMES.get(link, link)}"
                    text = (f"{where} {ratio:.1f}x its expected time (expected {exp_med / 1e6:.3g} ms, "
                            f"{_version(ref, curve)})")
                    out.append(Component(f"comm:{name}|{link}", "comm", ratio, ratio >= params.expected_comm_ratio,
                                         min(max(excess, 0.0), exposed_ms), text))
    return out


def _version(ref: ReferenceModels | None, curve: CollectiveCurve) -> str:
    v = ref.version if ref is not None else 0
    return f"fleet curve v{v}, group of {curve.group_size}"


def _compute(frame: Frame, ref: ReferenceModels | None, device_kind: str, params: Params, state: ExpectedState,
             learn: bool) -> list[Component]:
    rows = frame.kernel_rows()
    if rows is None or not device_kind:
        return []
    world = frame.seen.size
    out: list[Component] = []
    sel = (rows.total_ns > 0) & (rows.rank < world) & (rows.flops > 0)
    for key, r in rows.by_name(rows.key, sel):
        rate = rows.flops[r] / rows.total_ns[r] * 1e9
        value = float(np.median(rate))
        if learn:
            got = state.learned_flops.setdefault((key, device_kind), [])
            got.append(value)
            del got[:-LEARN_KEEP]
        bench: KernelBench | None = ref.kernel_bench(key, device_kind) if ref is not None else None
        if bench is None or bench.source != "fleet" or bench.p50 <= 0:
            continue  # no benchmark, or only the vendor's peak: a new device kind is not judged on a prior
        ratio = value / bench.p50
        below = ratio <= params.expected_compute_ratio and value < bench.p10
        flops = rows.flops[r]
        excess = float(np.median(rows.total_ns[r] - flops / bench.p50 * 1e9)) / 1e6
        text = (f"{key} at {ratio:.2f}x the fleet's FLOP/s on {device_kind} (p50 {bench.p50 / 1e12:.0f} TFLOP/s, "
                f"p10 {bench.p10 / 1e12:.0f}, {bench.jobs} jobs)")
        out.append(Component(f"compute:{key}", "compute", ratio, below, max(excess, 0.0), text))
    return out


def evaluate(frame: Frame, topo: ReportedLayout, state: ExpectedState, params: Params, ref: ReferenceModels | None,
             device_kind: str) -> tuple[ExpectedState, list[Finding]]:
    """One released frame; `ref`: the fleet's reference models (None: none yet), `device_kind`: the job's
    devices' kind from their samples ("" : not known yet)."""
    if not frame.seen.any():
        return state, []
    state.frames += 1
    if state.frames <= params.expected_warmup_steps or not frame.kernels or topo.world == 0:
        return state, []
    learn = True
    comps = _comm(frame, topo, ref, params, state, learn) + _compute(frame, ref, device_kind, params, state, learn)
    for c in comps:
        if c.name in state.cleared:
            continue
        flags = state.flagged.setdefault(c.name, [])
        if c.name in state.below:  # after its verdict: its recent frames, to resolve once the job is fixed
            flags.append(c.below)
            del flags[:-params.expected_steps]
            continue
        if state.decided or _closed(state, c.kind, params):
            continue  # past `expected_decide_by`: no new verdict
        flags.append(c.below)
        state.judged.setdefault(c.name, []).append(c.ratio)
        if len(flags) >= params.expected_steps:  # the component's verdict
            if sum(flags) >= params.expected_share * len(flags):
                state.below.append(c.name)
                state.below_frame = state.below_frame or state.frames
            else:
                state.cleared.append(c.name)
    first = getattr(state, "first_judged", None)
    if first is None:  # a snapshot from before the field
        first = state.first_judged = {}
    for c in comps:
        first.setdefault(c.kind, state.frames)
    if _decided(state, params):
        state.decided = True
    now_below = [c for c in comps if c.name in state.below
                 and sum(state.flagged[c.name][-params.expected_steps:]) >= params.expected_share
                 * len(state.flagged[c.name][-params.expected_steps:])]
    if not now_below:
        return state, []
    return state, [_finding(frame, now_below, params)]


def _closed(state: ExpectedState, kind: str, params: Params) -> bool:
    """Whether the verdicts of a kind of component ("comm", "compute") are over: `expected_decide_by` frames
    from the job's start, counted from the first frame the fleet had a reference for that kind. A fleet that
    just started (a fresh worker, the first jobs of a kind) has no models for a job's first frames, and those
    frames may reach the engine in one backlog (the job's device kind, which its kernels are judged by, with
    them): the window then opens when the models come, so a job slow from its start is still found."""
    first = state.first_judged.get(kind)
    return first is not None and state.frames - first + 1 > params.expected_decide_by - params.expected_warmup_steps


def _decided(state: ExpectedState, params: Params) -> bool:
    """No verdict to come: every kind the job shows (collectives; FLOP-counted kernels on a known device
    kind) past its window (`_closed`: a kind with no reference yet is still open), or
    `NO_REFERENCE_DECIDE_BY` x `expected_decide_by` frames from the job's start."""
    kinds = shown(state)
    if kinds and all(_closed(state, kind, params) for kind in kinds):
        return True
    return state.frames >= NO_REFERENCE_DECIDE_BY * params.expected_decide_by


def _finding(frame: Frame, below: list[Component], params: Params) -> Finding:
    """One job finding naming the component that costs the step most, the others in its evidence."""
    lead = max(below, key=lambda c: c.excess_ms)
    durations = frame.duration_ms[frame.seen]
    step_ms = float(np.median(durations)) if durations.size else math.nan
    excess = sum(c.excess_ms for c in below)
    expected_step = max(step_ms - excess, 0.0)
    network = lead.kind == "comm"
    advice = NETWORK if network else COMPUTE
    more = f" (and {len(below) - 1} more)" if len(below) > 1 else ""
    summary = f"below the fleet: {lead.text}{more}; step {step_ms / 1e3:.3g} s, expected {expected_step / 1e3:.3g} s"
    evidence: dict[str, float] = {"step_ms": round(step_ms, 3), "expected_step_ms": round(expected_step, 3),
                                  "components_below": float(len(below))}
    for c in below[:8]:
        evidence[f"ratio:{c.name}"] = round(c.ratio, 3)
    return Finding(
        rule="BELOW_EXPECTED", key="expected", scope="job", step=frame.step, summary=summary, severity="critical",
        metric=lead.name.split(":", 1)[1].split("|", 1)[0], observed=round(lead.ratio, 3), expected=1.0,
        threshold=params.expected_comm_ratio if network else params.expected_compute_ratio, unit="x",
        evidence=evidence, cause=("network: " if network else "compute: ") + advice.cause,
        suggestion=advice.suggestion, open_after=1, resolve_after=params.resolve_after_steps)


# --- fleet-wide drift ---------------------------------------------------------------------------------------
def classes(state: ExpectedState, device_kind: str) -> tuple[set[str], set[str]]:
    """(judged, below): the link classes ("link:inter") and device kinds ("device:<kind>") a job has a verdict
    on, and those it was found below on."""
    def of(name: str) -> str:
        return f"link:{name.rsplit('|', 1)[1]}" if name.startswith("comm:") and "|" in name \
            else f"device:{device_kind or '?'}"
    below = {of(n) for n in state.below}
    return {of(n) for n in state.cleared} | below, below


def drift_findings(judged: dict[str, set[str]], below: dict[str, set[str]], round_: int, min_jobs: int,
                   share: float, resolve_after: int) -> list[Finding]:
    """One fleet finding per link class or device kind on which `min_jobs` running jobs or more, and more than
    `share` of those judged on it, are below the fleet's reference together (`judged`/`below`: class -> jobs)."""
    out = []
    for cls, jobs in sorted(below.items()):
        n, of = len(jobs), len(judged.get(cls, jobs))
        if n < min_jobs or n <= share * of:
            continue
        kind, name = cls.split(":", 1)
        network = kind == "link"
        advice = NETWORK if network else COMPUTE
        where = f"on {LINK_NAMES.get(name, name)}" if network else f"on {name} devices"
        listed = ", ".join(sorted(jobs)[:10]) + (f" and {n - 10} more" if n > 10 else "")
        out.append(Finding(
            rule="BELOW_EXPECTED", key=f"drift:{cls}", scope="link" if network else "device", step=round_,
            summary=f"fleet-wide drift: {n} of {of} running jobs {where} below the fleet's reference together "
                    f"({listed}): the fleet, not one job", severity="critical", metric="fleet_drift",
            link=name if network else None, observed=float(n), expected=float(of), threshold=share, unit="jobs",
            evidence={"jobs_below": float(n), "jobs_judged": float(of)},
            cause=("network: fleet-wide, " if network else "compute: fleet-wide, ") + advice.cause,
            suggestion="what changed for every job at once (driver/firmware/NCCL rollout, fabric or switch "
                       "configuration, power policy); " + advice.suggestion,
            open_after=1, resolve_after=resolve_after))
    return out


# --- what the fleet learns ---------------------------------------------------------------------------------
def fit_reference(comm: dict[tuple[str, str, int], list[list[tuple[float, float]]]],
                  flops: dict[tuple[str, str], list[float]], *, version: int = 1, min_jobs: int = 1,
                  stack: str = "") -> ReferenceModels:
    """Reference models from what healthy jobs showed: `comm` per curve a list of jobs' points, `flops` per
    (kernel key, device kind) one figure per job (its median). A curve or benchmark from fewer than
    `min_jobs` jobs is left out (one job is its own benchmark). The fits are the model's own
    (`streams.model.collectives.fit_curves`: paper 001's curve, each group size learning from the others;
    `streams.model.kernels.fit_kernel_bench`), the same as `steplens model fit` runs on the history."""
    samples = {key: (np.array([p[0] for job in jobs for p in job]), np.array([p[1] for job in jobs for p in job]))
               for key, jobs in sorted(comm.items()) if len(jobs) >= min_jobs and any(jobs)}
    curves = fit_curves(samples) if samples else ()
    rows = [KernelFlops(job=f"job-{i}", key=key, device_kind=kind, flops_per_s=value)
            for (key, kind), values in sorted(flops.items()) if len(values) >= min_jobs
            for i, value in enumerate(values)]
    kernels = fit_kernel_bench(rows, with_classes=False)
    return ReferenceModels(version=version, stack=stack, curves=tuple(curves), kernels=kernels)


def _fleet_bench(ref: ReferenceModels, key: tuple[str, str]) -> bool:
    bench = ref.kernel_bench(*key)
    return bench is not None and bench.source == "fleet"


def shown(state: ExpectedState) -> set[str]:
    """The kinds of component the job shows: collectives, FLOP-counted kernels on a known device kind."""
    return set(getattr(state, "first_judged", None) or ()) | {
        kind for kind, figures in (("comm", state.learned_comm), ("compute", state.learned_flops)) if figures}


def judging(state: ExpectedState) -> frozenset[str]:
    """The kinds of component a job shows, has no verdict on yet and may still get one on."""
    if state.decided:
        return frozenset()
    done = {name.split(":", 1)[0] for name in (*state.below, *state.cleared)}
    return frozenset(shown(state) - done)


@dataclass(slots=True)
class FleetLearner:
    """What the fleet learned from its healthy jobs, refitted at a bounded rate (FleetEngine).

    Per job its latest figures (`ExpectedState.learned_*`): a job is (re)taken while it has no open
    incident and no BELOW_EXPECTED candidate, and dropped from the pool as soon as it has one: a job
    under an incident never teaches the fleet. `base`: the reference loaded at start (an export); what
    the fleet learned overrides it where it has `min_jobs` jobs."""

    base: ReferenceModels | None = None
    comm: dict[str, dict[tuple[str, str, int], list[tuple[float, float]]]] = field(default_factory=dict)
    flops: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    refit_ns: int = 0
    version: int = 0
    current: ReferenceModels | None = None
    jobs_kept: int = 512  # jobs whose figures the pool keeps (the newest)

    def take(self, job: str, state: ExpectedState, healthy: bool, judging: frozenset[str] = frozenset()) -> None:
        """`judging`: the kinds of component ("comm", "compute") the job is still being judged on. What it
        shows of those is no reference for its own verdict (a drift of many jobs would teach the fleet its
        own slowness): it adds only curves and kernels the fleet has no model for yet (a fleet that just
        started learns from its first jobs), and keeps what it gave before, until its verdict is in."""
        if not healthy:
            self.comm.pop(job, None)
            self.flops.pop(job, None)
            return
        ref = self.reference() if judging else None
        if state.learned_comm:
            comm = {k: v[-LEARN_KEEP:] for k, v in state.learned_comm.items()}
            if "comm" in judging:
                comm = {**{k: v for k, v in comm.items() if ref is None or ref.curve(k[0], k[1], k[2]) is None},
                        **self.comm.get(job, {})}
            self.comm[job] = comm
        if state.learned_flops:
            flops = {k: float(np.median(v)) for k, v in state.learned_flops.items() if v}
            if "compute" in judging:
                flops = {**{k: v for k, v in flops.items() if ref is None or not _fleet_bench(ref, k)},
                         **self.flops.get(job, {})}
            self.flops[job] = flops
        for pool in (self.comm, self.flops):
            while len(pool) > self.jobs_kept:
                del pool[next(iter(pool))]

    def reference(self) -> ReferenceModels | None:
        return self.current if self.current is not None else self.base

    def refit(self, min_jobs: int) -> ReferenceModels | None:
        comm: dict[tuple[str, str, int], list[list[tuple[float, float]]]] = {}
        for per_job in self.comm.values():
            for k, pts in per_job.items():
                comm.setdefault(k, []).append(pts)
        flops: dict[tuple[str, str], list[float]] = {}
        for per_job_f in self.flops.values():
            for kf, v in per_job_f.items():
                flops.setdefault(kf, []).append(v)
        learned = fit_reference(comm, flops, min_jobs=max(1, min_jobs))
        if not learned.curves and not learned.kernels:
            self.current = None
            return self.reference()
        base = self.base
        mine_c = {(c.op, c.link, c.group_size) for c in learned.curves}
        mine_k = {(k.key, k.device_kind) for k in learned.kernels}
        curves = learned.curves + tuple(c for c in (base.curves if base else ())
                                        if (c.op, c.link, c.group_size) not in mine_c)
        kernels = learned.kernels + tuple(k for k in (base.kernels if base else ())
                                          if (k.key, k.device_kind) not in mine_k)
        self.version += 1
        self.current = ReferenceModels(version=(base.version if base else 0) * 1000 + self.version,
                                       stack=base.stack if base else "", curves=curves, kernels=kernels)
        return self.current
