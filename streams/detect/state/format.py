"""The detect snapshot as data (format SLD1): the engine's state by stable type names, no code paths inside.

Why not pickle: a pickle names each class by its module path and runs whatever it names on load, so every
module move needed a shim and an old snapshot could only be read by code that still had its classes where
they were. Here a snapshot is plain msgpack a reader in any language can walk (`steplens state dump`), and
each class is written under the name `TYPES` gives it, its fields by name: a class that moves keeps its
name, a field added later is left unset (the engine reads restored fields with a default), a field that
went is dropped.

Layout: b"SLD1" + zstd( u32 head length | head | array 0 | array 1 | ... | body ):

- head (msgpack): {"version": 1, "types": [type name of object 0, 1, ...], "arrays": [[dtype, shape], ...]}
- each array's raw bytes, C order, in its dtype (numpy's `dtype.str`: byte order, kind, size)
- body (msgpack): {"root": {"engine": <ref>, "outbox": <ref>}, "objects": [{field: value} of object 0, 1, ...]}

A value is msgpack's own (nil, bool, int, float, str, bin, array = list, map with str or int keys = dict)
or one of these ext types, each payload a msgpack value:

- 1 REF: u32 index into the objects (a registered class, or a list, dict or set held in two places)
- 2 ARRAY: u32 index into the arrays (a numpy array)
- 3 TUPLE: [items]      - 4 SET: [items]      - 5 FROZENSET: [items]
- 6 DICT: [[key, value], ...] (a dict with keys other than str and int)
- 7 SCALAR: [dtype, raw bytes] (a numpy scalar)

Objects are numbered in the order first met, depth first; a reader creates them all (empty) from the
head's type names before it reads the body, so references (shared, or in a cycle) need no order (and such an
object, still empty while the body is read, must not be a dict key or a set member). The
job's `cfg` is not written: restore gives the worker's own settings (`decode`'s `cfg`). Older formats
are read by their migration (`streams/detect/state/legacy.py`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import zstandard
from msgspec.msgpack import Decoder, Encoder, Ext

from schemas import ControlCommand, Incident
from streams.detect.config import DetectionConfig
from streams.detect.engine import EngineStats, JobEngine
from streams.detect.incidents.book import IncidentBook, Track
from streams.detect.incidents.join import JoinState, OpenTrack, Recovering
from streams.detect.rules import (
    oom_forecast,
    r01_static_bounds,
    r02_cusum,
    r03_throughput_window,
    r04_kernel_efficiency,
    r05_slow_rank_in_group,
    r07_minority_kernel_gap,
    r09_copy_rate,
    r10_interstep_cpu,
)
from streams.detect.rules.base import Ring
from streams.detect.scopes.expected import Component, ExpectedState
from streams.detect.scopes.finding import Finding
from streams.detect.scopes.memory import MemoryState
from streams.detect.scopes.pp_stage import StageState
from streams.detect.scopes.rhythm import Episode, RhythmState
from streams.detect.scopes.slow_link import LinkState
from streams.detect.scopes.slow_pair import PairState
from streams.detect.scopes.slow_rank import SlowRankState
from streams.detect.scopes.slow_step import SlowStepState
from streams.detect.scopes.stall import StallState
from streams.detect.scopes.sustained import StepObservation, SustainedState
from streams.detect.signals.device import _Hits, _MemBase
from streams.detect.signals.shared import SignalState
from streams.detect.state.outbox import Outbox
from streams.detect.windows.comm_columns import CommColumn
from streams.detect.windows.step_frames import (
    Frame,
    KernelRows,
    NameTable,
    ReportedLayout,
    StepFrames,
    WindowParams,
    WindowStats,
)
from streams.model.reference import CollectiveCurve, KernelBench, ReferenceModels

MAGIC = b"SLD1"
VERSION = 1
ZSTD_LEVEL = -5  # zstd's fast mode: half level 1's CPU for ~16 % more bytes (bench/results/snapshot.json)
REF, ARRAY, TUPLE, SET, FROZENSET, DICT, SCALAR = range(1, 8)

# The stable name of every class a snapshot holds. A name, once written, keeps its meaning: a class that
# moves or is renamed keeps its entry; a class whose fields change meaning gets a new VERSION and a migration.
TYPES: dict[str, type] = {
    "engine.JobEngine": JobEngine, "engine.EngineStats": EngineStats, "outbox.Outbox": Outbox,
    "frames.StepFrames": StepFrames, "frames.Frame": Frame, "frames.KernelRows": KernelRows,
    "frames.NameTable": NameTable, "frames.ReportedLayout": ReportedLayout, "frames.WindowParams": WindowParams,
    "frames.WindowStats": WindowStats, "frames.CommColumn": CommColumn,
    "incidents.IncidentBook": IncidentBook, "incidents.Track": Track, "incidents.JoinState": JoinState,
    "incidents.OpenTrack": OpenTrack, "incidents.Recovering": Recovering,
    "signals.SignalState": SignalState, "signals.DeviceHits": _Hits, "signals.MemoryBase": _MemBase,
    "rules.Ring": Ring, "rules.oom.State": oom_forecast.State, "rules.r1.State": r01_static_bounds.State,
    "rules.r2.State": r02_cusum.State, "rules.r3.State": r03_throughput_window.State,
    "rules.r4.State": r04_kernel_efficiency.State, "rules.r4.Calls": r04_kernel_efficiency.Calls,
    "rules.r5.State": r05_slow_rank_in_group.State, "rules.r7.State": r07_minority_kernel_gap.State,
    "rules.r9.State": r09_copy_rate.State, "rules.r10.State": r10_interstep_cpu.State,
    "scopes.SlowStepState": SlowStepState, "scopes.SlowRankState": SlowRankState, "scopes.PairState": PairState,
    "scopes.StageState": StageState, "scopes.StallState": StallState, "scopes.LinkState": LinkState,
    "scopes.SustainedState": SustainedState, "scopes.StepObservation": StepObservation,
    "scopes.RhythmState": RhythmState, "scopes.Episode": Episode, "scopes.MemoryState": MemoryState,
    "scopes.ExpectedState": ExpectedState, "scopes.Component": Component, "scopes.Finding": Finding,
    "model.ReferenceModels": ReferenceModels, "model.CollectiveCurve": CollectiveCurve,
    "model.KernelBench": KernelBench,
    "contract.Incident": Incident, "contract.ControlCommand": ControlCommand,
    # a list, dict or set held in two places (one engine's input offsets, shared with the attempt it replaced)
    "list": list, "dict": dict, "set": set,
}
_CONTAINERS = (list, dict, set)
NAMES: dict[type, str] = {cls: name for name, cls in TYPES.items() if cls not in _CONTAINERS}
NOT_WRITTEN: dict[type, tuple[str, ...]] = {JobEngine: ("cfg",)}  # restore sets it (`decode`'s `cfg`)


def _field_names(cls: type) -> tuple[tuple[str, ...], bool]:
    """A class's slot names (all its bases') less those not written, and whether instances have a __dict__."""
    slots: list[str] = []
    for klass in reversed(cls.__mro__):
        names = klass.__dict__.get("__slots__", ())
        slots.extend([names] if isinstance(names, str) else names)
    skip = set(NOT_WRITTEN.get(cls, ())) | {"__dict__", "__weakref__"}
    has_dict = "__dict__" in slots or any("__slots__" not in k.__dict__ for k in cls.__mro__ if k is not object)
    return tuple(dict.fromkeys(s for s in slots if s not in skip)), has_dict


FIELDS: dict[type, tuple[tuple[str, ...], bool]] = {cls: _field_names(cls) for cls in NAMES}
_UNSET = object()


class _Writer:
    """One snapshot's objects and arrays, numbered as met (depth first)."""

    def __init__(self, shared: set[int]) -> None:
        self.pack = Encoder().encode
        self.shared = shared  # ids of containers to write as objects (met twice in an earlier try)
        self.index: dict[int, int] = {}
        self.types: list[str] = []
        self.objects: list[Any] = []
        self.arrays: list[np.ndarray] = []
        self.array_index: dict[int, int] = {}
        self.met: set[int] = set()  # ids of the containers written inline
        self.again: set[int] = set()

    def ref(self, obj: Any, name: str) -> Ext:
        i = self.index.get(id(obj))
        if i is None:
            i = self.index[id(obj)] = len(self.types)
            self.types.append(name)
            self.objects.append(None)
            self.objects[i] = self.fields(obj)
        return Ext(REF, struct.pack("<I", i))

    def fields(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is list:
            return [self.value(v) for v in obj]
        if cls is dict:
            return [[self.value(k), self.value(v)] for k, v in obj.items()]
        if cls is set:
            return [self.value(v) for v in obj]
        names, has_dict = FIELDS[cls]
        out: dict[str, Any] = {}
        for name in names:
            v = getattr(obj, name, _UNSET)
            if v is not _UNSET:
                out[name] = self.value(v)
        if has_dict:
            out.update((k, self.value(v)) for k, v in vars(obj).items() if k not in NOT_WRITTEN.get(cls, ()))
        return out

    def value(self, v: Any) -> Any:
        cls = type(v)
        if cls is str or cls is int or cls is float or cls is bool or v is None or cls is bytes:
            return v
        if cls in _CONTAINERS:
            key = id(v)
            if key in self.shared:
                return self.ref(v, cls.__name__)
            if key in self.met:
                self.again.add(key)
            self.met.add(key)
            if cls is list:
                return [self.value(x) for x in v]
            if cls is dict:
                if all(type(k) is str or type(k) is int for k in v):
                    return {k: self.value(x) for k, x in v.items()}
                return Ext(DICT, self.pack([[self.value(k), self.value(x)] for k, x in v.items()]))
            return Ext(SET, self.pack([self.value(x) for x in v]))
        if cls is tuple:
            return Ext(TUPLE, self.pack([self.value(x) for x in v]))
        if cls is np.ndarray:
            return self.array(v)
        name = NAMES.get(cls)
        if name is not None:
            return self.ref(v, name)
        if cls is frozenset:
            return Ext(FROZENSET, self.pack([self.value(x) for x in v]))
        if isinstance(v, np.generic):
            return Ext(SCALAR, self.pack([v.dtype.str, v.tobytes()]))
        raise TypeError(f"a detect snapshot has no stable name for {cls.__module__}.{cls.__qualname__}: "
                        "add it to TYPES in streams/detect/state/format.py")

    def array(self, a: np.ndarray) -> Ext:
        if a.dtype.hasobject:
            raise TypeError("a detect snapshot holds numeric arrays only, not dtype=object")
        i = self.array_index.get(id(a))
        if i is None:
            i = self.array_index[id(a)] = len(self.arrays)
            self.arrays.append(a)
        return Ext(ARRAY, struct.pack("<I", i))


def encode(engine: JobEngine, outbox: Outbox | None = None, level: int = ZSTD_LEVEL) -> bytes:
    """One job's snapshot (engine and outbox) in format SLD1."""
    parts = document(engine, outbox)
    compressor = zstandard.ZstdCompressor(level=level).compressobj(size=sum(len(p) for p in parts))
    return b"".join([MAGIC, *(compressor.compress(p) for p in parts), compressor.flush()])


def document(engine: JobEngine, outbox: Outbox | None = None) -> list[bytes | memoryview]:
    """The uncompressed snapshot, in parts: the arrays as they lie in memory (no copy of a snapshot's bulk)."""
    box = outbox if outbox is not None else Outbox(engine.job)
    shared: set[int] = set()
    while True:
        writer = _Writer(shared)
        root = {"engine": writer.value(engine), "outbox": writer.value(box)}
        if not writer.again:
            break
        shared |= writer.again  # rare (a relaunch's previous attempt): written once more, those as objects
    arrays = [np.ascontiguousarray(a) for a in writer.arrays]
    head = writer.pack({"version": VERSION, "types": writer.types,
                        "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]})
    body = writer.pack({"root": root, "objects": writer.objects})
    return [struct.pack("<I", len(head)), head, *(a.data.cast("B") for a in arrays if a.size), body]


def sections(raw: bytes) -> tuple[dict[str, Any], list[memoryview], memoryview]:
    """A SLD1 snapshot's head, each array's bytes and its (still encoded) body."""
    if bytes(raw[:4]) != MAGIC:
        raise ValueError(f"not a {MAGIC.decode()} snapshot")
    data = memoryview(zstandard.ZstdDecompressor().decompress(raw[4:]))
    (n,) = struct.unpack_from("<I", data, 0)
    head = Decoder().decode(data[4:4 + n])
    if head.get("version") != VERSION:
        raise ValueError(f"snapshot version {head.get('version')!r}, this code reads {VERSION}")
    at, blobs = 4 + n, []
    for dtype, shape in head["arrays"]:
        size = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        blobs.append(data[at:at + size])
        at += size
    return head, blobs, data[at:]


def _reader(ext: Callable[[int, int], Any], json: bool = False) -> Decoder[Any]:
    """A body decoder; `ext(code, index)` resolves REF and ARRAY. `json`: tuples and sets as lists, a dict
    with other keys as its [key, value] pairs, numpy scalars as numbers (what JSON can show)."""
    def hook(code: int, data: memoryview) -> Any:
        if code in (REF, ARRAY):
            return ext(code, struct.unpack("<I", data)[0])
        items = decoder.decode(data)
        if code == SCALAR:
            scalar = np.frombuffer(items[1], dtype=np.dtype(items[0]))[0]
            return scalar.item() if json else scalar
        if json:
            return items
        if code == TUPLE:
            return tuple(items)
        if code == SET:
            return set(items)
        if code == FROZENSET:
            return frozenset(items)
        if code == DICT:
            return {_key(k): v for k, v in items}
        raise ValueError(f"unknown ext type {code} in a snapshot")

    decoder: Decoder[Any] = Decoder(ext_hook=hook)
    return decoder


def _key(k: Any) -> Any:
    return tuple(k) if type(k) is list else k  # a tuple key read back as a list by a reader without ext


def decode(raw: bytes, cfg: DetectionConfig | None = None) -> tuple[JobEngine, Outbox]:
    """The engine and outbox of a SLD1 snapshot; `cfg`: the settings the restored engines run with.
    Raises ValueError on a snapshot this code cannot read."""
    head, blobs, body = sections(raw)
    try:
        classes = [TYPES[name] for name in head["types"]]
    except KeyError as exc:
        raise ValueError(f"a snapshot names type {exc.args[0]!r}, unknown to this code") from None
    objects: list[Any] = [cls() if cls in _CONTAINERS else object.__new__(cls) for cls in classes]
    arrays = [np.frombuffer(blob, dtype=np.dtype(dtype)).reshape(shape).copy()
              for blob, (dtype, shape) in zip(blobs, head["arrays"], strict=True)]
    doc = _reader(lambda code, i: objects[i] if code == REF else arrays[i]).decode(body)
    settings = cfg if cfg is not None else DetectionConfig()
    for obj, fields in zip(objects, doc["objects"], strict=True):
        _fill(obj, fields, settings)
    engine, outbox = doc["root"]["engine"], doc["root"]["outbox"]
    if type(engine) is not JobEngine or type(outbox) is not Outbox:
        raise ValueError("a snapshot's root is not an engine and its outbox")
    return engine, outbox


def _fill(obj: Any, fields: Any, cfg: DetectionConfig) -> None:
    cls = type(obj)
    if cls is list:
        obj.extend(fields)
        return
    if cls is set:
        obj.update(fields)
        return
    if cls is dict:
        obj.update((_key(k), v) for k, v in fields)
        return
    names, has_dict = FIELDS[cls]
    known = set(names)
    for name, value in fields.items():
        if name in known:
            object.__setattr__(obj, name, value)
        elif has_dict:
            obj.__dict__[name] = value
    if cls is JobEngine:
        obj.cfg = cfg


def dump(raw: bytes, values: int = 8) -> dict[str, Any]:
    """A SLD1 snapshot as JSON-able data, as written: objects by number and type name, each array as its
    dtype, shape and first `values` values (`steplens state dump`)."""
    head, blobs, body = sections(raw)

    def shown(code: int, i: int) -> Any:
        if code == REF:
            return {"$ref": i, "$type": head["types"][i]}
        dtype, shape = head["arrays"][i]
        flat = np.frombuffer(blobs[i], dtype=np.dtype(dtype))
        return {"$array": i, "dtype": np.dtype(dtype).name, "shape": shape, "values": flat[:values].tolist()}

    doc = _reader(shown, json=True).decode(body)
    return {"format": MAGIC.decode(), "version": head["version"], "root": doc["root"],
            "objects": [{"$id": i, "$type": name, "fields": fields}
                        for i, (name, fields) in enumerate(zip(head["types"], doc["objects"], strict=True))]}
