"""R6 slow group (G1–G4): a whole group's bandwidth off the other groups'.

Over groups with no R5 candidate, take each group's mean bandwidth μ_g; group g is
anomalous when |μ_g − μ̄| > 3σ̄, where μ̄ and σ̄ are the mean and sample std of the OTHER
groups' means (leave-one-out: with all groups included one bad group inflates σ̄ so much
that it can never pass 3σ̄ with fewer than 11 groups). Needs >= 3 other groups.
σ̄ is floored at `sigma_floor` x μ̄. Stateless: groups are compared within one period.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.rules.base import Alarms, FloatArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    k: float = 3.0
    min_groups: int = 3
    sigma_floor: float = 0.02


def evaluate(group_means: FloatArray, has_candidate: np.ndarray, params: Params) -> Alarms:
    means = as_array(group_means)
    eligible = np.isfinite(means) & ~np.asarray(has_candidate, dtype=bool)
    n = int(eligible.sum())
    if n < params.min_groups + 1:
        return Alarms.none()
    total = float(means[eligible].sum())
    total_sq = float((means[eligible] ** 2).sum())
    others = n - 1
    mu = (total - np.where(eligible, means, 0.0)) / others
    var = (total_sq - np.where(eligible, means, 0.0) ** 2 - others * mu * mu) / max(others - 1, 1)
    sigma = np.maximum(np.sqrt(np.maximum(var, 0.0)), params.sigma_floor * np.abs(mu))
    alarm = eligible & (np.abs(means - mu) > params.k * sigma)
    return Alarms.where(alarm, means, mu, np.where(means < mu, mu - params.k * sigma, mu + params.k * sigma))
