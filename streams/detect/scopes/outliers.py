"""Outlier statistics shared by the scopes: Dixon's Q critical values and grouped order statistics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Dixon's r10 = (x(n) - x(n-1)) / (x(n) - x(1)) for the largest value of n normal samples,
# one-sided 99.5 % critical values for n = 3..30 (Monte Carlo, 4e5 draws each; they match
# Rorabacher's two-sided 99 % table). Used as mstt does: the late arriver is an outlier
# when Q exceeds the critical value.
DIXON_Q995 = (0.994, 0.921, 0.823, 0.741, 0.68, 0.633, 0.595, 0.567, 0.543, 0.52, 0.503, 0.487, 0.474, 0.462,
              0.453, 0.442, 0.434, 0.425, 0.419, 0.409, 0.404, 0.399, 0.392, 0.39, 0.385, 0.38, 0.376, 0.372)


def dixon_critical(n: IntArray) -> FloatArray:
    """Critical Q per group size (NaN outside 3..30: no Dixon verdict there)."""
    table = np.asarray((np.nan, np.nan, np.nan, *DIXON_Q995))
    out = np.full(n.shape, np.nan)
    ok = (n >= 3) & (n <= 30)
    out[ok] = table[n[ok]]
    return out


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
