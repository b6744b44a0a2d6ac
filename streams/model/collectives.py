"""Fit paper 001's three-region collective latency curve (eq. 2-4) to observed transfers.

The input is what the fleet sees: per call, the message size per rank (a kernel summary's
`bytes / count`) and the call's **transfer** time, the wait removed (the group's least-waiting
member's time, as `streams/detect/windows/comm_columns.transfer_ns` computes it). A rank's raw
kernel time includes its wait for the group's last arriver, and a curve fitted on that would
learn the fleet's stragglers instead of its links.

The fit is a small exhaustive search, numpy only (scipy is no dependency): every split of the
sorted sizes into the three regions is tried; for each, `t_s` and `bw_max` come from one linear
least squares over regions 1 and 3 weighted by 1/t (a relative error), and the sigmoid of
log10(bandwidth) over region 2 from a grid over (x0, k) with (L, b) linear, anchored at the
two boundaries so that a middle region with few or no samples still joins its neighbours. The
split with the least squared log error wins. Degenerate inputs fall back sensibly: only large
messages give `t_s + m / bw_max`; only small ones a constant `t_s` with `bw_max` the largest
bandwidth seen (a lower bound, so larger messages are predicted slow rather than free).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from schemas.bandwidth import bus_factor
from streams.model.reference import CollectiveCurve, ReferenceModels

FloatArray = npt.NDArray[np.float64]

# sigmoid grid: centre positions across the transition (fractions of its log10 width) and
# steepness (per decade of message size); refined once around the best pair
_X0_FRACTIONS = np.linspace(0.0, 1.0, 9)
_K_GRID = np.array([0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0])
# at most this many size bins enter the split search (each bin: the geomean time of its samples)
_MAX_BINS = 48
# an anchor at a region boundary weighs as much as this many samples in the sigmoid fit
_ANCHOR_WEIGHT = 2.0
# region 3 only where the size term is at least this share of the largest message's time
_MIN_LINEAR_SHARE = 0.05
# log10 bandwidth (bytes per ns) the sigmoid may span: beyond it a fit is a numerical artefact
_MAX_LOG_BW = 12.0
# squared log10 error below which fits count as exact (0.1 % error): ties go to fewer parameters
_VAR_FLOOR = (math.log10(1.001)) ** 2


def geomean_error(predicted: FloatArray, observed: FloatArray) -> float:
    """Geometric-mean relative error: exp(mean |ln(pred / obs)|) - 1 (symmetric, scale-free).

    A prediction 10 % high and one 10 % low count alike (unlike the mean of (p - o) / o, which a
    few large underestimates bias). NaN when nothing compares.
    """
    p = np.asarray(predicted, dtype=np.float64)
    o = np.asarray(observed, dtype=np.float64)
    ok = np.isfinite(p) & np.isfinite(o) & (p > 0) & (o > 0)
    if not ok.any():
        return float("nan")
    return float(np.expm1(np.mean(np.abs(np.log(p[ok] / o[ok])))))


def _bins(m: FloatArray, t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Samples grouped by size (equal sizes together, then at most `_MAX_BINS` log-spaced bins):
    (geomean size, geomean time, sample count) per bin, sorted by size."""
    lm, lt = np.log(m), np.log(t)
    uniq, inv = np.unique(m, return_inverse=True)
    if uniq.size > _MAX_BINS:
        edges = np.linspace(lm.min(), lm.max(), _MAX_BINS + 1)
        inv = np.clip(np.searchsorted(edges, lm, side="right") - 1, 0, _MAX_BINS - 1)
    nb = int(inv.max()) + 1
    cnt = np.bincount(inv, minlength=nb).astype(np.float64)
    keep = cnt > 0
    bm = np.bincount(inv, weights=lm, minlength=nb)[keep] / cnt[keep]
    bt = np.bincount(inv, weights=lt, minlength=nb)[keep] / cnt[keep]
    return np.exp(bm), np.exp(bt), cnt[keep]


def _linear_ends(m: FloatArray, t: FloatArray, w: FloatArray, r1: npt.NDArray[np.bool_],
                 r3: npt.NDArray[np.bool_]) -> tuple[float, float] | None:
    """t_s and 1 / bw_max from regions 1 (t = t_s) and 3 (t = t_s + m / bw), relative least squares."""
    sel = r1 | r3
    if not sel.any():
        return None
    scale = np.sqrt(w[sel]) / t[sel]
    a0 = scale
    a1 = np.where(r3[sel], m[sel], 0.0) * scale
    if not r3.any():
        return float(np.exp(np.average(np.log(t[sel]), weights=w[sel]))), math.nan
    a = np.stack([a0, a1], axis=1)
    sol, *_ = np.linalg.lstsq(a, scale * t[sel], rcond=None)
    t_s, inv_bw = float(sol[0]), float(sol[1])
    if t_s < 0.0:  # no fixed cost shows: a line through the origin
        t_s = 0.0
        inv_bw = float(np.dot(a1, scale * t[sel]) / max(float(np.dot(a1, a1)), 1e-300))
    # the "large" side must grow with size: a slope too small to matter at its largest message
    # (under 5 % of its time) is a constant region, and an absurd bandwidth predicted from it
    # would make every larger message free
    top = float(m[r3].max())
    if inv_bw <= 0.0 or top * inv_bw < _MIN_LINEAR_SHARE * (t_s + top * inv_bw):
        return None
    return t_s, inv_bw


def _sigmoid_fit(x: FloatArray, y: FloatArray, w: FloatArray, lo: float, hi: float,
                 ) -> tuple[float, float, float, float, float]:
    """(L, x0, k, b, weighted SSE) of y = L / (1 + exp(-k (x - x0))) + b, grid over (x0, k)."""
    width = max(hi - lo, 1e-3)

    def search(x0s: FloatArray, ks: FloatArray) -> tuple[float, float, float, float, float]:
        grid = np.meshgrid(x0s, ks, indexing="ij")
        x0g, kg = grid[0].ravel(), grid[1].ravel()
        with np.errstate(over="ignore"):
            s = 1.0 / (1.0 + np.exp(-kg[:, None] * (x[None, :] - x0g[:, None])))  # (grid, n)
        sw = w[None, :]
        # weighted linear least squares for (L, b) per grid point, closed form
        s0 = np.sum(w)
        s1 = np.sum(sw * s, axis=1)
        s2 = np.sum(sw * s * s, axis=1)
        y1 = np.sum(w * y)
        ys = np.sum(sw * s * y[None, :], axis=1)
        det = s2 * s0 - s1 * s1
        flat = np.abs(det) < 1e-12
        safe = np.where(flat, 1.0, det)
        big_l = np.where(flat, 0.0, (ys * s0 - s1 * y1) / safe)
        b = np.where(flat, y1 / s0, (s2 * y1 - s1 * ys) / safe)
        res = y[None, :] - (big_l[:, None] * s + b[:, None])
        sse = np.sum(sw * res * res, axis=1)
        i = int(np.argmin(sse))
        return float(big_l[i]), float(x0g[i]), float(kg[i]), float(b[i]), float(sse[i])

    big_l, x0, k, b, sse = search(lo + _X0_FRACTIONS * width, _K_GRID)
    step = width / (len(_X0_FRACTIONS) - 1)
    fine = search(np.linspace(x0 - step, x0 + step, 9), k * np.geomspace(0.7, 1.4, 7))
    return fine if fine[4] <= sse else (big_l, x0, k, b, sse)


def _candidate(m: FloatArray, t: FloatArray, w: FloatArray, i: int, j: int, lo_bound: float, hi_bound: float,
               ) -> tuple[float, tuple[float, float, float, float, float, float, float, float]] | None:
    """Cost (BIC-like, from the weighted squared log10 error) and parameters of the split: region 1 = [0, i),
    region 2 = [i, j), region 3 = [j, n) of the sorted bins."""
    n = m.size
    idx = np.arange(n)
    r1, r2, r3 = idx < i, (idx >= i) & (idx < j), idx >= j
    ends = _linear_ends(m, t, w, r1, r3)
    # boundaries: geometric midpoints between neighbouring bins, or just outside the samples
    m1 = math.sqrt(m[i - 1] * m[i]) if 0 < i < n else (lo_bound if i == 0 else hi_bound)
    m2 = math.sqrt(m[j - 1] * m[j]) if 0 < j < n else (lo_bound if j == 0 else hi_bound)
    m2 = max(m2, m1)
    if ends is None:
        if r3.any():
            return None
        t_s, inv_bw = float(t.min()), math.nan
    else:
        t_s, inv_bw = ends
    lx, ly = math.log10(m1), math.log10(m2)
    xs = [np.log10(m[r2])]
    ys = [np.log10(m[r2] / t[r2])]
    ws = [w[r2]]
    if r1.any():  # the constant region's bandwidth at its edge
        xs.append(np.array([lx]))
        ys.append(np.array([math.log10(m1 / max(t_s, 1e-9))]))
        ws.append(np.array([_ANCHOR_WEIGHT]))
    if r3.any():
        xs.append(np.array([ly]))
        ys.append(np.array([math.log10(m2 / (t_s + m2 * inv_bw))]))
        ws.append(np.array([_ANCHOR_WEIGHT]))
    x, y, wy = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    if x.size >= 2 and r2.any():
        sig_l, x0, k, b = _sigmoid_fit(x, y, wy, lx, ly)[:4]
    elif x.size:  # nothing to shape a transition: a flat bandwidth at the anchors' mean
        sig_l, x0, k, b = 0.0, (lx + ly) / 2.0, 1.0, float(np.average(y, weights=wy))
    else:
        sig_l, x0, k, b = 0.0, (lx + ly) / 2.0, 1.0, math.log10(m2 / max(t_s, 1e-9))
    if abs(sig_l) > _MAX_LOG_BW or abs(b) > _MAX_LOG_BW:
        return None
    if math.isnan(inv_bw):  # no saturated region observed: continue the transition's end bandwidth
        end_bw = 10.0 ** (sig_l / (1.0 + math.exp(-k * (ly - x0))) + b) if r2.any() else float(np.max(m / t))
        inv_bw = 1.0 / max(end_bw, 1e-12)
    if i == 0 and j == 0:  # every sample saturated: t_s + m / bw_max at every size, not a constant below
        m1 = m2 = 1.0
    params = (t_s, m1, m2, 1.0 / inv_bw, sig_l, x0, k, b)
    with np.errstate(over="ignore"):
        res = np.log10(_curve("", "", 0, params).time_ns(m) / t)
    # a BIC-like score: many splits fit a handful of samples (nearly) exactly, and the one
    # with the fewest parameters extrapolates best (a constant stays a constant)
    total = float(np.sum(w))
    free = 1 + (1 if r3.any() else 0) + (4 if r2.any() else 0) + (1 if 0 < i < n else 0) + (1 if 0 < j < n else 0)
    var = max(float(np.sum(w * res * res)) / total, _VAR_FLOOR)
    return total * math.log(var) + free * math.log(total + 1.0), params


def _curve(op: str, link: str, group_size: int, p: tuple[float, float, float, float, float, float, float, float],
           fit_error: float = math.nan, samples: int = 0) -> CollectiveCurve:
    return CollectiveCurve(op=op, link=link, group_size=group_size, t_s_ns=p[0], m1=p[1], m2=p[2], bw_max=p[3],
                           sig_l=p[4], sig_x0=p[5], sig_k=p[6], sig_b=p[7], fit_error=fit_error, samples=samples)


def fit_curve(op: str, link: str, group_size: int, nbytes: npt.ArrayLike, transfer_ns: npt.ArrayLike,
              ) -> CollectiveCurve:
    """The three-region curve of (op, link, group size) from calls' (bytes per rank, transfer ns).

    Samples with a non-positive or non-finite size or time are dropped. With no sample left the
    curve is NaN everywhere (`samples` = 0) so a caller cannot mistake it for a fitted one.
    `fit_error`: geomean relative error of the curve on its own samples (`geomean_error`).
    """
    m_all = np.asarray(nbytes, dtype=np.float64).ravel()
    t_all = np.asarray(transfer_ns, dtype=np.float64).ravel()
    ok = np.isfinite(m_all) & np.isfinite(t_all) & (m_all > 0) & (t_all > 0)
    m_all, t_all = m_all[ok], t_all[ok]
    if m_all.size == 0:
        nan = math.nan
        return _curve(op, link, group_size, (nan, nan, nan, nan, 0.0, 6.0, 1.0, nan))
    m, t, w = _bins(m_all, t_all)
    n = m.size
    lo_bound, hi_bound = float(m[0]) / 2.0, float(m[-1]) * 2.0
    best: tuple[float, tuple[float, float, float, float, float, float, float, float]] | None = None
    for i in range(n + 1):
        for j in range(i, n + 1):
            found = _candidate(m, t, w, i, j, lo_bound, hi_bound)
            if found is not None and (best is None or found[0] < best[0] - 1e-9):
                best = found
    if best is None:  # times fall with size everywhere: a constant is all the data supports
        best = _candidate(m, t, w, n, n, lo_bound, hi_bound)
        assert best is not None
    curve = _curve(op, link, group_size, best[1], samples=int(m_all.size))
    err = geomean_error(curve.time_ns(m_all), t_all)
    return replace(curve, fit_error=err, m_min=float(m_all.min()), m_max=float(m_all.max()))


def expected_transfer_ns(models: ReferenceModels, op: str, link: str, group_size: int, nbytes: float) -> float:
    """Expected transfer time (ns) of one call of `nbytes` per rank, NaN where no curve exists.

    The curve of the nearest group size is used; another group size moves its message over the
    links `bus_factor` times, so the size is scaled by the two factors' ratio first (a ring
    all-reduce of 8 ranks moves 1.75 m, of 4 ranks 1.5 m).
    """
    curve = models.curve(op, link, group_size)
    if curve is None or curve.samples == 0:
        return math.nan
    have, want = bus_factor(op, curve.group_size), bus_factor(op, group_size)
    scale = want / have if have > 0 and want > 0 else 1.0
    return curve.expected_ns(nbytes * scale)


def fit_curves(samples: Mapping[tuple[str, str, int], tuple[npt.ArrayLike, npt.ArrayLike]], *, pool: bool = True,
               ) -> tuple[CollectiveCurve, ...]:
    """One curve per (op, link, group size) of `samples` ((sizes per rank, transfer ns) per key).

    `pool`: each curve also learns from the other group sizes of its (op, link), their sizes scaled
    by the ratio of bus factors (`expected_transfer_ns`): a fleet rarely runs one group size over
    many message sizes, and a curve fitted on one size cannot place its regions. `fit_error` and
    `samples` stay those of the curve's own group size where it has samples.
    """
    out: list[CollectiveCurve] = []
    for (op, link, g), (sizes, times) in sorted(samples.items()):
        m = [np.asarray(sizes, dtype=np.float64).ravel()]
        t = [np.asarray(times, dtype=np.float64).ravel()]
        if pool:
            for (op2, link2, g2), (s2, t2) in samples.items():
                have, want = bus_factor(op, g2), bus_factor(op, g)
                if (op2, link2) == (op, link) and g2 != g and have > 0 and want > 0:
                    m.append(np.asarray(s2, dtype=np.float64).ravel() * have / want)
                    t.append(np.asarray(t2, dtype=np.float64).ravel())
        curve = fit_curve(op, link, g, np.concatenate(m), np.concatenate(t))
        own_err = geomean_error(curve.time_ns(m[0]), t[0]) if m[0].size else math.nan
        out.append(replace(curve, group_size=g, fit_error=own_err,
                           samples=int(np.sum(np.isfinite(m[0]) & (m[0] > 0)))))
    return tuple(out)
