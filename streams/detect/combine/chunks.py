"""Column chunks on the internal partials topic: the decode stage's output, keyed by job.

The raw topics are keyed per rank, so one job's ranks are spread over partitions and
workers. Instead of re-keying every event (the old design: ~5 internal records per
event), the decode stage sends ONE chunk per (job, kind) per batch, keyed by job: a
10,240-rank job at 1 step/s becomes a handful of messages a second, and all of a job's
ranks meet in the one worker that owns the job's partition.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, TypedDict, TypeGuard, cast, overload

import numpy as np
import numpy.typing as npt
import orjson

from schemas.columns import DEVICE_METRICS, DOMAINS, PHASES

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# a measurement: NaN where not measured, which the wire (JSON) turns into null (None); read with
# np.asarray(..., dtype=np.float64), which makes it NaN again
Measured = float | None
# a numeric column of a step or kernel chunk: a list (the per-event decode, JSON) or a numpy array (the columnar
# decode, a binary frame); read with np.asarray either way
Ints = list[int] | IntArray
Floats = list[Measured] | FloatArray


class Progress(TypedDict, total=False):
    """How far the decode stage was behind its input when it made the chunk (streams/detect/ingest/loop.py)."""

    behind_ns: int
    decoded_ns: int
    lag: int
    starved: bool


class StepMemory(TypedDict, total=False):
    """Contract 1.5: each row's device memory peak, reserved and capacity bytes (NaN: none); only in a step
    chunk where a row has them (most jobs send none, and their chunks carry no NaN columns)."""

    mem_peak: Floats
    mem_reserved: Floats
    mem_capacity: Floats


MEMORY_COLUMNS = ("mem_peak", "mem_reserved", "mem_capacity")  # `StepMemory`'s columns, all or none in a chunk


class StepChunk(Progress, StepMemory):
    """One job attempt's step reports of a batch: one list per column, one row per (rank, step) report."""

    kind: Literal["steps"]
    job: str
    attempt: int
    world: int
    rank: Ints
    step: Ints
    host: list[str]
    start_ns: Ints
    end_ns: Ints
    samples: Floats
    batch: Floats
    stage: Ints  # the PP stage (-1: none)
    # one column per phase of schemas.columns.PHASES (ms) ...
    data_ms: Floats
    forward_ms: Floats
    backward_ms: Floats
    grad_ms: Floats
    optimizer_ms: Floats
    comm_exposed_ms: Floats
    interstep_cpu_ms: Floats
    gc_ms: Floats
    # ... and per domain of schemas.columns.DOMAINS the rank's group (g_, -1: none) and its size (n_, 0: none)
    g_dp: Ints
    n_dp: Ints
    g_tp: Ints
    n_tp: Ints
    g_pp: Ints
    n_pp: Ints
    g_ep: Ints
    n_ep: Ints
    g_cp: Ints
    n_cp: Ints


# the fields of a kernel summary's aggregates R4-R9 read, one column each: names (None: none, or not a string)
# and numbers (NaN, `null` on the wire: not usable: count, bytes and max_ns not an integer, flops and the launch
# latencies not a number); `total_ns` is always an integer (an aggregate without one makes its summary bad)
KERNEL_STRINGS = ("cat", "domain", "direction")
KERNEL_NUMBERS = ("count", "flops", "bytes", "launch_mean_us", "launch_mad_us", "max_ns")


class KernelChunk(Progress):
    """One job attempt's kernel summaries of a batch, as columns: per summary `rank`, `step`, `other_ns` and
    `entries` (how many aggregates it has), then per aggregate, in order, `key`, `total_ns` and the columns of
    KERNEL_STRINGS and KERNEL_NUMBERS."""

    kind: Literal["kernels"]
    job: str
    attempt: int
    world: int
    rank: Ints
    step: Ints
    other_ns: Ints
    entries: Ints
    key: list[str]
    total_ns: Ints
    cat: list[str | None]
    domain: list[str | None]
    direction: list[str | None]
    count: Floats
    flops: Floats
    bytes: Floats
    launch_mean_us: Floats
    launch_mad_us: Floats
    max_ns: Floats


class DeviceChunk(Progress):
    """One job's device samples of a batch (job "": samples nobody attributed to a job). No attempt:
    a sample belongs to the attempt of its time."""

    kind: Literal["device"]
    job: str
    host: list[str]
    device: Ints
    rank: Ints  # -1: not attributed to a rank
    ts_ns: Ints
    # one column per measurement of schemas.columns.DEVICE_METRICS
    power_w: Floats
    temp_c: Floats
    aicore_pct: Floats
    aicpu_pct: Floats
    ctrlcpu_pct: Floats
    mem_pct: Floats
    membw_pct: Floats
    freq_mhz: Floats


class JobShape(TypedDict, total=False):
    """Contract 1.5: the model's shape a job's `start` declared (`schemas.ModelShape`'s known fields), only
    when it declared one."""

    model_shape: dict[str, Any]


class JobChunk(Progress, JobShape):
    """A job attempt's `start` or `end` event."""

    kind: Literal["job"]
    job: str
    attempt: int
    phase: Literal["start", "end"]
    world: int
    ts_ns: int
    last_step: int | None
    parallel: dict[str, Any]
    kernel_summaries: bool


class StalledChunk(Progress):
    """No job's: a rebalance of the decode group stalls the decode stage (`DecodeLoop.while_held` sends one to
    every partials partition each second of it); `starved` makes every engine that reads it take its input as
    lagging (`streams.detect.engine.input_lagging`), so no frame times out on the silence."""

    kind: Literal["stalled"]
    job: Literal[""]


Chunk = StepChunk | KernelChunk | DeviceChunk | JobChunk | StalledChunk


def stalled(now_ns: int) -> StalledChunk:
    return {"kind": "stalled", "job": "", "behind_ns": 0, "decoded_ns": now_ns, "lag": 0, "starved": True}


# Chunks are dispatched on `kind` read with `.get`: a chunk without one is applied as an empty
# chunk (counted, ticked), as it always was, where `chunk["kind"]` would raise.
def is_steps(chunk: Chunk) -> TypeGuard[StepChunk]:
    return chunk.get("kind") == "steps"


def is_kernels(chunk: Chunk) -> TypeGuard[KernelChunk]:
    return chunk.get("kind") == "kernels"


def is_device(chunk: Chunk) -> TypeGuard[DeviceChunk]:
    return chunk.get("kind") == "device"


def is_job(chunk: Chunk) -> TypeGuard[JobChunk]:
    return chunk.get("kind") == "job"


def column(chunk: Mapping[str, object], name: str) -> list[Any]:
    """A column named at run time (a phase, a domain's groups, a device metric): TypedDict keys are literals."""
    return cast(list[Any], chunk[name])


MAX_CHUNK_BYTES = 1_000_000  # well under the partials topic's max.message.bytes (4 MB)


# Step, kernel and device chunks travel as a binary frame: their numeric columns as raw little-endian int64 /
# float64 buffers after a JSON header that holds everything else (strings, scalars, progress). Why: JSON
# numbers cost the decode stage a `tolist` and an orjson encode, and the engine an orjson parse and an
# `np.asarray` per value, for columns that are numpy on both sides; a buffer costs a copy. The engine
# reads every column of these kinds with `np.asarray` (the device signal keeps a device chunk's arrays as
# the pieces of its ticks), so a column arriving as an array or as a list reads the same (NaN where the
# JSON path said null). `loads` takes both encodings.
FRAME_MAGIC = b"\x00SLC1"
_LEN = 4
_I8, _F8 = np.dtype("<i8"), np.dtype("<f8")
_STEP_INTS = ("rank", "step", "start_ns", "end_ns", "stage", *(f"{p}_{d}" for d in DOMAINS for p in ("g", "n")))
_STEP_FLOATS = ("samples", "batch", *PHASES, *MEMORY_COLUMNS)
_BINARY: dict[str, dict[str, np.dtype[Any]]] = {
    "steps": {**dict.fromkeys(_STEP_INTS, _I8), **dict.fromkeys(_STEP_FLOATS, _F8)},
    "kernels": {**dict.fromkeys(("rank", "step", "other_ns", "entries", "total_ns"), _I8),
                **dict.fromkeys(KERNEL_NUMBERS, _F8)},
    "device": {**dict.fromkeys(("device", "rank", "ts_ns"), _I8), **dict.fromkeys(DEVICE_METRICS, _F8)},
}


# A kernel chunk's name columns (one string per aggregate: ~5 a summary, the same few dozen names over and over)
# travel dictionary-encoded in a frame: the distinct names, in order of first appearance, in the header and an
# int64 code per row as a column. The engine numbers names the same way (`NameTable.codes` takes a `Coded` at
# once), so it neither parses nor hashes a string per aggregate.
_CODED: dict[str, tuple[str, ...]] = {"kernels": ("key", *KERNEL_STRINGS)}


class Coded(Sequence[Any]):
    """A dictionary-encoded column: row i is `names[codes[i]]`. Reads as the list it stands for."""

    __slots__ = ("codes", "names")

    def __init__(self, names: list[Any], codes: npt.NDArray[np.int64]) -> None:
        self.names, self.codes = names, codes

    @classmethod
    def of(cls, values: list[Any]) -> Coded:
        """`values` encoded (names in order of first appearance)."""
        index = {v: i for i, v in enumerate(dict.fromkeys(values))}
        return cls(list(index), np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values)))

    def __len__(self) -> int:
        return int(self.codes.size)

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> Coded: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return Coded(self.names, self.codes[i])
        return self.names[int(self.codes[i])]

    def __iter__(self) -> Iterator[Any]:
        return map(self.names.__getitem__, self.codes.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Coded | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


def _typed(value: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:
    """A column as its frame's 1-d buffer of `dtype`; None: it does not fit (None in an int column, a value past
    int64, a nested list). None in a float column is NaN."""
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    return array if array.ndim == 1 else None


def _frame(chunk: Chunk) -> bytes | None:
    """The chunk as a binary frame; None: not a framed kind, or a column that does not fit its type."""
    types = _BINARY.get(str(chunk.get("kind")))
    if types is None:
        return None
    header: dict[str, Any] = {}
    layout: list[tuple[str, str, int]] = []
    buffers: list[bytes] = []
    coded: dict[str, list[Any]] = {}
    names = _CODED.get(str(chunk.get("kind")), ())
    try:
        for name, value in chunk.items():
            dtype = types.get(name)
            if name in names and isinstance(value, list | Coded):
                # encoded afresh even when it came coded: a slice of a `Coded` keeps every name of the whole
                # column, and the engine would number names no row of this chunk has
                column = Coded.of(value) if isinstance(value, list) else _own_names(value)
                coded[name] = column.names
                value, dtype = column.codes, _I8
            elif dtype is None:
                header[name] = value
                continue
            array = _typed(value, dtype)
            if array is None:
                return None
            layout.append((name, dtype.str, int(array.size)))
            buffers.append(array.tobytes())
    except (TypeError, ValueError, OverflowError):
        return None
    header["_columns"] = layout
    if coded:
        header["_coded"] = coded
    head = orjson.dumps(header)
    head += b" " * (-(len(FRAME_MAGIC) + _LEN + len(head)) % 8)  # buffers start 8-byte aligned
    return b"".join([FRAME_MAGIC, len(head).to_bytes(_LEN, "little"), head, *buffers])


def _own_names(column: Coded) -> Coded:
    """A coded column with only the names its rows use, in order of first appearance (what `Coded.of` gives
    of its values), found on the codes: no string per row."""
    if len(set(column.names)) != len(column.names):  # a name twice: only the values say which code is which
        return Coded.of(list(column))
    used, first = np.unique(column.codes, return_index=True)
    order = used[np.argsort(first, kind="stable")]
    renumber = np.zeros(len(column.names), dtype=np.int64)
    renumber[order] = np.arange(order.size, dtype=np.int64)
    return Coded([column.names[i] for i in order.tolist()], renumber[column.codes])


def _prepared(chunk: Chunk) -> Chunk:
    """A framed kind's list columns as the arrays (and coded names) its frame holds, made once, so that the
    parts of a split chunk frame slices of them instead of converting each part's lists again. A column that
    does not fit its type stays a list (its frame then declines, as the whole chunk's would)."""
    kind = str(chunk.get("kind"))
    types = _BINARY.get(kind)
    if types is None:
        return chunk
    names = _CODED.get(kind, ())
    out: dict[str, Any] = dict(chunk)
    for name, value in chunk.items():
        if not isinstance(value, list):
            continue
        if name in names:
            out[name] = Coded.of(value)
            continue
        dtype = types.get(name)
        array = None if dtype is None else _typed(value, dtype)
        if array is not None:
            out[name] = array
    return cast(Chunk, out)


def _as_json(value: Any) -> Any:
    """orjson's fallback for what a prepared chunk holds beside numpy arrays."""
    if isinstance(value, Coded):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _unframe(raw: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A binary frame back to a chunk, its numeric columns as (writable) numpy arrays."""
    body = bytearray(raw)  # one copy: arrays on it are writable, as parsed lists are
    start = len(FRAME_MAGIC) + _LEN
    size = int.from_bytes(body[len(FRAME_MAGIC):start], "little")
    chunk = orjson.loads(body[start:start + size])
    if not isinstance(chunk, dict):
        raise ValueError("a chunk frame's header must be a JSON object")
    offset = start + size
    coded = chunk.pop("_coded", {})
    try:
        for name, dtype, count in chunk.pop("_columns", ()):
            if dtype not in (_I8.str, _F8.str) or not isinstance(count, int) or count < 0:
                raise ValueError(f"a chunk frame's column {name!r} is not one of int64 or float64 values")
            array = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
            offset += array.nbytes
            chunk[name] = array
            if name in coded:
                names = coded[name]
                if dtype != _I8.str or not isinstance(names, list) or (
                        count and not 0 <= int(array.min()) <= int(array.max()) < len(names)):
                    raise ValueError(f"a chunk frame's coded column {name!r} has codes outside its names")
                chunk[name] = Coded(names, array)
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"a chunk frame's column list is malformed: {exc}") from exc
    if offset != len(body):
        raise ValueError(f"a chunk frame of {len(body)} bytes holds {offset}")
    return chunk


def dumps(chunk: Chunk) -> bytes:
    framed = _frame(chunk)
    return orjson.dumps(chunk, option=orjson.OPT_SERIALIZE_NUMPY, default=_as_json) if framed is None else framed


def _rows(chunk: Chunk) -> int:
    if is_steps(chunk) or is_device(chunk) or is_kernels(chunk):
        return len(chunk["rank"])
    return 1


_PER_SUMMARY = ("rank", "step", "other_ns", "entries")
_PER_AGGREGATE = ("key", "total_ns", *KERNEL_STRINGS, *KERNEL_NUMBERS)


def _part(chunk: Chunk, lo: int, hi: int) -> Chunk:
    """Rows lo..hi of the chunk (summaries, for a kernel chunk: their aggregates with them)."""
    if is_kernels(chunk):
        entries = np.asarray(chunk["entries"], dtype=np.int64)
        first = int(entries[:lo].sum())
        last = first + int(entries[lo:hi].sum())
        part = dict(chunk)
        part.update({k: column(chunk, k)[lo:hi] for k in _PER_SUMMARY})
        part.update({k: column(chunk, k)[first:last] for k in _PER_AGGREGATE})
        return cast(Chunk, part)
    n = _rows(chunk)
    return cast(Chunk, {k: (v[lo:hi] if isinstance(v, (list, np.ndarray)) and len(v) == n else v)
                        for k, v in chunk.items()})


def dumps_split(chunk: Chunk, limit: int = MAX_CHUNK_BYTES) -> list[bytes]:
    """The chunk as one message, or as several (row ranges in order) when it would be too large.

    A chunk over the limit is cut at once into as many equal row ranges as its size asks for (with a tenth to
    spare), not halved again and again: a 10,240-rank step's 2 MB chunk was framed three times over (whole,
    halves, quarters). A part still over the limit (rows of uneven size) is cut the same way."""
    return _split(_prepared(chunk), limit)


def _split(chunk: Chunk, limit: int) -> list[bytes]:
    raw = dumps(chunk)
    n = _rows(chunk)
    if len(raw) <= limit or n <= 1:
        return [raw]
    parts = min(n, max(2, -(-len(raw) * 10 // (limit * 9))))
    bounds = [n * i // parts for i in range(parts + 1)]
    return [frame for lo, hi in itertools.pairwise(bounds) for frame in _split(_part(chunk, lo, hi), limit)]


def loads(raw: bytes | None) -> Chunk:
    """One chunk from the partials topic (a binary frame or JSON); ValueError for anything that is
    neither a frame nor a JSON object.

    Only the shape is checked: the partials topic is written by the decode stage alone."""
    if not isinstance(raw, (bytes, bytearray, memoryview, str)):
        raise ValueError(f"a chunk must be JSON bytes, got {type(raw).__name__}")
    if not isinstance(raw, str) and bytes(raw[:len(FRAME_MAGIC)]) == FRAME_MAGIC:
        return cast(Chunk, _unframe(raw))
    data = orjson.loads(raw)  # orjson.JSONDecodeError is a ValueError
    if not isinstance(data, dict):
        raise ValueError("a chunk must be a JSON object")
    return cast(Chunk, data)


class StepColumns:
    """A step chunk as numpy columns (NaN = not measured)."""

    __slots__ = (
        "batch",
        "end_ns",
        "groups",
        "host",
        "job",
        "memory",
        "phases",
        "rank",
        "samples",
        "sizes",
        "stage",
        "start_ns",
        "step",
        "world",
    )

    def __init__(self, chunk: StepChunk) -> None:
        self.job: str = chunk["job"]
        self.world: int = int(chunk["world"])
        self.rank: IntArray = np.asarray(chunk["rank"], dtype=np.int64)
        self.step: IntArray = np.asarray(chunk["step"], dtype=np.int64)
        self.host: list[str] = chunk["host"]
        self.start_ns: IntArray = np.asarray(chunk["start_ns"], dtype=np.int64)
        self.end_ns: IntArray = np.asarray(chunk["end_ns"], dtype=np.int64)
        self.samples: FloatArray = np.asarray(chunk["samples"], dtype=np.float64)
        self.batch: FloatArray = np.asarray(chunk["batch"], dtype=np.float64)
        self.phases: FloatArray = np.asarray([column(chunk, p) for p in PHASES], dtype=np.float64).reshape(
            len(PHASES), -1)
        self.groups: IntArray = np.asarray([column(chunk, f"g_{d}") for d in DOMAINS], dtype=np.int64).reshape(
            len(DOMAINS), -1)
        self.sizes: IntArray = np.asarray([column(chunk, f"n_{d}") for d in DOMAINS], dtype=np.int64).reshape(
            len(DOMAINS), -1)
        self.stage: IntArray = np.asarray(chunk["stage"], dtype=np.int64)
        # (3, rows) peak, reserved, capacity bytes (contract 1.5); None: no row of the chunk sent memory
        # (a chunk from a decoder before `mem_capacity` has the other two)
        self.memory: FloatArray | None = np.stack([
            np.asarray(chunk[c], dtype=np.float64) if c in chunk else np.full(self.rank.size, np.nan)  # type: ignore[literal-required]
            for c in MEMORY_COLUMNS]) if "mem_peak" in chunk else None

    def __len__(self) -> int:
        return int(self.rank.size)
