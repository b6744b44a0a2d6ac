"""A frame's collectives as columns over ranks, built once per released frame.

Three scopes read the step's collective kernels: the slow step (the transfer time and bytes of
each collective), R5/R6 (each rank's bandwidth, its wait removed: `transfer_ns`) and the slow
link (each group's shortest call). The frame's summary aggregates (`KernelRows`, one row each)
become per-key columns over ranks once (NaN where a rank did not report the key, or the field),
cached on the frame, and each scope reduces them with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streams.detect.windows.step_frames import FloatArray, Frame, IntArray


@dataclass(frozen=True, slots=True)
class CommColumn:
    """One collective key (e.g. "allreduce/dp") of one step, a value per rank."""

    domain: str | None   # the communication domain the summaries name ("dp", "tp", …); None if none did
    total_ns: FloatArray  # device time of the step's calls; NaN: the rank reported no such collective
    calls: FloatArray     # calls in the step; NaN where not an integer
    nbytes: FloatArray    # bytes moved in the step; NaN where not reported
    longest_ns: FloatArray  # the step's longest call (`max_ns`); NaN where not reported


def comm_columns(frame: Frame) -> dict[str, CommColumn]:
    """Per collective key, the frame's columns (computed on first use, then cached on the frame).

    A summary aggregate counts when it is a `comm` kernel with a positive device time; ranks beyond the
    frame's world are left out. Keys in order of first appearance; a key's domain is the first its
    aggregates name.
    """
    if frame.comm is not None:
        return frame.comm
    out: dict[str, CommColumn] = {}
    rows = frame.kernel_rows()
    if rows is not None:
        world = frame.seen.size
        for key, r in rows.by_name(rows.key, (rows.cat == rows.code("comm")) & (rows.total_ns > 0)
                                   & (rows.rank < world)):
            ranks = rows.rank[r]
            cols = np.full((4, world), np.nan)
            cols[0, ranks] = rows.total_ns[r]  # a rank listed twice (a duplicate summary): the later one
            cols[1, ranks] = rows.count[r]
            cols[2, ranks] = rows.nbytes[r]
            longest = rows.max_ns[r]
            cols[3, ranks] = np.where(longest > 0, longest, np.nan)
            named = rows.domain[r][rows.domain[r] >= 0]
            out[key] = CommColumn(domain=rows.names[int(named[0])] if named.size else None,
                                               total_ns=cols[0], calls=cols[1], nbytes=cols[2], longest_ns=cols[3])
    frame.comm = out
    return out


def transfer_ns(cols: Sequence[CommColumn], groups: IntArray) -> list[FloatArray]:
    """Each rank's transfer time in the step's calls of each column: its kernel time, wait removed.

    A collective kernel (NCCL/HCCL) starts when its rank launches it and spins until the group's
    last member arrives; then every member moves the data and they finish together. A rank's
    kernel time is therefore its wait plus the transfer, and the member that waited least (the
    last arriver) shows the transfer alone. Per group (`groups`: each rank's group id in the
    domain, < 0: none; ranks past its end have none), the transfer rate is the least time per
    byte among the members that reported bytes, over every column in `cols`: one collective
    key, or the point-to-point keys of a domain together (a PP send and its recv are the two
    ends of one transfer; the wait sits on the end that was posted first). A rank's transfer is
    its bytes at that rate (the pipeline's end stages make fewer calls), its wait its kernel
    time minus that. NaN where the rank reported no bytes or has no group. Columns, no per-rank
    loop.
    """
    n = cols[0].total_ns.size if cols else 0
    if groups.size != n:  # a topology that knows fewer (or more) ranks than the frame: the others have no group
        groups = np.concatenate([groups[:n], np.full(max(0, n - groups.size), -1, dtype=np.int64)])
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = [c.total_ns / c.nbytes for c in cols]  # ns per byte
    ok = [np.isfinite(r) & (r > 0) & (groups >= 0) for r in rates]
    least = np.full(int(groups.max(initial=-1)) + 1, np.inf)
    for rate, sel in zip(rates, ok, strict=True):
        np.minimum.at(least, groups[sel], rate[sel])
    return [np.where(sel, c.nbytes * least[np.where(sel, groups, 0)], np.nan) if sel.any() else np.full(n, np.nan)
            for c, sel in zip(cols, ok, strict=True)]
