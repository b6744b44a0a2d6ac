"""Events to table rows: the pure part of the sink (no I/O, no clock).

Each `*_COLUMNS` constant is the column order of a table and each `*_row` function returns a
tuple in exactly that order, with values of the Python type both backends accept (int,
float, str, None, list, datetime.date). `row_for` is the one place that says which table an
event type lands in.

Values that would not fit their column (a device id above 65535, a step above 2**64 - 1)
raise `RowError` naming the field, so the caller can dead-letter the event instead of
having the whole batch rejected by the database. The ranges are `schemas.bounds`, the ones
decoding enforces, so for a decoded event this is a second line of defence, not a filter.
Event types without a table raise `RowError` too (field ``type``): one mapping point,
one error type for the landing worker to dead-letter.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, NamedTuple

import orjson

from schemas import DOMAIN_TYPES, Incident, JobEvent, Phases, StepEvent, bounds
from schemas.action import MitigationAction
from schemas.control import ControlCommand
from schemas.device import DeviceSample
from schemas.kernel import KernelBatch
from schemas.kernel_summary import KernelSummary
from schemas.profile import ProfileReady

Row = tuple[Any, ...]

STEPS_TABLE = "steps"
INCIDENTS_TABLE = "incidents"
JOBS_TABLE = "jobs"
DEAD_LETTERS_TABLE = "dead_letters"

STEP_COLUMNS: tuple[str, ...] = (
    "job", "rank", "step", "world", "host", "device",
    *(f"{d}_group" for d in DOMAIN_TYPES), "pp_stage",
    "start_ns", "end_ns", "duration_ms",
    *Phases.NAMES,
    "gc_count", "batch_size", "samples", "tokens", "flops", "peak_flops",
    "profiling", "event_date", "ingested_ns", "attempt", "mem_peak_bytes", "mem_reserved_bytes",
    "mem_capacity_bytes",
)

INCIDENT_COLUMNS: tuple[str, ...] = (
    "incident_id", "job", "rule", "metric", "state", "severity", "scope", "summary",
    "domain", "group", "ranks", "host", "device", "step_first", "step_last",
    "observed", "expected", "threshold", "unit", "evidence_keys", "evidence_values",
    "cause", "suggestion", "detected_ns", "event_date",
)

JOB_COLUMNS: tuple[str, ...] = (
    "job", "phase", "world", "ts_ns", "parallel_keys", "parallel_values", "last_step", "model", "event_date",
    "attempt", "model_shape",
)

DEAD_LETTER_COLUMNS: tuple[str, ...] = (
    "topic", "partition", "offset", "key", "key_b64", "reason", "field",
    "payload_b64", "payload_bytes", "received_ns", "event_date",
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    STEPS_TABLE: STEP_COLUMNS,
    INCIDENTS_TABLE: INCIDENT_COLUMNS,
    JOBS_TABLE: JOB_COLUMNS,
    DEAD_LETTERS_TABLE: DEAD_LETTER_COLUMNS,
}

NO_GROUP = -1  # a rank outside a domain, an incident without a group or device

_EPOCH = dt.date(1970, 1, 1)
_LAST_DATE = dt.date(2149, 6, 6)  # ClickHouse Date is UInt16 days since the epoch

# Column ranges come from the contract's single source of bounds, so whatever decodes fits.
_UINT16 = bounds.UINT16
_UINT32 = bounds.UINT32
_UINT64 = bounds.UINT64
_INT16 = bounds.INT16
_INT32 = bounds.INT32
_INT64 = bounds.INT64


class RowError(ValueError):
    """An event's value does not fit its column; `field` names it (as in ContractError)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field '{field}': {problem}")
        self.field = field
        self.problem = problem


class TableRow(NamedTuple):
    table: str
    columns: tuple[str, ...]
    row: Row


def _fit(value: int, bounds: tuple[int, int], field: str) -> int:
    low, high = bounds
    if not low <= value <= high:
        raise RowError(field, f"{value} does not fit the column range [{low}, {high}]")
    return value


def _fit_opt(value: int | None, bounds: tuple[int, int], field: str) -> int | None:
    return None if value is None else _fit(value, bounds, field)


def event_date(ns: int) -> dt.date:
    """UTC day of an epoch-ns timestamp, clamped to ClickHouse's Date range (1970-01-01 .. 2149-06-06)."""
    day = _EPOCH + dt.timedelta(days=max(ns, 0) // 86_400_000_000_000)
    return min(day, _LAST_DATE)


def step_row(e: StepEvent, ingested_ns: int) -> Row:
    groups = []
    for name in DOMAIN_TYPES:
        dom = e.domains.get(name)
        groups.append(NO_GROUP if dom is None else _fit(dom.group, _INT32, f"domains.{name}.group"))
    pp = e.domains.get("pp")
    pp_stage = NO_GROUP if pp is None else _fit(pp.index, _INT16, "domains.pp.index")
    phases = [getattr(e.phases, name) for name in Phases.NAMES]
    return (
        e.job,
        _fit(e.rank, _UINT32, "rank"),
        _fit(e.step, _UINT64, "step"),
        _fit(e.world, _UINT32, "world"),
        e.host,
        _fit(e.device, _UINT16, "device"),
        *groups,
        pp_stage,
        _fit(e.start_ns, _INT64, "start_ns"),
        _fit(e.end_ns, _INT64, "end_ns"),
        e.duration_ms,
        *phases,
        _fit_opt(e.gc_count, _UINT64, "gc_count"),
        _fit_opt(e.batch_size, _UINT64, "batch_size"),
        _fit_opt(e.samples, _UINT64, "samples"),
        _fit_opt(e.tokens, _UINT64, "tokens"),
        e.flops,
        e.peak_flops,
        1 if e.profiling else 0,
        event_date(e.start_ns),
        _fit(ingested_ns, _INT64, "ingested_ns"),
        _fit(e.attempt, _UINT16, "attempt"),
        _fit_opt(e.mem_peak_bytes, _INT64, "mem_peak_bytes"),
        _fit_opt(e.mem_reserved_bytes, _INT64, "mem_reserved_bytes"),
        _fit_opt(e.mem_capacity_bytes, _INT64, "mem_capacity_bytes"),
    )


def incident_row(i: Incident) -> Row:
    keys = sorted(i.evidence)
    return (
        i.incident_id,
        i.job,
        i.rule,
        i.metric,
        i.state,
        i.severity,
        i.scope,
        i.summary,
        i.domain,
        NO_GROUP if i.group is None else _fit(i.group, _INT32, "group"),
        [_fit(r, _UINT32, f"ranks[{n}]") for n, r in enumerate(i.ranks)],
        i.host,
        NO_GROUP if i.device is None else _fit(i.device, _INT32, "device"),
        _fit_opt(i.step_first, _INT64, "step_first"),
        _fit_opt(i.step_last, _INT64, "step_last"),
        i.observed,
        i.expected,
        i.threshold,
        i.unit,
        keys,
        [float(i.evidence[k]) for k in keys],
        i.cause,
        i.suggestion,
        _fit(i.detected_ns, _INT64, "detected_ns"),
        event_date(i.detected_ns),
    )


def job_row(j: JobEvent) -> Row:
    keys = sorted(j.parallel)
    return (
        j.job,
        j.phase,
        _fit(j.world, _UINT32, "world"),
        _fit(j.ts_ns, _INT64, "ts_ns"),
        keys,
        [_fit(j.parallel[k], _INT64, f"parallel.{k}") for k in keys],
        _fit_opt(j.last_step, _INT64, "last_step"),
        j.model,
        event_date(j.ts_ns),
        _fit(j.attempt, _UINT16, "attempt"),
        model_shape_json(j),
    )


def model_shape_json(j: JobEvent) -> str:
    """`jobs.model_shape`: the start event's known shape fields as a JSON object (keys sorted), '' for none."""
    if j.model_shape is None:
        return ""
    return orjson.dumps(j.model_shape.known(), option=orjson.OPT_SORT_KEYS).decode()


def dead_letter_row(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    raw: bytes,
    reason: str,
    field: str,
    received_ns: int,
) -> Row:
    """A message that could not be processed, kept byte-exact: `payload_b64` is base64 of `raw`.

    `key` is kept the same way in `key_b64` (null when the message had no key); the `key`
    column holds it as text when it is valid UTF-8 (steplens keys always are) and '' otherwise.
    """
    if key is None:
        key_text, key_b64 = "", None
    else:
        try:
            key_text = key.decode("utf-8")
        except UnicodeDecodeError:
            key_text = ""
        key_b64 = base64.b64encode(key).decode("ascii")
    return (
        topic,
        _fit(partition, _INT32, "partition"),
        _fit(offset, _INT64, "offset"),
        key_text,
        key_b64,
        reason,
        field,
        base64.b64encode(raw).decode("ascii"),
        _fit(len(raw), _UINT32, "payload_bytes"),
        _fit(received_ns, _INT64, "received_ns"),
        event_date(received_ns),
    )


StoredEvent = StepEvent | Incident | JobEvent
STORED_TYPES: tuple[type, ...] = (StepEvent, Incident, JobEvent)


def row_for(event: object, ingested_ns: int) -> TableRow:
    """The table, column order and row an event is stored as.

    `ingested_ns` is the sink's clock at ingestion; it versions step rows (a replayed step
    replaces the earlier row). Incidents are versioned by `detected_ns`, jobs by `ts_ns`.
    Event types that are not stored (yet) raise RowError (field ``type``).
    """
    if isinstance(event, StepEvent):
        return TableRow(STEPS_TABLE, STEP_COLUMNS, step_row(event, ingested_ns))
    if isinstance(event, Incident):
        return TableRow(INCIDENTS_TABLE, INCIDENT_COLUMNS, incident_row(event))
    if isinstance(event, JobEvent):
        return TableRow(JOBS_TABLE, JOB_COLUMNS, job_row(event))
    kind = getattr(type(event), "TYPE", type(event).__name__)
    raise RowError("type", f"{kind!r} events have no ClickHouse table yet")


def dead_letter(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    raw: bytes,
    reason: str,
    field: str,
    received_ns: int,
) -> TableRow:
    """`dead_letter_row` with its table and columns, like `row_for`."""
    row = dead_letter_row(topic, partition, offset, key, raw, reason, field, received_ns)
    return TableRow(DEAD_LETTERS_TABLE, DEAD_LETTER_COLUMNS, row)


# --- contract 1.1 event types: kernel summaries, raw kernels, device samples, profiles, control ---

KERNEL_SUMMARIES_TABLE = "kernel_summaries"
KERNELS_TABLE = "kernels"
DEVICE_SAMPLES_TABLE = "device_samples"
PROFILES_TABLE = "profiles"
CONTROL_TABLE = "control_commands"
ACTIONS_TABLE = "actions"

KERNEL_SUMMARY_COLUMNS: tuple[str, ...] = (
    "job", "rank", "step", "host", "device", "entry", "entries",
    "key", "cat", "count", "total_ns", "max_ns", "metric", "shape_keys", "shape_values", "flops",
    "op", "domain", "group_size", "bytes", "direction", "launch_mean_us", "launch_mad_us",
    "other_count", "other_ns", "dropped", "event_date", "ingested_ns", "attempt",
)

KERNEL_COLUMNS: tuple[str, ...] = (
    "job", "rank", "step", "host", "device", "kernel", "name", "cat", "start_ns", "dur_ns", "submit_ns",
    "stream", "metric", "shape_keys", "shape_values", "flops", "op", "bytes", "count", "dtype", "domain",
    "group_name", "group_size", "direction", "dropped", "event_date", "ingested_ns",
)

DEVICE_SAMPLE_COLUMNS: tuple[str, ...] = (
    "host", "device", "ts_ns", "job", "rank", "device_kind", "power_w", "temp_c", "aicore_pct", "aicpu_pct",
    "ctrlcpu_pct", "mem_pct", "membw_pct", "freq_mhz", "event_date", "ingested_ns",
)

PROFILE_COLUMNS: tuple[str, ...] = (
    "job", "rank", "host", "format", "uri", "step_first", "step_last", "ts_ns", "bytes", "command_id", "event_date",
)

CONTROL_COLUMNS: tuple[str, ...] = (
    "command_id", "job", "action", "ranks", "step_first", "step_count", "issued_ns", "level", "reason",
    "incident_id", "event_date",
)

ACTION_COLUMNS: tuple[str, ...] = (
    "action_id", "incident_id", "job", "level", "verdict", "why", "reason", "partition", "by", "at_ns", "host", "rule",
    "scheduler_job", "age_s", "slowdown", "expected_remaining_s", "history_n", "lost_so_far_gpu_h",
    "keep_cost_gpu_h", "act_cost_gpu_h", "undoes", "event_date",
)

TABLE_COLUMNS.update({
    ACTIONS_TABLE: ACTION_COLUMNS,
    KERNEL_SUMMARIES_TABLE: KERNEL_SUMMARY_COLUMNS,
    KERNELS_TABLE: KERNEL_COLUMNS,
    DEVICE_SAMPLES_TABLE: DEVICE_SAMPLE_COLUMNS,
    PROFILES_TABLE: PROFILE_COLUMNS,
    CONTROL_TABLE: CONTROL_COLUMNS,
})

NO_RANK = -1  # a device sample no job owns


def _shape(shape: dict[str, int] | None, field: str) -> tuple[list[str], list[int]]:
    keys = sorted(shape or {})
    return keys, [_fit((shape or {})[k], _INT64, f"{field}.{k}") for k in keys]


def kernel_summary_rows(s: KernelSummary, ingested_ns: int) -> list[Row]:
    """One row per aggregate; a summary without aggregates is one row with entry -1 and key ''.

    The summary-level counters (other_*, dropped) repeat on every row of the summary: sum
    them over ``entry <= 0`` (the first row of each summary) only.
    """
    head = (
        s.job, _fit(s.rank, _UINT32, "rank"), _fit(s.step, _UINT64, "step"), s.host,
        _fit(s.device, _UINT16, "device"),
    )
    tail = (
        _fit(s.other_count, _UINT64, "other_count"), _fit(s.other_ns, _INT64, "other_ns"),
        _fit(s.dropped, _UINT64, "dropped"), event_date(ingested_ns), _fit(ingested_ns, _INT64, "ingested_ns"),
        _fit(s.attempt, _UINT16, "attempt"),
    )
    n = len(s.entries)
    if n == 0:
        return [(*head, -1, 0, "", "other", 0, 0, None, None, [], [], None, None, None, None, None, None,
                 None, None, *tail)]
    out: list[Row] = []
    for index, a in enumerate(s.entries):
        path = f"entries[{index}]"
        keys, values = _shape(a.shape, f"{path}.shape")
        out.append((
            *head, index, n, a.key, a.cat, _fit(a.count, _UINT64, f"{path}.count"),
            _fit(a.total_ns, _INT64, f"{path}.total_ns"), _fit_opt(a.max_ns, _INT64, f"{path}.max_ns"),
            a.metric, keys, values, a.flops, a.op, a.domain,
            _fit_opt(a.group_size, _UINT32, f"{path}.group_size"), _fit_opt(a.bytes, _INT64, f"{path}.bytes"),
            a.direction, a.launch_mean_us, a.launch_mad_us, *tail,
        ))
    return out


def kernel_rows(b: KernelBatch, ingested_ns: int) -> list[Row]:
    """One row per kernel record, numbered by its position in the batch (the replacing key)."""
    head = (
        b.job, _fit(b.rank, _UINT32, "rank"), _fit(b.step, _UINT64, "step"), b.host,
        _fit(b.device, _UINT16, "device"),
    )
    dropped = _fit(b.dropped, _UINT64, "dropped")
    out: list[Row] = []
    for index, k in enumerate(b.kernels):
        path = f"kernels[{index}]"
        keys, values = _shape(k.shape, f"{path}.shape")
        out.append((
            *head, index, k.name, k.cat, _fit(k.start_ns, _INT64, f"{path}.start_ns"),
            _fit(k.dur_ns, _INT64, f"{path}.dur_ns"), _fit_opt(k.submit_ns, _INT64, f"{path}.submit_ns"),
            _fit_opt(k.stream, _INT64, f"{path}.stream"), k.metric, keys, values, k.flops, k.op,
            _fit_opt(k.bytes, _INT64, f"{path}.bytes"), _fit_opt(k.count, _INT64, f"{path}.count"), k.dtype,
            k.domain, k.group_name, _fit_opt(k.group_size, _UINT32, f"{path}.group_size"), k.direction,
            dropped, event_date(k.start_ns), _fit(ingested_ns, _INT64, "ingested_ns"),
        ))
    return out


def device_sample_row(d: DeviceSample, ingested_ns: int) -> Row:
    return (
        d.host, _fit(d.device, _UINT16, "device"), _fit(d.ts_ns, _INT64, "ts_ns"), d.job or "",
        NO_RANK if d.rank is None else _fit(d.rank, _INT64, "rank"), d.device_kind or "",
        d.power_w, d.temp_c, d.aicore_pct, d.aicpu_pct, d.ctrlcpu_pct, d.mem_pct, d.membw_pct, d.freq_mhz,
        event_date(d.ts_ns), _fit(ingested_ns, _INT64, "ingested_ns"),
    )


def profile_row(p: ProfileReady) -> Row:
    return (
        p.job, _fit(p.rank, _UINT32, "rank"), p.host, p.format, p.uri,
        _fit(p.step_first, _UINT64, "step_first"), _fit(p.step_last, _UINT64, "step_last"),
        _fit(p.ts_ns, _INT64, "ts_ns"), _fit_opt(p.bytes, _INT64, "bytes"), p.command_id, event_date(p.ts_ns),
    )


def control_row(c: ControlCommand) -> Row:
    return (
        c.command_id, c.job, c.action, [_fit(r, _UINT32, f"ranks[{n}]") for n, r in enumerate(c.ranks)],
        _fit(c.step_first, _UINT64, "step_first"), _fit(c.step_count, _UINT32, "step_count"),
        _fit(c.issued_ns, _INT64, "issued_ns"), c.level, c.reason, c.incident_id, event_date(c.issued_ns),
    )


def action_row(a: MitigationAction) -> Row:
    return (
        a.action_id, a.incident_id, a.job, a.level, a.verdict, a.why, a.reason, a.partition, a.by,
        _fit(a.at_ns, _INT64, "at_ns"), a.host, a.rule, a.scheduler_job, a.age_s, a.slowdown, a.expected_remaining_s,
        _fit(a.history_n, _UINT32, "history_n"), a.lost_so_far_gpu_h, a.keep_cost_gpu_h, a.act_cost_gpu_h, a.undoes,
        event_date(a.at_ns),
    )


AnyStoredEvent = (StoredEvent | KernelSummary | KernelBatch | DeviceSample | ProfileReady | ControlCommand
                  | MitigationAction)


def rows_for(event: AnyStoredEvent, ingested_ns: int) -> list[TableRow]:
    """Every row an event is stored as (kernel summaries and kernel batches give one per entry).

    The land worker's single mapping point: `row_for` for the one-row types, the batch
    mappings for the rest. Raises `RowError` when a value does not fit (the whole event is
    then dead-lettered, never half-landed).
    """
    if isinstance(event, KernelSummary):
        return [TableRow(KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS, r)
                for r in kernel_summary_rows(event, ingested_ns)]
    if isinstance(event, KernelBatch):
        return [TableRow(KERNELS_TABLE, KERNEL_COLUMNS, r) for r in kernel_rows(event, ingested_ns)]
    if isinstance(event, DeviceSample):
        return [TableRow(DEVICE_SAMPLES_TABLE, DEVICE_SAMPLE_COLUMNS, device_sample_row(event, ingested_ns))]
    if isinstance(event, ProfileReady):
        return [TableRow(PROFILES_TABLE, PROFILE_COLUMNS, profile_row(event))]
    if isinstance(event, ControlCommand):
        return [TableRow(CONTROL_TABLE, CONTROL_COLUMNS, control_row(event))]
    if isinstance(event, MitigationAction):
        return [TableRow(ACTIONS_TABLE, ACTION_COLUMNS, action_row(event))]
    return [row_for(event, ingested_ns)]
