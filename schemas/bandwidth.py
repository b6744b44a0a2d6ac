"""nccl-tests' bus-bandwidth factors (spec §1, G1–G4): how many times a rank's message crosses the links.

One definition for every stage that turns a collective's message size into link traffic: the
simulator's collective times and the reference models' curves across group sizes.
"""

from __future__ import annotations


def bus_factor(op: str, group_size: int) -> float:
    """AllReduce 2(n−1)/n, AllGather / ReduceScatter / AllToAll (n−1)/n, the rest 1; 0 for a group of one."""
    n = group_size
    if n <= 1:
        return 0.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0
