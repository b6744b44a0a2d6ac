"""StepFrames to wire bytes: step, kernel_summary and device events, built from columns with orjson.

Dataclass construction and validation per event would dominate at 10,240 ranks, so the
simulator writes the contract's JSON directly from numpy columns (floats rounded to what a
hook would report); tests decode samples of every type through `schemas.decode` so the bytes
stay in contract. Per rank, the identity part (job, rank, world, host, device, domains) is
built once per job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import orjson

from producers.simulator.conditions import DEVICE_MEM_GB
from producers.simulator.model import BUSY_PHASES
from schemas import Domain, Phases, StepEvent
from schemas.version import CONTRACT_VERSION

if TYPE_CHECKING:  # fleet.py builds its typed events with this module
    from producers.simulator.fleet import FleetJob, StepFrame

Kind = Literal["step", "kernel_summary", "device"]
DEVICE_MEMORY_BYTES = round(DEVICE_MEM_GB * 2**30)  # what a step's allocator statistics are a share of


@dataclass(frozen=True, slots=True)
class WireEvent:
    kind: Kind
    key: bytes
    value: bytes


class FrameEncoder:
    """Encodes one job's frames; `include` picks the event types (all three by default)."""

    def __init__(self, job: FleetJob, include: tuple[Kind, ...] = ("step", "kernel_summary", "device")) -> None:
        self.job = job
        self.include = include
        topo = job.topology
        world = topo.world
        sizes = {d: topo.domain_size(d) for d in topo.group_ids}
        gids = {d: a.tolist() for d, a in topo.group_ids.items()}
        idx = {d: a.tolist() for d, a in topo.group_index.items()}
        hosts = topo.host_ids.tolist()
        dph = topo.devices_per_host
        names = job.host_names
        launch = {"attempt": job.attempt} if job.attempt else {}  # contract 1.4; attempt 0 is the 1.3 form
        self._ident: list[dict[str, Any]] = [
            {"job": job.job_id, "rank": r, "world": world, "host": names[hosts[r]], "device": r % dph,
             "domains": {d: {"group": gids[d][r], "size": sizes[d], "index": idx[d][r]} for d in gids}, **launch}
            for r in range(world)
        ]
        self._keys = [f"{job.job_id}/{r}".encode() for r in range(world)]
        self._dev_keys = [f"{names[hosts[r]]}/{r % dph}".encode() for r in range(world)]
        self._static: list[dict[str, Any]] = []
        for k in job.plan.kinds:
            # the shape is in the key ("F2:MxNxK"); repeating it as a dict would cost ~45 B per entry
            entry: dict[str, Any] = {"key": k.key, "cat": k.cat, "metric": k.metric}
            if k.op is not None:
                entry.update(op=k.op, domain=k.domain, group_size=k.group_size)
            if k.direction is not None:
                entry["direction"] = k.direction
            self._static.append(entry)
        self._flops = np.array([k.flops for k in job.plan.kinds])[:, None]
        self._compute = np.array([k.cat == "compute" for k in job.plan.kinds])
        # launch latency (R8) rides on the forward compute aggregates only: the same host thread
        # launches the backward kernels, and repeating it on every entry would cost ~40 B each
        self._launch = np.array([k.cat == "compute" and k.phase == "forward" for k in job.plan.kinds])
        self._has_bytes = np.array([k.cat in ("comm", "memcpy") for k in job.plan.kinds])
        model = job.model
        self._samples = model.micro_batch * model.microbatches
        self._tokens = self._samples * model.seq
        self._peak = job.hardware.peak_flops
        self._flops_rank = job.plan.model_flops_per_rank
        self._device_kind = job.hardware.device_kind
        self._clock = job.clock_offset_ns.tolist()  # each host's own clock (clock_offset) ...
        self._sampled = (job.clock_offset_ns + job.sampler_phase_ns).tolist()  # ... and its agent's phase

    def encode(self, frame: StepFrame) -> Iterator[WireEvent]:
        """Every event of one frame, step and summary per rank first, then the device ticks."""
        if frame.completed and ("step" in self.include or "kernel_summary" in self.include):
            yield from self._rank_events(frame)
        if "device" in self.include:
            yield from self._device_events(frame)

    def step_events(self, frame: StepFrame) -> list[StepEvent]:
        """The frame's step events as typed StepEvents: the fields `encode` sends, without a JSON round
        trip (a typed consumer, `FleetJob.iter_steps`, builds 10× faster than it would decode)."""
        docs: list[dict[str, Any]] = []
        if frame.completed:
            for _ in self._rank_events(frame, docs):
                pass
        return [StepEvent(job=d["job"], rank=d["rank"], world=d["world"], host=d["host"], device=d["device"],
                          domains={n: Domain(**dom) for n, dom in d["domains"].items()}, step=d["step"],
                          start_ns=d["start_ns"], end_ns=d["end_ns"], phases=Phases(**d["phases"]),
                          gc_count=d["gc_count"], batch_size=d["batch_size"], samples=d["samples"],
                          tokens=d["tokens"], flops=d["flops"], peak_flops=d["peak_flops"], attempt=d.get("attempt", 0),
                          mem_peak_bytes=d.get("mem_peak_bytes"), mem_reserved_bytes=d.get("mem_reserved_bytes"),
                          mem_capacity_bytes=d.get("mem_capacity_bytes"))
                for d in docs]

    def _rank_events(self, frame: StepFrame, typed: list[dict[str, Any]] | None = None) -> Iterator[WireEvent]:
        """Step and kernel_summary events per reporting rank; with `typed`, the step documents go there
        instead (and no summary is built)."""
        v = CONTRACT_VERSION
        phases = {p: np.round(frame.phases[p], 3).tolist() for p in (*BUSY_PHASES, "comm_exposed_ms")}
        gc = frame.gc_count.tolist()
        reporting = np.flatnonzero(frame.reporting).tolist()
        want_steps = "step" in self.include or typed is not None
        want_summary = "kernel_summary" in self.include and typed is None
        if want_summary:
            count = frame.k_count.T.tolist()
            total = np.rint(frame.k_total_ns).astype(np.int64).T.tolist()
            kmax = np.rint(frame.k_max_ns).astype(np.int64).T.tolist()
            kernel_flops = frame.k_count * self._flops
            if frame.tokens_mul is not None:  # a replica's FLOPs follow its tokens (variable_length)
                kernel_flops = kernel_flops * frame.tokens_mul
            flops = kernel_flops.T.tolist()
            nbytes = np.rint(frame.k_bytes).astype(np.int64).T.tolist()
            lmean = np.round(frame.launch_mean_us, 2).tolist()
            lmad = np.round(frame.launch_mad_us, 2).tolist()
            other = np.rint(frame.other_ns).astype(np.int64).tolist()
            other_count = self.job.plan.other_count
        names = (*BUSY_PHASES, "comm_exposed_ms")
        offset = self._clock
        if frame.tokens_mul is not None:
            tokens = np.rint(self._tokens * frame.tokens_mul).astype(np.int64).tolist()
            step_flops = (self._flops_rank * frame.tokens_mul).tolist()
        else:
            tokens, step_flops = [self._tokens] * len(offset), [self._flops_rank] * len(offset)
        memory = None
        if frame.mem_peak_pct is not None and frame.mem_reserved_pct is not None:
            memory = (np.rint(frame.mem_peak_pct / 100.0 * DEVICE_MEMORY_BYTES).astype(np.int64).tolist(),
                      np.rint(frame.mem_reserved_pct / 100.0 * DEVICE_MEMORY_BYTES).astype(np.int64).tolist())
        for r in reporting:
            ident = self._ident[r]
            if want_steps:
                step = {"type": "step", "v": v, **ident, "step": frame.step, "start_ns": frame.start_ns + offset[r],
                        "end_ns": frame.end_ns + offset[r], "phases": {p: phases[p][r] for p in names},
                        "gc_count": gc[r], "batch_size": self.job.model.micro_batch, "samples": self._samples,
                        "tokens": tokens[r], "flops": step_flops[r], "peak_flops": self._peak}
                if memory is not None:
                    step["mem_peak_bytes"], step["mem_reserved_bytes"] = memory[0][r], memory[1][r]
                    step["mem_capacity_bytes"] = DEVICE_MEMORY_BYTES
                if typed is not None:
                    typed.append(step)
                    continue
                yield WireEvent("step", self._keys[r], orjson.dumps(step))
            if want_summary:
                entries = []
                c_r, t_r, m_r, f_r, b_r = count[r], total[r], kmax[r], flops[r], nbytes[r]
                for i, static in enumerate(self._static):
                    if c_r[i] <= 0:
                        continue
                    e = {**static, "count": c_r[i], "total_ns": t_r[i], "max_ns": min(m_r[i], t_r[i])}
                    if self._compute[i]:
                        e["flops"] = f_r[i]
                    if self._launch[i]:
                        e["launch_mean_us"] = lmean[r]
                        e["launch_mad_us"] = lmad[r]
                    if self._has_bytes[i]:
                        e["bytes"] = b_r[i]
                    entries.append(e)
                summary = {"type": "kernel_summary", "v": v, **ident, "step": frame.step, "entries": entries,
                           "other_count": other_count, "other_ns": other[r]}
                yield WireEvent("kernel_summary", self._keys[r], orjson.dumps(summary))

    def _device_events(self, frame: StepFrame) -> Iterator[WireEvent]:
        v = CONTRACT_VERSION
        offset = self._sampled
        for tick in frame.ticks:
            cols = {name: np.round(getattr(tick, name), 1).tolist() for name in (
                "power_w", "temp_c", "aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct", "freq_mhz")}
            for r in np.flatnonzero(tick.reporting).tolist():
                ident = self._ident[r]
                sample = {"type": "device", "v": v, "host": ident["host"], "device": ident["device"],
                          "ts_ns": tick.ts_ns + offset[r], "job": self.job.job_id, "rank": r,
                          "device_kind": self._device_kind,
                          **{name: col[r] for name, col in cols.items()}}
                yield WireEvent("device", self._dev_keys[r], orjson.dumps(sample))


def bytes_per_rank_step(job: FleetJob, steps: int | None = None) -> dict[str, float]:
    """Mean JSON bytes per rank-step of each always-on stream, and their sum (the ≤ 4 KB budget),
    over the steady-state steps (warm-up steps are longer and carry more device samples).

    Device samples tick at 1 Hz, so their share per rank-step is one sample per second of step:
    `total_at_1_step_per_s` is the budget's case (one sample per step)."""
    enc = FrameEncoder(job)
    totals: dict[str, int] = {"step": 0, "kernel_summary": 0, "device": 0}
    rank_steps = samples = 0
    skip = job.noise.warmup_steps
    for n, frame in enumerate(job.iter_frames()):
        if steps is not None and n >= skip + steps:
            break
        if n < skip:
            continue
        rank_steps += int(frame.reporting.sum())
        for ev in enc.encode(frame):
            totals[ev.kind] += len(ev.value)
            samples += ev.kind == "device"
    out = {k: v / max(1, rank_steps) for k, v in totals.items()}
    out["total"] = sum(out.values())
    out["device_sample"] = totals["device"] / max(1, samples)
    out["device_samples_per_rank_step"] = samples / max(1, rank_steps)
    out["total_at_1_step_per_s"] = out["step"] + out["kernel_summary"] + out["device_sample"]
    return out
