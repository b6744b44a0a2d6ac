"""R6 slow group (G1–G4): a whole group's bandwidth off the other groups'.

Over groups with no R5 candidate, take each group's mean bandwidth μ_g; group g is
anomalous when |μ_g − μ̄| > 3σ̄, where μ̄ is the median of the groups' means and σ̄ their
spread, 1.4826 × the median absolute deviation (the std of normal data). The spec's mean and
std let the slow groups hide themselves: one bad group inflates the std so much that it can
never pass 3σ̄ with fewer than 11 groups, and a degraded host link slows a quarter of the
pipelines and half the DP groups of a 64-rank job at once (mean and std, even leaving the
judged group out, then flag none of them). The median and MAD of the groups stay those of the
healthy majority. Needs >= `min_groups` + 1 groups. σ̄ is floored at `sigma_floor` x μ̄, and a
flagged group is also `min_deviation` x μ̄ off.
Stateless: groups are compared within one period.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    k: float = 3.0
    min_groups: int = 3
    sigma_floor: float = 0.02
    min_deviation: float = 0.0  # also require |μ_g − μ̄| >= this x μ̄


def evaluate(group_means: FloatArray, has_candidate: np.ndarray, params: Params) -> Alarms:
    means = as_array(group_means)
    eligible = np.isfinite(means) & ~np.asarray(has_candidate, dtype=bool)
    n = int(eligible.sum())
    if n < params.min_groups + 1:
        return Alarms.none()
    values = means[eligible]
    mu = float(np.median(values))
    sigma = max(1.4826 * float(np.median(np.abs(values - mu))), params.sigma_floor * abs(mu))
    alarm = eligible & (np.abs(means - mu) > params.k * sigma) & (np.abs(means - mu) >= params.min_deviation * abs(mu))
    mus = np.full(means.size, mu)
    return Alarms.where(alarm, means, mus, np.where(means < mu, mu - params.k * sigma, mu + params.k * sigma))
