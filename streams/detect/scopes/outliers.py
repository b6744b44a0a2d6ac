"""Outlier statistics shared by the scopes: grouped order statistics (Dixon's Q table: `streams/dixon.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(slots=True)
class GroupStats:
    """Order statistics of values per group id (vectorised over every group of a domain)."""

    order: IntArray       # indices into the input, sorted by (group, value)
    starts: IntArray      # first position of each group in `order`
    counts: IntArray
    groups: IntArray      # group id per group
    maximum: FloatArray
    second: FloatArray
    minimum: FloatArray
    mean: FloatArray
    median: FloatArray
    mad: FloatArray
    argmax: IntArray      # index into the input of each group's maximum


def group_stats(group: IntArray, values: FloatArray) -> GroupStats:
    order = np.lexsort((values, group)).astype(np.int64)
    g_sorted = group[order]
    v_sorted = values[order]
    groups, starts, counts = np.unique(g_sorted, return_index=True, return_counts=True)
    starts = starts.astype(np.int64)
    counts = counts.astype(np.int64)
    ends = starts + counts - 1
    maximum = v_sorted[ends]
    second = np.where(counts >= 2, v_sorted[np.maximum(ends - 1, starts)], np.nan)
    minimum = v_sorted[starts]
    mean = np.add.reduceat(v_sorted, starts) / counts
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    median = (v_sorted[lo] + v_sorted[hi]) / 2
    dev = np.abs(v_sorted - np.repeat(median, counts))
    dev_sorted = dev[np.lexsort((dev, g_sorted))]
    mad = (dev_sorted[lo] + dev_sorted[hi]) / 2
    return GroupStats(order=order, starts=starts, counts=counts, groups=groups.astype(np.int64), maximum=maximum,
                      second=second, minimum=minimum, mean=mean, median=median, mad=mad, argmax=order[ends])
