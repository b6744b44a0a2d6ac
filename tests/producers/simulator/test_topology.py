"""Topology: Megatron rank order and per-domain group ids, sizes and indexes."""

from __future__ import annotations

import pytest

from producers.simulator.topology import Topology
from schemas import StepEvent, decode, encode

TOPO = Topology(dp=4, tp=4, pp=4)


def test_world_and_rank_order() -> None:
    assert TOPO.world == 64
    for rank in range(TOPO.world):
        c = TOPO.coords(rank)
        assert rank == (c.pp * TOPO.dp + c.dp) * TOPO.tp + c.tp
        assert TOPO.rank_of(tp=c.tp, dp=c.dp, pp=c.pp) == rank
    assert TOPO.coords(5).tp == 1 and TOPO.coords(5).dp == 1 and TOPO.coords(16).pp == 1


@pytest.mark.parametrize("domain", ["dp", "tp", "pp"])
def test_groups_partition_the_world(domain: str) -> None:
    size = getattr(TOPO, domain)
    groups = TOPO.groups(domain)
    assert sorted(groups) == list(range(TOPO.world // size))  # ids unique and dense per domain type
    assert sorted(r for members in groups.values() for r in members) == list(range(TOPO.world))
    for gid, members in groups.items():
        assert len(members) == size
        doms = [TOPO.domains(r)[domain] for r in members]
        assert all(d.group == gid and d.size == size for d in doms)
        assert [d.index for d in doms] == list(range(size))


def test_group_membership_follows_megatron() -> None:
    for members in TOPO.groups("dp").values():  # same stage and TP slot, different replicas
        cs = [TOPO.coords(r) for r in members]
        assert len({c.pp for c in cs}) == 1 and len({c.tp for c in cs}) == 1
        assert sorted(c.dp for c in cs) == [0, 1, 2, 3]
    for members in TOPO.groups("tp").values():  # consecutive ranks on one host
        assert members == list(range(members[0], members[0] + 4))
        assert len({TOPO.host(r) for r in members}) == 1
    for members in TOPO.groups("pp").values():  # one rank per stage; index is the stage
        cs = [TOPO.coords(r) for r in members]
        assert [c.pp for c in cs] == [0, 1, 2, 3]
        assert [TOPO.domains(r)["pp"].index for r in members] == [0, 1, 2, 3]
        assert len({(c.dp, c.tp) for c in cs}) == 1


def test_host_and_device() -> None:
    assert [TOPO.host(r) for r in (0, 7, 8, 63)] == ["node-0", "node-0", "node-1", "node-7"]
    assert [TOPO.device(r) for r in (0, 7, 8, 63)] == [0, 7, 0, 7]
    assert set(TOPO.parallel()) == {"dp", "tp", "pp"}


def test_domains_are_contract_valid() -> None:
    for rank in range(TOPO.world):
        ev = StepEvent(job="j", rank=rank, world=TOPO.world, host=TOPO.host(rank), device=TOPO.device(rank),
                       domains=TOPO.domains(rank), step=0, start_ns=1, end_ns=2)
        assert decode(encode(ev)) == ev


def test_optional_cp_and_ep() -> None:
    topo = Topology(dp=4, tp=2, pp=2, ep=2, cp=2)
    assert topo.world == 32 and set(topo.domains(0)) == {"dp", "tp", "pp", "cp", "ep"}
    assert topo.parallel() == {"dp": 4, "tp": 2, "pp": 2, "cp": 2, "ep": 2}
    for domain, size in (("cp", 2), ("ep", 2), ("dp", 4)):
        groups = topo.groups(domain)
        assert sorted(groups) == list(range(topo.world // size))
        assert all(len(m) == size for m in groups.values())
    for members in topo.groups("ep").values():  # an EP group lies inside one DP group
        assert len({topo.domains(r)["dp"].group for r in members}) == 1
    with pytest.raises(ValueError):
        Topology(dp=3, tp=1, pp=1, ep=2)
    with pytest.raises(ValueError):
        TOPO.coords(64)
