"""Dixon's Q test's critical values: one table for the live scopes and the offline cluster-table analysis.

Below the stages because both use it: the detect stage's slow-rank scope (a late arriver among its group)
and the profile stage's msprof cluster table (a slow rank among the cluster's), as mstt does.
"""

from __future__ import annotations

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
