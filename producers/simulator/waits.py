"""Where each rank waits for its peers: the collective-wait trait's timing (producers.simulator.traits).

On NCCL/HCCL a collective kernel starts when its rank launches it and spins until the last
member of the group has arrived, then moves the data; every member finishes together. So a
rank's kernel time is its wait for the group's last arriver plus the transfer, and the last
arriver's kernel is the transfer alone (what HTA, mstt and Holmes read to find late arrivers).

The step is synchronous, so waiting propagates along the groups: a rank late by Δ makes its TP
peers wait Δ in their TP all-reduce (each layer, so the step's TP kernel carries it), the
other stages of its pipeline wait in PP recv for the activations/gradients it sends late, and
the DP groups of every stage then wait in the gradient all-reduce for the replica that was
held up. `couple` follows that order (TP, CP, EP inside a layer; then PP; then DP) over the
groups' arrival times until every rank is at the job's last arrival, and returns how much of
each rank's wait lands in which domain's kernel. Vectorised over ranks (no per-rank loop).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

COUPLING = ("tp", "cp", "ep", "pp", "dp")  # inside a layer first, then the pipeline, then the replicas
MAX_ROUNDS = 4


def group_max(values: FloatArray, gids: IntArray) -> FloatArray:
    """Per rank, the maximum of `values` over its group."""
    out = np.full(int(gids.max()) + 1, -np.inf)
    np.maximum.at(out, gids, values)
    result: FloatArray = out[gids]
    return result


def couple(arrival: FloatArray, gids: dict[str, IntArray], domains: Sequence[str]) -> tuple[dict[str, FloatArray],
                                                                                               FloatArray]:
    """Per domain, each rank's wait (same unit as `arrival`) in that domain's collective, and what is left.

    `arrival`: when each rank reaches its collectives (its own work before them); `domains`:
    those with a collective, in `COUPLING` order. Each domain's collective holds every member
    until the group's latest arrival; the rounds repeat until no rank is behind the job's last
    arrival (one round when DP, TP and PP together connect every rank, the Megatron layout).
    The remainder is non-zero only for ranks no collective connects to the last arriver.
    """
    now = np.asarray(arrival, dtype=np.float64).copy()
    waits = {d: np.zeros_like(now) for d in domains}
    last = float(now.max()) if now.size else 0.0
    for _ in range(MAX_ROUNDS):
        for d in domains:
            w = group_max(now, gids[d]) - now
            waits[d] += w
            now += w
        if not now.size or float(now.min()) >= last:
            break
    return waits, last - now
