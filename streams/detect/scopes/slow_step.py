"""Slow step (job scope): a step well above the job's own robust history, change-point aware.

Baseline = median of the last `baseline_steps` normal job step times (after `warmup_steps`);
a step is slow when it exceeds BOTH `slow_step_ratio` x baseline (Hermes' 10 %) and
baseline + `slow_step_mad_z` robust sigmas (1.4826 MAD), so a jittery but healthy job stays
quiet. Slow steps do not enter the baseline. When a run of slow steps lasts
`shift_steps` and is itself stable (spread below `shift_spread`), the job has shifted for
good (a new dataset, a changed config): the run stays ONE incident, resolved with
`shift=1` in its evidence, and the run's values become the new baseline (Greyhound watches
iteration time for such change points; this is the cheap, deterministic version). A run
caused by GC pauses is never a shift: a GC storm is a fault, not a new normal.
An incident opens after `slow_step_open_after` slow steps (one clean step between them allowed,
a flapping fault): one long step on its own
(an evaluation step shows in forward, a checkpoint in inter-step CPU) is part of healthy
training, not a slow step, and never enters the baseline either. A long step whose growth is
GC pauses is a finding at once (GC is never a planned step kind). Periodic work that lasts
longer than a step (an asynchronous checkpoint's write slowing the steps after it) is the job's
rhythm (`rhythm.py`): its episodes are learned, not alarmed, and one much slower than its own
past is a finding of its own (`state.planned` tells the engine a step was planned work, so the
rules on the same step kinds, R3 and R10, stay quiet on it too).

Communication as the cause: the step's exposed communication (`comm_exposed_ms`) is mostly
waiting for a late rank, a symptom, so it is never the cause by itself. The kernel summaries
tell the collective's own share apart: per rank the step's collective device time and bytes,
taken at the least time over ranks (every rank waits in a collective for the slowest one but
that rank itself: the least is the transfer, not a wait for a straggler) and the median bytes. When that
transfer time grew more than any phase, the collectives themselves got slower: `comm_volume`
when their bytes grew too (uncompressed or fp32 gradients, a changed bucket or sharding
config; spec §4 "uncompressed gradients: comm > 40 % of step"), else `comm_bandwidth` (every
group's links slower at the same traffic: fabric-wide, not one link or group) when the step
before was slow too, `comm_stall` when it was not (the whole job held up inside a collective
for one step: spec §4 timing conflicts). The incident names the cause most of its steps name
(`incidents/book.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.columns import PHASES
from streams.advice import advise
from streams.detect.scopes import rhythm
from streams.detect.scopes.finding import Finding
from streams.detect.windows.comm_columns import comm_columns
from streams.detect.windows.step_frames import Frame

IGNORED_CAUSES = ("comm_exposed_ms",)  # waiting is the symptom, not the cause
COMM_CAUSES = ("comm_volume", "comm_bandwidth", "comm_stall")  # the collectives' own transfer grew
# the growth of the step kinds healthy training has: an evaluation step (forward), a checkpoint
# (inter-step CPU), a slow batch (data). Slow steps of any other cause that come and go, a few steps
# apart, are one intermittent fault (spec §4 timing conflicts: 1-3 s stalls): `stall_gap_steps`
PLANNED_CAUSES = ("forward_ms", "interstep_cpu_ms", "data_ms")


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    warmup_steps: int
    baseline_steps: int
    slow_step_ratio: float
    slow_step_mad_z: float
    slow_step_open_after: int
    shift_steps: int
    shift_spread: float
    comm_volume_ratio: float
    stall_gap_steps: int
    resolve_after_steps: int
    rhythm_gap_steps: int
    rhythm_active_share: float
    rhythm_min_period: int
    rhythm_slower_ratio: float
    rhythm_tail_steps: int
    rhythm_tail_ratio: float
    rhythm_tail_spike_ratio: float


@dataclass(slots=True)
class SlowStepState:
    seen: int = 0
    history: list[float] = field(default_factory=list)
    phase_history: list[list[float]] = field(default_factory=list)  # per step: phase maxima
    run: list[float] = field(default_factory=list)
    shifts: int = 0
    comm_history: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # comm_per_step per step
    rhythm: rhythm.RhythmState = field(default_factory=rhythm.RhythmState)
    planned: bool = False  # the last step evaluated was the job's planned periodic work (rhythm.py)
    history_steps: list[int] = field(default_factory=list)  # the step of each `history` value


def comm_per_step(frame: Frame) -> dict[str, tuple[float, float]]:
    """Per collective key: (transfer time in ms, bytes) of the step, from the kernel summaries.

    The time is the minimum over the ranks that reported the key: in synchronous training every
    rank waits in the collective for the slowest one except that rank itself, so the least time
    is the transfer. The bytes at their median over those ranks (0 where a rank gave none).
    Empty when no rank sent a summary.
    """
    out: dict[str, tuple[float, float]] = {}
    for key, col in comm_columns(frame).items():
        sel = np.isfinite(col.total_ns)
        out[key] = (float(col.total_ns[sel].min()) / 1e6, float(np.median(np.nan_to_num(col.nbytes[sel]))))
    return out


def evaluate(frame: Frame, state: SlowStepState, params: Params) -> tuple[SlowStepState, list[Finding]]:
    if not frame.seen.any():
        return state, []
    step_ms = float(np.nanmax(frame.duration_ms))
    phase_max = [float(v) if np.isfinite(v) else 0.0 for v in np.nanmax(np.where(
        np.isfinite(frame.phases), frame.phases, -np.inf), axis=1)]
    comm = comm_per_step(frame)
    state.seen += 1
    state.planned = False
    if state.seen <= params.warmup_steps or len(state.history) < 2:
        _remember(state, frame.step, step_ms, phase_max, comm, params)
        return state, []
    hist = np.asarray(state.history)
    baseline = float(np.median(hist))
    sigma = 1.4826 * float(np.median(np.abs(hist - baseline)))
    threshold = max(params.slow_step_ratio * baseline, baseline + params.slow_step_mad_z * sigma)
    beat = getattr(state, "rhythm", None)  # a snapshot from before the rhythm existed has none
    if beat is None:
        beat = state.rhythm = rhythm.RhythmState()
    median_phase = np.median(np.asarray(state.phase_history), axis=0)
    grown = {name: phase_max[i] - float(median_phase[i]) for i, name in enumerate(PHASES)}
    planned_grown = {name: grown[name] for name in PLANNED_CAUSES}
    if step_ms <= threshold:
        state.run.clear()
        judged = rhythm.observe(beat, frame.step, False, None, planned_grown, step_ms, baseline, params)
        if judged.verdict == "slower":  # a step of a too slow checkpoint's write, under the slow bar
            return state, [_slower_rhythm(frame.step, step_ms, baseline, threshold, beat, judged, params)]
        state.planned = judged.verdict == "planned"
        if not state.planned:  # the job's periodic work never enters the baseline
            _remember(state, frame.step, step_ms, phase_max, comm, params)
        return state, []
    excess = {name: v for name, v in grown.items() if name not in IGNORED_CAUSES}
    evidence: dict[str, float] = {}
    mid = baseline_mid_step(state)
    if mid is not None:
        evidence["baseline_mid_step"] = float(mid)  # join's cue (it takes it out): culprits after the baseline
    comm_cause, comm_key = _comm_cause(state, comm, params, evidence)
    if comm_cause is not None:
        excess[comm_cause] = evidence["excess_comm_transfer_ms"]
    cause = max(excess, key=lambda k: excess[k]) if excess and max(excess.values()) > 0 else None
    judged = rhythm.observe(beat, frame.step, True, cause, planned_grown, step_ms, baseline, params)
    if judged.verdict == "planned":  # the job's periodic work: neither a slow step nor the baseline's
        state.planned = True
        return state, []
    if judged.verdict == "slower":
        return state, [_slower_rhythm(frame.step, step_ms, baseline, threshold, beat, judged, params)]
    state.run.append(step_ms)
    advice = advise(cause)
    ratio = step_ms / baseline
    evidence.update({f"excess_{k}": round(v, 3) for k, v in excess.items() if v > 0 and k != comm_cause})
    shifted = cause != "gc_ms" and _is_shift(state, params)  # GC pauses are never a healthy new normal
    if shifted:
        evidence["shift"] = 1.0
        state.shifts += 1
        state.history = list(state.run[-params.shift_steps:])
        state.history_steps = list(range(frame.step - len(state.history) + 1, frame.step + 1))
        state.run.clear()
    finding = Finding(
        rule="SLOW_STEP", key="job", scope="job", step=frame.step,
        summary=f"step {frame.step} took {step_ms:.0f} ms, {ratio:.2f}x the {baseline:.0f} ms baseline"
        + (f"; largest growth in {_growth(cause, excess[cause], evidence, comm_key)}" if cause else "")
        + ("; the job has shifted to a new baseline" if shifted else ""),
        severity="critical" if ratio > 1.5 else "warning", metric="step_ms",
        observed=step_ms, expected=baseline, threshold=threshold, unit="ms", evidence=evidence,
        cause_phase=cause, cause=advice.cause, suggestion=advice.suggestion,
        open_after=1 if cause == "gc_ms" else params.slow_step_open_after, resolve_after=params.resolve_after_steps,
        candidate_gap=1 if cause in PLANNED_CAUSES or cause == "gc_ms" else params.stall_gap_steps,
    )
    if shifted:
        finding.evidence["resolve_now"] = 1.0
    return state, [finding]


def _slower_rhythm(step: int, step_ms: float, baseline: float, threshold: float, beat: rhythm.RhythmState,
                   judged: rhythm.Judgement, params: Params) -> Finding:
    """A finding for an episode of the job's periodic work much slower than its own past: it opens at once
    (the rhythm is known, the episode's cost is measured), and it is held a period and more so that the
    next slow episode of the same rhythm continues it."""
    advice = advise("rhythm_slower")
    cause = beat.current.cause if beat.current is not None else None
    factor = judged.excess_ms / judged.past_excess_ms if judged.past_excess_ms > 0 else float("inf")
    return Finding(
        rule="SLOW_STEP", key="job", scope="job", step=step,
        summary=f"step {step}: the work that recurs every {judged.period} steps ({cause}) has cost "
                f"+{judged.excess_ms:.0f} ms, {factor:.1f}x its past (+{judged.past_excess_ms:.0f} ms)",
        severity="warning", metric="step_ms", observed=step_ms, expected=baseline, threshold=threshold, unit="ms",
        evidence={"rhythm_period": float(judged.period), "rhythm_excess_ms": round(judged.excess_ms, 3),
                  "rhythm_past_excess_ms": round(judged.past_excess_ms, 3)},
        cause_phase=cause, cause=advice.cause, suggestion=advice.suggestion,
        open_after=1, resolve_after=params.resolve_after_steps, candidate_gap=params.rhythm_gap_steps,
    )


def _is_shift(state: SlowStepState, params: Params) -> bool:
    if len(state.run) < params.shift_steps:
        return False
    tail = np.asarray(state.run[-params.shift_steps:])
    med = float(np.median(tail))
    return float(np.median(np.abs(tail - med))) / med < params.shift_spread


def _growth(cause: str, excess_ms: float, evidence: dict[str, float], key: str | None) -> str:
    if cause not in COMM_CAUSES:
        return f"{cause} (+{excess_ms:.0f} ms)"
    text = f"{key} transfer time (+{excess_ms:.0f} ms, x{evidence.get('comm_time_ratio', float('nan')):.1f}"
    if "comm_bytes_ratio" in evidence:
        text += f" at x{evidence['comm_bytes_ratio']:.1f} the bytes"
    return text + ")"


def _comm_cause(state: SlowStepState, comm: dict[str, tuple[float, float]], params: Params,
                evidence: dict[str, float]) -> tuple[str | None, str | None]:
    """(a COMM_CAUSES cause or None, the collective key) for the key whose transfer time grew most
    against its history; its figures go into `evidence` (transfer ms excess, time and bytes ratios).
    No cause when no key grew or there is no history."""
    best: tuple[float, str, float, float, float] | None = None  # (excess ms, key, time ratio, now bytes, base)
    for key, (ms, nbytes) in comm.items():
        known = [h[key] for h in state.comm_history if key in h and h[key][0] > 0]
        if len(known) < 2 or not np.isfinite(ms):
            continue
        base_ms = float(np.median([k[0] for k in known]))
        base_bytes = float(np.median([k[1] for k in known]))
        if best is None or ms - base_ms > best[0]:
            best = (ms - base_ms, key, ms / base_ms, nbytes, base_bytes)
    if best is None:
        return None, None
    excess, key, time_ratio, nbytes, base_bytes = best
    evidence["excess_comm_transfer_ms"] = round(excess, 3)
    evidence["comm_time_ratio"] = round(time_ratio, 4)
    if base_bytes > 0:
        evidence["comm_bytes_ratio"] = round(nbytes / base_bytes, 4)
    if excess <= 0:
        return None, key
    if base_bytes > 0 and nbytes >= params.comm_volume_ratio * base_bytes:
        return "comm_volume", key
    # the same traffic taking longer: a lasting bandwidth loss, or (the step before was not slow) a stall
    return ("comm_bandwidth" if state.run else "comm_stall"), key  # `run`: the slow steps before this one


def _history_steps(state: SlowStepState) -> list[int]:
    steps: list[int] | None = getattr(state, "history_steps", None)  # a snapshot from before it has none
    if steps is None:
        steps = state.history_steps = []
    return steps


def baseline_mid_step(state: SlowStepState) -> int | None:
    """The step half of the baseline is older than (its steps' median): a slowdown that began after it is not
    in the baseline, however long ago it began (slow steps never enter it). None: not known."""
    steps = _history_steps(state)
    if not steps or len(steps) < len(state.history):
        return None
    return int(np.median(steps))


def _remember(state: SlowStepState, step: int, step_ms: float, phase_max: list[float],
              comm: dict[str, tuple[float, float]], params: Params) -> None:
    steps = _history_steps(state)
    steps.append(step)
    del steps[:-params.baseline_steps]
    state.history.append(step_ms)
    state.phase_history.append(phase_max)
    state.comm_history.append(comm)
    del state.history[:-params.baseline_steps]
    del state.phase_history[:-params.baseline_steps]
    del state.comm_history[:-params.baseline_steps]
