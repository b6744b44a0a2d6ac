"""What every importer produces: one rank's profile as numpy columns, whatever the source format.

Times are microseconds on the source's clock (absolute), kept as float64. Kernel `kind` says
which part of the temporal breakdown a device task belongs to; names are interned once in
`names` and referenced by index so a multi-GB trace keeps only small integer columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

COMPUTE, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KIND_NAMES = ("compute", "communication", "memory", "other")

# Both generations of NCCL kernel names: ncclKernel_AllReduce_* (NCCL < 2.19) and ncclDevKernel_* (HTA #360).
NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


# a pipeline-parallel process group's description: Megatron's group_desc "PIPELINE_MODEL_PARALLEL_GROUP" (Kineto
# pg_config pg_desc), MindSpeed's HCCL group_name "pp" (torch_npu profiler_metadata.json parallel_group_info)
_PIPELINE_GROUP = re.compile(r"(pipeline|^pp(?![a-z]))", re.IGNORECASE)


def pipeline_stage(rank: int | None, groups: list[tuple[str, list[int]]]) -> int | None:
    """A rank's pipeline stage: its position in the pipeline group it belongs to (None when no group says)."""
    if rank is None:
        return None
    for desc, ranks in groups:
        if _PIPELINE_GROUP.search(desc) and rank in ranks and len(ranks) > 1:
            return ranks.index(rank)
    return None


def kernel_kind(name: str) -> int:
    """The same classes as HolisticTraceAnalysis' temporal breakdown, so the numbers compare."""
    if NCCL_KERNEL.match(name):
        return COMMUNICATION
    if MEMORY_KERNEL.match(name):
        return MEMORY
    if NOT_COMPUTE.match(name):
        return OTHER
    return COMPUTE


class Names:
    """String interning: one list of names, one dict to find an index."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}  # read-only for callers (hot loops look names up directly)

    def id(self, name: str) -> int:
        idx = self.index.get(name)
        if idx is None:
            idx = len(self.items)
            self.index[name] = idx
            self.items.append(name)
        return idx

    def __getitem__(self, idx: int) -> str:
        return self.items[idx]


class ColumnBuilder:
    """Appends to Python lists per batch and folds them into numpy arrays (bounded list growth)."""

    def __init__(self, **dtypes: Any) -> None:
        self.dtypes = dtypes
        self.lists: dict[str, list[Any]] = {k: [] for k in dtypes}
        self.parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in dtypes}

    def flush(self) -> None:
        for key, values in self.lists.items():
            if values:
                self.parts[key].append(np.asarray(values, dtype=self.dtypes[key]))
                values.clear()  # in place: parsers hold direct references to these lists

    def build(self) -> dict[str, npt.NDArray[Any]]:
        self.flush()
        return {
            k: (np.concatenate(p) if p else np.zeros(0, dtype=self.dtypes[k])) for k, p in self.parts.items()
        }


@dataclass(slots=True)
class Kernels:
    """Device tasks: kernels, memcpy/memset, collectives (one row each)."""

    ts: F64
    dur: F64
    kind: I8
    stream: I32
    name: I32
    corr: I64  # launch correlation id, -1 when unknown

    @staticmethod
    def empty() -> Kernels:
        return Kernels(np.zeros(0), np.zeros(0), np.zeros(0, np.int8), np.zeros(0, np.int32),
                       np.zeros(0, np.int32), np.zeros(0, np.int64))

    def take(self, mask: npt.NDArray[np.bool_] | I64) -> Kernels:
        return Kernels(self.ts[mask], self.dur[mask], self.kind[mask], self.stream[mask], self.name[mask],
                       self.corr[mask])

    def __len__(self) -> int:
        return int(self.ts.size)


@dataclass(slots=True)
class HostOps:
    """Host-side events (CPU operators, runtime calls, Python functions)."""

    ts: F64
    dur: F64
    name: I32
    tid: I64
    corr: I64  # runtime launches carry the correlation of the kernel they launch

    @staticmethod
    def empty() -> HostOps:
        return HostOps(np.zeros(0), np.zeros(0), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __len__(self) -> int:
        return int(self.ts.size)


@dataclass(frozen=True, slots=True)
class Step:
    number: int
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective operation as seen by one rank: the cross-rank and communication analyses use it."""

    name: str
    op: str  # allreduce, allgather, ... (lower case)
    ts: float
    dur: float
    bytes: float  # message size, NaN if unknown
    group: str  # process group / communication group name
    seq: int  # order of this collective within its group on this rank
    transfers_bytes: tuple[float, ...] = ()  # per-link transfer sizes when the dump has them
    transfers_us: tuple[float, ...] = ()


@dataclass(slots=True)
class ReferenceStep:
    """A step breakdown that the profiler itself computed (Ascend step_trace_time.csv), in µs."""

    step: int
    values: dict[str, float]


@dataclass(slots=True)
class Profile:
    """One rank's profile, format-independent."""

    source: str
    format: str
    rank: int | None
    world: int | None = None
    device: str | None = None
    names: Names = field(default_factory=Names)
    kernels: Kernels = field(default_factory=Kernels.empty)
    runtime: HostOps = field(default_factory=HostOps.empty)  # cudaLaunchKernel & co (launch side of flows)
    ops: HostOps = field(default_factory=HostOps.empty)  # CPU operators / python functions / annotations
    steps: list[Step] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    reference: list[ReferenceStep] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)  # process group -> ranks
    stage: int | None = None  # pipeline stage when known
    bytes_read: int = 0
    events: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def name_of(self, idx: int) -> str:
        return self.names[idx]


@dataclass(slots=True)
class ClusterTable:
    """msprof-analyze cluster outputs: per-rank step breakdowns and per-collective timings of many ranks."""

    source: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # rows of cluster_step_trace_time.csv
    collectives: list[dict[str, Any]] = field(default_factory=list)  # flattened cluster_communication.json
    groups: list[dict[str, Any]] = field(default_factory=list)  # communication_group.json
