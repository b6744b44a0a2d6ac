"""A new version of the fleet's reference models from its history (`steplens model fit`).

Gathers the samples (`streams/model/store.py`: transfer times of collectives and each job's
kernel FLOP/s, steps under incidents left out) and fits one curve per (op, link class, group
size) and one benchmark per (kernel key, device kind). A curve needs a few distinct message
sizes to have a shape; with fewer points it still predicts (the fit's degenerate forms), and
its `samples` says how little it knew.
"""

from __future__ import annotations

import numpy as np

from sinks.backend import Backend
from streams.model.collectives import fit_curve
from streams.model.kernels import fit_kernel_bench
from streams.model.reference import CollectiveCurve, ReferenceModels
from streams.model.store import CollectiveSamples, collect_collectives, collect_kernels


def fit_curves(samples: CollectiveSamples, *, min_samples: int = 3) -> tuple[CollectiveCurve, ...]:
    """One curve per (op, link, group size) with at least `min_samples` calls."""
    keys = sorted(set(zip(samples.op, samples.link, samples.group_size.tolist(), strict=True)))
    ops = np.asarray(samples.op, dtype=object)
    links = np.asarray(samples.link, dtype=object)
    curves = []
    for op, link, size in keys:
        mine = (ops == op) & (links == link) & (samples.group_size == size)
        if int(mine.sum()) < min_samples:
            continue
        curves.append(fit_curve(op, link, int(size), samples.nbytes[mine], samples.transfer_ns[mine]))
    return tuple(curves)


def fit_from_history(backend: Backend, *, stack: str = "", min_jobs: int = 1) -> ReferenceModels:
    """The models the fleet's history in `backend` supports (version 0: `store.save` numbers it)."""
    curves = fit_curves(collect_collectives(backend))
    kernels = tuple(k for k in fit_kernel_bench(collect_kernels(backend)) if k.jobs >= min_jobs)
    return ReferenceModels(version=0, stack=stack, curves=curves, kernels=kernels)
