"""Fleet reference models: what a job *should* achieve on its hardware (issue #44).

Every other judgement in steplens is relative (a rank against its peers, a step against the
job's past), so a job that is slow from its first step, on every rank alike, looks normal.
These models are the absolute ruler: learned from the fleet's healthy jobs, versioned, and
serialised as plain data (no module paths) so a new fleet can start from an exported one.

- `CollectiveCurve`: paper 001's three-region latency of a collective against its message
  size, per (op, link class, group size): constant `t_s` up to `m1` bytes, a sigmoid
  transition up to `m2`, then `t_s + m / bw_max`.
- `KernelBench`: the fleet's FLOP/s for one kernel key and shape on one device kind (R4's
  `P_bench`), the distribution across jobs (p10 / p50 / p90), with the vendor peak as the prior
  where the fleet has no history.

Pure (numpy and orjson); the fitting lives in `streams/model/collectives.py` and
`streams/model/kernels.py`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

FORMAT = "steplens-reference-models"
FORMAT_VERSION = 1

# Link classes a collective's group runs over. "intra": every rank of the group on one host
# (HCCS / NVLink); "inter": across hosts over RDMA (RoCE / InfiniBand); "tcp": across hosts over
# TCP sockets (an RDMA fallback: wrong NCCL_SOCKET_IFNAME, IB disabled). A job cannot tell
# "tcp" from "inter" by its topology: it is judged against "inter", and being 3x slower than
# the fleet's "inter" curve is how a socket fallback shows.
LINK_CLASSES = ("intra", "inter", "tcp")

# Vendor dense BF16/FP16 peaks, FLOP/s: the prior of a kernel's benchmark where the fleet has none.
VENDOR_PEAK_FLOPS: dict[str, float] = {
    "ascend-910b": 313e12,
    "ascend-910c": 752e12,
    "nvidia-a100": 312e12,
    "nvidia-h100": 989e12,
    "nvidia-h200": 989e12,
}

FloatArray = npt.NDArray[np.float64]


def link_class_of(hosts_in_group: int) -> str:
    """The link class a group's collectives run over, from how many hosts the group spans."""
    return "intra" if hosts_in_group <= 1 else "inter"


@dataclass(frozen=True, slots=True)
class CollectiveCurve:
    """Paper 001's latency model of one collective on one link class and group size (eq. 2-4).

    Sizes are the message size per rank in bytes (the kernel summary's `bytes / count`), times
    in ns, `bw_max` in bytes per ns (= GB/s). Three regions:
    `t(m) = t_s` for m <= m1; `t(m) = m / 10**sig(log10 m)` for m1 < m < m2, the bandwidth's
    S-shaped rise in log space with `sig(x) = L / (1 + exp(-k (x - x0))) + b` (bytes per ns);
    `t(m) = t_s + m / bw_max` for m >= m2. 8 parameters, as in the paper.
    `fit_error`: the geomean relative error of the fit on its own samples; `samples`: how many.
    `m_min` / `m_max`: the message sizes it was fitted on (0: not recorded); outside them the curve
    extrapolates, and a judgement there deserves less trust.
    """

    op: str
    link: str
    group_size: int
    t_s_ns: float
    m1: float
    m2: float
    bw_max: float
    sig_l: float = 0.0
    sig_x0: float = 6.0
    sig_k: float = 1.0
    sig_b: float = 0.0
    fit_error: float = float("nan")
    samples: int = 0
    m_min: float = 0.0
    m_max: float = 0.0

    def time_ns(self, nbytes: float | FloatArray) -> FloatArray:
        """Expected transfer time of a message of `nbytes` bytes per rank, ns."""
        m = np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0)
        x = np.log10(m)
        log_bw = self.sig_l / (1.0 + np.exp(-self.sig_k * (x - self.sig_x0))) + self.sig_b
        middle = m / np.power(10.0, log_bw)
        t = np.where(m <= self.m1, self.t_s_ns, np.where(m >= self.m2, self.t_s_ns + m / self.bw_max, middle))
        return np.asarray(t, dtype=np.float64)

    def expected_ns(self, nbytes: float) -> float:
        return float(self.time_ns(np.array([nbytes]))[0])


@dataclass(frozen=True, slots=True)
class KernelBench:
    """The fleet's FLOP/s for one kernel key (metric and shape) on one device kind.

    p10 / p50 / p90: across jobs (one figure per job: its median over its healthy steps).
    source: "fleet" (learned from `jobs` jobs) or "prior" (the vendor peak; judged loosely).
    """

    key: str
    device_kind: str
    p10: float
    p50: float
    p90: float
    jobs: int
    source: str = "fleet"


@dataclass(frozen=True, slots=True)
class ReferenceModels:
    """One version of the fleet's models for one software stack."""

    version: int = 0
    stack: str = ""
    curves: tuple[CollectiveCurve, ...] = ()
    kernels: tuple[KernelBench, ...] = ()
    _curve_index: dict[tuple[str, str], list[CollectiveCurve]] = field(
        default_factory=dict, compare=False, repr=False)
    _kernel_index: dict[tuple[str, str], KernelBench] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for c in sorted(self.curves, key=lambda c: c.group_size):
            self._curve_index.setdefault((c.op, c.link), []).append(c)
        for k in self.kernels:
            self._kernel_index[(k.key, k.device_kind)] = k

    def curve(self, op: str, link: str, group_size: int) -> CollectiveCurve | None:
        """The curve of (op, link) for this group size, else the nearest group size (in log2)."""
        found = self._curve_index.get((op, link))
        if not found:
            return None
        return min(found, key=lambda c: (abs(math.log2(max(c.group_size, 1)) - math.log2(max(group_size, 1))),
                                         c.group_size))

    def kernel_bench(self, key: str, device_kind: str) -> KernelBench | None:
        """The fleet's benchmark for a kernel key, else the vendor peak as a prior, else None."""
        found = self._kernel_index.get((key, device_kind))
        if found is not None:
            return found
        peak = VENDOR_PEAK_FLOPS.get(device_kind)
        if peak is None:
            return None
        return KernelBench(key=key, device_kind=device_kind, p10=peak, p50=peak, p90=peak, jobs=0, source="prior")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "version": self.version, "stack": self.stack,
            "curves": [asdict(c) for c in self.curves], "kernels": [asdict(k) for k in self.kernels],
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ReferenceModels:
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a steplens reference model export (format {doc.get('format')!r})")
        if int(doc.get("format_version", 0)) > FORMAT_VERSION:
            raise ValueError(f"reference model format {doc.get('format_version')} is newer than this "
                             f"steplens reads ({FORMAT_VERSION})")
        curves = tuple(CollectiveCurve(**{**c, "fit_error": float("nan") if c.get("fit_error") is None
                                          else c["fit_error"]}) for c in doc.get("curves", []))
        kernels = tuple(KernelBench(**k) for k in doc.get("kernels", []))
        return cls(version=int(doc.get("version", 0)), stack=str(doc.get("stack", "")), curves=curves,
                   kernels=kernels)

    @classmethod
    def from_json(cls, data: bytes | str) -> ReferenceModels:
        doc = orjson.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("a reference model export is a JSON object")
        return cls.from_dict(doc)
