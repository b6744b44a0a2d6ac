"""A new version of the fleet's reference models from its history (`steplens model fit`).

Gathers the samples (`streams/model/store.py`: transfer times of collectives and each job's
kernel FLOP/s, steps under incidents left out) and fits one curve per (op, link class, group
size) and one benchmark per (kernel key, device kind). A curve needs a few distinct message
sizes to have a shape; with fewer points it still predicts (the fit's degenerate forms), and
its `samples` says how little it knew.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sinks.backend import Backend
from streams.model.collectives import fit_curves
from streams.model.kernels import fit_kernel_bench
from streams.model.reference import ReferenceModels
from streams.model.store import CollectiveSamples, collect_collectives, collect_kernels


def curve_samples(samples: CollectiveSamples, *, min_samples: int = 3
                  ) -> dict[tuple[str, str, int], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """(sizes, transfer times) per (op, link, group size) with at least `min_samples` calls."""
    ops = np.asarray(samples.op, dtype=object)
    links = np.asarray(samples.link, dtype=object)
    out = {}
    for op, link, size in sorted(set(zip(samples.op, samples.link, samples.group_size.tolist(), strict=True))):
        mine = (ops == op) & (links == link) & (samples.group_size == size)
        if int(mine.sum()) >= min_samples:
            out[(op, link, int(size))] = (samples.nbytes[mine], samples.transfer_ns[mine])
    return out


def fit_from_history(backend: Backend, *, stack: str = "", min_jobs: int = 1) -> ReferenceModels:
    """The models the fleet's history in `backend` supports (version 0: `store.save` numbers it)."""
    curves = fit_curves(curve_samples(collect_collectives(backend)))
    kernels = tuple(k for k in fit_kernel_bench(collect_kernels(backend)) if k.jobs >= min_jobs)
    return ReferenceModels(version=0, stack=stack, curves=curves, kernels=kernels)
