"""Megatron-style rank layout: which ranks share a DP, TP, PP (and optional CP, EP) group.

Rank order, fastest-varying first: tp, cp, dp, pp, i.e.
``rank = ((pp_stage * dp + dp_idx) * cp + cp_idx) * tp + tp_idx`` (with cp = 1 this is
``(pp_stage * dp + dp_idx) * tp + tp_idx``). TP groups are therefore runs of consecutive ranks
(one node's NVLink/HCCS island), and a DP group holds the ranks with the same pipeline stage and
TP slot. Expert parallelism splits each DP group into consecutive blocks of `ep` replicas.

Group ids are unique per domain type within a job and are the same numbers the detectors use
to window ranks that must take the same time, so they are part of the event contract's meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from schemas import Domain

DEVICES_PER_HOST = 8


@dataclass(frozen=True, slots=True)
class Coords:
    """A rank's position along each parallel dimension."""

    tp: int
    cp: int
    dp: int
    pp: int


@dataclass(frozen=True)
class Topology:
    """A job's parallel layout. world = dp * tp * pp * cp; ep divides dp (no extra ranks)."""

    dp: int
    tp: int
    pp: int
    ep: int = 1
    cp: int = 1
    devices_per_host: int = DEVICES_PER_HOST

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "ep", "cp", "devices_per_host"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.dp % self.ep:
            raise ValueError(f"ep={self.ep} must divide dp={self.dp}")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def parallel(self) -> dict[str, int]:
        """Domain sizes for JobEvent.parallel (ep/cp only when used)."""
        sizes = {"dp": self.dp, "tp": self.tp, "pp": self.pp}
        if self.cp > 1:
            sizes["cp"] = self.cp
        if self.ep > 1:
            sizes["ep"] = self.ep
        return sizes

    def to_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep, "cp": self.cp,
                "devices_per_host": self.devices_per_host}

    # --- coordinates -------------------------------------------------------------------
    def _check(self, rank: int) -> None:
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside world of {self.world}")

    def coords(self, rank: int) -> Coords:
        self._check(rank)
        tp_idx = rank % self.tp
        rest = rank // self.tp
        cp_idx = rest % self.cp
        rest //= self.cp
        return Coords(tp=tp_idx, cp=cp_idx, dp=rest % self.dp, pp=rest // self.dp)

    def rank_of(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        for name, value, size in (("tp", tp, self.tp), ("cp", cp, self.cp), ("dp", dp, self.dp), ("pp", pp, self.pp)):
            if not 0 <= value < size:
                raise ValueError(f"{name}={value} outside [0, {size})")
        return ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def host(self, rank: int) -> str:
        self._check(rank)
        return f"node-{rank // self.devices_per_host}"

    def device(self, rank: int) -> int:
        self._check(rank)
        return rank % self.devices_per_host

    # --- domains -----------------------------------------------------------------------
    def domains(self, rank: int) -> dict[str, Domain]:
        """The rank's group in each domain; ep/cp appear only when their size is > 1."""
        c = self.coords(rank)
        out = {
            "dp": Domain(group=(c.pp * self.cp + c.cp) * self.tp + c.tp, size=self.dp, index=c.dp),
            "tp": Domain(group=(c.pp * self.dp + c.dp) * self.cp + c.cp, size=self.tp, index=c.tp),
            "pp": Domain(group=(c.dp * self.cp + c.cp) * self.tp + c.tp, size=self.pp, index=c.pp),
        }
        if self.cp > 1:
            out["cp"] = Domain(group=(c.pp * self.dp + c.dp) * self.tp + c.tp, size=self.cp, index=c.cp)
        if self.ep > 1:
            blocks = self.dp // self.ep
            group = ((c.pp * self.cp + c.cp) * self.tp + c.tp) * blocks + c.dp // self.ep
            out["ep"] = Domain(group=group, size=self.ep, index=c.dp % self.ep)
        return out

    @cached_property
    def coord_arrays(self) -> dict[str, npt.NDArray[np.int64]]:
        """Per dimension (tp, cp, dp, pp), every rank's coordinate (vectorised `coords`)."""
        rank = np.arange(self.world, dtype=np.int64)
        rest = rank // self.tp
        return {"tp": rank % self.tp, "cp": rest % self.cp, "dp": (rest // self.cp) % self.dp,
                "pp": rest // (self.cp * self.dp)}

    @cached_property
    def group_ids(self) -> dict[str, npt.NDArray[np.int64]]:
        """Per domain, an array of length world: the group id of every rank (same ids as `domains`)."""
        c = self.coord_arrays
        tp, cp, dp, pp = c["tp"], c["cp"], c["dp"], c["pp"]
        ids = {
            "dp": (pp * self.cp + cp) * self.tp + tp,
            "tp": (pp * self.dp + dp) * self.cp + cp,
            "pp": (dp * self.cp + cp) * self.tp + tp,
        }
        if self.cp > 1:
            ids["cp"] = (pp * self.dp + dp) * self.tp + tp
        if self.ep > 1:
            ids["ep"] = ((pp * self.cp + cp) * self.tp + tp) * (self.dp // self.ep) + dp // self.ep
        return ids

    @cached_property
    def group_index(self) -> dict[str, npt.NDArray[np.int64]]:
        """Per domain, every rank's index inside its group (for pp: the stage)."""
        c = self.coord_arrays
        out = {"dp": c["dp"], "tp": c["tp"], "pp": c["pp"]}
        if self.cp > 1:
            out["cp"] = c["cp"]
        if self.ep > 1:
            out["ep"] = c["dp"] % self.ep
        return out

    def domain_size(self, domain: str) -> int:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep}[domain]

    @cached_property
    def host_ids(self) -> npt.NDArray[np.int64]:
        """Every rank's host number (`node-<n>`)."""
        return np.arange(self.world, dtype=np.int64) // self.devices_per_host

    @property
    def hosts(self) -> int:
        return -(-self.world // self.devices_per_host)

    def spans_hosts(self, domain: str) -> bool:
        """Whether a group of `domain` crosses host boundaries (inter-host link class) or not."""
        gids = self.group_ids[domain]
        hosts = self.host_ids
        lo = np.full(int(gids.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(int(gids.max()) + 1, -1, dtype=np.int64)
        np.minimum.at(lo, gids, hosts)
        np.maximum.at(hi, gids, hosts)
        return bool(np.any(hi != lo))

    def host_ranks(self, host: int) -> list[int]:
        first = host * self.devices_per_host
        return list(range(first, min(first + self.devices_per_host, self.world)))

    def groups(self, domain: str) -> dict[int, list[int]]:
        """Group id -> member ranks; rank order equals index order inside every group."""
        if domain not in self.group_ids:
            raise KeyError(f"domain {domain!r} not used by this topology")
        gids = self.group_ids[domain]
        order = np.argsort(gids, kind="stable")
        bounds = np.flatnonzero(np.diff(gids[order])) + 1
        return {int(gids[chunk[0]]): chunk.tolist() for chunk in np.split(order, bounds)}
