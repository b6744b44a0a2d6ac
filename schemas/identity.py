"""Who sent an event: job, rank, host, device, and the rank's communication domains.

A rank belongs to several communication domains at once (one DP group, one TP group, one
PP pipeline, optionally EP and CP). Ranks that share a group id in a domain synchronise
with each other, so that is the unit in which "the same work should take the same time"
and in which a slow rank shows up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from schemas.bounds import PP_STAGE
from schemas.decoding import join, require

DomainType = Literal["dp", "tp", "pp", "ep", "cp"]
DOMAIN_TYPES: tuple[DomainType, ...] = ("dp", "tp", "pp", "ep", "cp")


@dataclass(frozen=True, slots=True, kw_only=True)
class Domain:
    """Membership in one communication group.

    group: id of the group, unique per domain type within the job.
    size: number of ranks in the group (a window over the group is complete at `size`).
    index: this rank's position in the group (for PP: the pipeline stage).
    """

    group: int
    size: int
    index: int

    def check(self, path: str) -> None:
        require(self.group >= 0, join(path, "group"), "must be >= 0")
        require(self.size >= 1, join(path, "size"), "must be >= 1")
        require(0 <= self.index < self.size, join(path, "index"), f"must be in [0, size={self.size})")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankIdentity:
    """Fields every per-rank event starts with."""

    job: str
    rank: int
    world: int
    host: str
    device: int
    domains: dict[str, Domain] = field(default_factory=dict)

    def check(self, path: str) -> None:
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(bool(self.host), join(path, "host"), "must not be empty")
        require(self.world >= 1, join(path, "world"), "must be >= 1")
        require(0 <= self.rank < self.world, join(path, "rank"), f"must be in [0, world={self.world})")
        require(self.device >= 0, join(path, "device"), "must be >= 0")
        for name, dom in self.domains.items():
            require(
                name in DOMAIN_TYPES,
                join(path, f"domains.{name}"),
                f"unknown domain type, expected one of {', '.join(DOMAIN_TYPES)}",
            )
            require(dom.size <= self.world, join(path, f"domains.{name}.size"), f"must be <= world={self.world}")
        pp = self.domains.get("pp")
        if pp is not None:
            low, high = PP_STAGE
            require(low <= pp.index <= high, join(path, "domains.pp.index"),
                    f"a pipeline stage must be in [0, {high}] (the range its column stores)")
