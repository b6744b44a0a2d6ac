"""R5 slow rank in group (G1–G4): a rank's collective bandwidth off its group's recent figures.

Grouped by (DP group, collective op) — the caller passes one op at a time. The bandwidths
of the group's ranks over the last M periods give μ_g, σ_g (pooled, the current period
excluded); rank r is a candidate when |B_{g,r} − μ_g| > 3σ_g. σ_g is floored at
`sigma_floor` x μ_g so a perfectly constant history does not flag rounding noise.
Fewer than 2 past values in a group: no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    periods: int = 20
    k: float = 3.0
    sigma_floor: float = 0.02
    min_deviation: float = 0.0  # also require |B - mu_g| >= this x mu_g


@dataclass(slots=True)
class State:
    # group id -> per-period (count, sum, sum of squares), newest last
    periods: dict[int, list[tuple[int, float, float]]] = field(default_factory=dict)


def group_baseline(state: State, group: int) -> tuple[float, float, int]:
    rows = state.periods.get(group, [])
    n = sum(r[0] for r in rows)
    if n < 2:
        return float("nan"), float("nan"), n
    total = sum(r[1] for r in rows)
    total_sq = sum(r[2] for r in rows)
    mu = total / n
    var = max((total_sq - n * mu * mu) / (n - 1), 0.0)
    return mu, var ** 0.5, n


def evaluate(bandwidth: FloatArray, group: IntArray, state: State | None, params: Params
             ) -> tuple[State, Alarms]:
    bw = as_array(bandwidth)
    group = np.asarray(group, dtype=np.int64)
    state = state or State()
    mu = np.full(bw.size, np.nan)
    sigma = np.full(bw.size, np.nan)
    ok = np.isfinite(bw) & (group >= 0)
    for g in np.unique(group[ok]).tolist():
        m, s, _ = group_baseline(state, g)
        sel = ok & (group == g)
        mu[sel] = m
        sigma[sel] = max(s, params.sigma_floor * abs(m)) if np.isfinite(m) else np.nan
    judged = ok & np.isfinite(mu)
    dev = np.abs(bw - np.nan_to_num(mu))
    alarm = judged & (dev > params.k * np.nan_to_num(sigma)) & (dev >= params.min_deviation * np.abs(np.nan_to_num(mu)))
    threshold = np.where(bw < mu, mu - params.k * sigma, mu + params.k * sigma)
    for g in np.unique(group[ok]).tolist():
        vals = bw[ok & (group == g)]
        rows = state.periods.setdefault(g, [])
        rows.append((int(vals.size), float(vals.sum()), float((vals * vals).sum())))
        del rows[:-params.periods]
    return state, Alarms.where(alarm, bw, mu, threshold)
