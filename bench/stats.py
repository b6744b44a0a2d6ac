"""Small statistics for benchmarks on a noisy shared machine: medians with bootstrap intervals.

Why bootstrap: step times on a loaded box are skewed and drift, so normal-theory intervals lie.
Why blocks: consecutive steps are correlated (a burst of background load hits several in a row),
so resampling single steps would make the interval too narrow; the unit resampled here is a
*round* (one block of every mode, run back to back), which also keeps the modes paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

DRAWS = 4000
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with a (percentile bootstrap) confidence interval [lo, hi]."""

    value: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        """Half the interval's width: the ± figure to print next to the value."""
        return (self.hi - self.lo) / 2

    def rounded(self, digits: int) -> dict[str, float]:
        return {"value": round(self.value, digits), "lo": round(self.lo, digits), "hi": round(self.hi, digits)}


def _bounds(dist: NDArray[np.float64], level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(dist, [tail, 100 - tail])
    return float(lo), float(hi)


def median_ci(values: Sequence[float] | NDArray[np.float64], *, draws: int = DRAWS, level: float = LEVEL,
              seed: int = 0) -> Estimate:
    """Median of independent values (e.g. one ratio per round) and its bootstrap interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("median_ci needs at least one value")
    rng = np.random.default_rng(seed)
    boot = np.median(x[rng.integers(0, x.size, (draws, x.size))], axis=1)
    lo, hi = _bounds(boot, level)
    return Estimate(float(np.median(x)), lo, hi)


def ratio_of_medians_ci(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]], *, draws: int = DRAWS,
                        level: float = LEVEL, seed: int = 0) -> Estimate:
    """median(all num values) / median(all den values), with a round (cluster) bootstrap interval.

    `num[i]` and `den[i]` are the step times of round i's block of each mode; rounds are resampled
    with replacement, keeping each round's two blocks together (paired).
    """
    if len(num) != len(den) or not num:
        raise ValueError("num and den need the same, non-zero number of rounds")
    a, b = _rect(num), _rect(den)
    value = float(np.nanmedian(a) / np.nanmedian(b))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.shape[0], (draws, a.shape[0]))
    ra = np.nanmedian(a[idx].reshape(draws, -1), axis=1)
    rb = np.nanmedian(b[idx].reshape(draws, -1), axis=1)
    lo, hi = _bounds(ra / rb, level)
    return Estimate(value, lo, hi)


def paired_ratio_ci(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]], *, draws: int = DRAWS,
                    level: float = LEVEL, seed: int = 0) -> Estimate:
    """Median over rounds of (median of round i's num block / median of its den block), with its interval.

    Each ratio compares two blocks run seconds apart, so slow drift of the machine cancels in it.
    """
    if len(num) != len(den) or not num:
        raise ValueError("num and den need the same, non-zero number of rounds")
    ratios = np.nanmedian(_rect(num), axis=1) / np.nanmedian(_rect(den), axis=1)
    return median_ci(ratios, draws=draws, level=level, seed=seed)


def cost_ratio(cost_us: Estimate, step_ms: Estimate) -> Estimate:
    """1 + hook cost per step / step time, with a conservative interval from both intervals' ends."""
    return Estimate(1 + cost_us.value / (step_ms.value * 1000), 1 + cost_us.lo / (step_ms.hi * 1000),
                    1 + cost_us.hi / (step_ms.lo * 1000))


def _rect(blocks: Sequence[Sequence[float]]) -> NDArray[np.float64]:
    """Rounds as rows, padded with NaN to the longest block (blocks may lose a step or two)."""
    width = max(len(b) for b in blocks)
    if width == 0:
        raise ValueError("every block is empty")
    out = np.full((len(blocks), width), np.nan)
    for i, blk in enumerate(blocks):
        out[i, :len(blk)] = blk
    return out


__all__ = ["Estimate", "cost_ratio", "median_ci", "paired_ratio_ci", "ratio_of_medians_ci"]
