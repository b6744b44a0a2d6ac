"""The reference models in ClickHouse: fitted from landed simulated jobs, stored as versions, exported.

The jobs go through the real path below Kafka: the simulator's wire events, the contract's
decoder, the land row mapping and the batching writer, on the 18.16 server and on chdb.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Incident
from sinks.backend import Backend
from steplens.cli import main
from streams.model.fit import fit_from_history
from streams.model.reference import ReferenceModels
from streams.model.store import collect_collectives, collect_kernels, load, save, versions
from tests.sinks.landing import land_jobs, point_cli_at

pytestmark = pytest.mark.clickhouse

LAYOUTS = {"fit-a": Topology(dp=4, tp=4, pp=1), "fit-b": Topology(dp=8, tp=2, pp=1)}


def land(backend: Backend, jobs: list[FleetJob], incidents: list[Incident] | None = None) -> None:
    land_jobs(backend, jobs, incidents or [])


def sim(job_id: str, topo: Topology, steps: int = 12, **kw: object) -> FleetJob:
    """Jobs run side by side on hosts of their own (a host's device samples are keyed by host and time)."""
    start_ns = (int(time.time()) - 600) * 1_000_000_000
    hosts = [f"{job_id}-node-{h}" for h in range(topo.hosts)]
    return FleetJob(job_id, topo, steps, seed=3, start_ns=start_ns, host_names=hosts, **kw)  # type: ignore[arg-type]


def test_fit_learns_each_link_class_and_kernel_and_leaves_incident_steps_out(backend: Backend) -> None:
    jobs = [sim(name, topo) for name, topo in LAYOUTS.items()]
    # fit-a's steps 0-5 are under an incident: nothing of them may be learned
    held = Incident(incident_id="held-1", job="fit-a", rule="SLOW_RANK", state="open", severity="warning",
                    scope="rank", summary="held", detected_ns=time.time_ns(), ranks=[1], step_first=0, step_last=5)
    land(backend, jobs, [held])

    samples = collect_collectives(backend)
    assert samples.nbytes.size > 0
    assert "fit-a" in samples.job, "fit-a's steps after its incident are learned from"
    per_job_points = {j: samples.job.count(j) for j in set(samples.job)}
    assert per_job_points["fit-a"] < per_job_points["fit-b"] * 0.6  # 6 of 12 steps left out
    # a TP group of 4 or 2 ranks sits on one host of the simulator's 8 devices; DP groups span hosts
    by_domain = {(op, link) for op, link in zip(samples.op, samples.link, strict=True)}
    assert ("allreduce", "intra") in by_domain and ("allreduce", "inter") in by_domain
    # the transfer time is the least-waiting rank's: never above the job's typical raw kernel time
    assert np.all(samples.transfer_ns > 0)

    kernels = collect_kernels(backend)
    assert {k.device_kind for k in kernels} == {"ascend-910b"}
    assert all(1e12 < k.flops_per_s < 313e12 for k in kernels)
    assert {k.job for k in kernels} == {"fit-a", "fit-b"}

    models = fit_from_history(backend, stack="sim")
    assert {c.link for c in models.curves} == {"intra", "inter"}
    assert models.kernels and all(k.device_kind == "ascend-910b" for k in models.kernels)
    v1 = save(backend, models)
    v2 = save(backend, models)
    assert (v1, v2) == (1, 2)
    assert [v[0] for v in versions(backend)] == [2, 1]
    back = load(backend, v1)
    assert back is not None and back.version == v1
    assert {(c.op, c.link, c.group_size) for c in back.curves} == {(c.op, c.link, c.group_size) for c in models.curves}
    for c, d in zip(sorted(models.curves, key=repr), sorted(back.curves, key=repr), strict=True):
        assert d.expected_ns(1e6) == pytest.approx(c.expected_ns(1e6), rel=1e-9)


def test_a_straggler_job_does_not_teach_the_curve_its_wait(backend: Backend) -> None:
    """A straggler's peers wait in every collective; the transfer time is the straggler's own call."""
    topo = LAYOUTS["fit-a"]
    healthy = sim("fit-h", topo)
    slow = sim("fit-s", topo, faults=[straggler(topo, 5, 1.5, 0, 11)])
    land(backend, [healthy, slow])
    samples = collect_collectives(backend)
    jobs = np.asarray(samples.job)
    for op, link in {(o, lk) for o, lk in zip(samples.op, samples.link, strict=True)}:
        mine = (np.asarray(samples.op) == op) & (np.asarray(samples.link) == link)
        h = np.median(samples.transfer_ns[mine & (jobs == "fit-h")])
        s = np.median(samples.transfer_ns[mine & (jobs == "fit-s")])
        assert s == pytest.approx(h, rel=0.15), (op, link)


def test_cli_fit_show_export_import(backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from sinks.embedded import EmbeddedBackend

    land(backend, [sim(name, topo) for name, topo in LAYOUTS.items()])
    point_cli_at(backend, monkeypatch)
    if isinstance(backend, EmbeddedBackend):
        backend.close()  # the CLI opens the store itself
    assert main(["model", "show"]) == 1  # nothing stored yet
    assert main(["model", "fit", "--stack", "sim"]) == 0
    assert "reference models v1" in capsys.readouterr().out
    out = tmp_path / "ref" / "v1.json"
    assert main(["model", "export", "-o", str(out)]) == 0
    exported = ReferenceModels.from_json(out.read_bytes())
    assert exported.version == 1 and exported.curves and exported.kernels
    assert main(["model", "import", str(out)]) == 0
    assert "stored as reference models v2" in capsys.readouterr().out
    assert main(["model", "show", "--format", "json"]) == 0
    assert main(["model", "show", "--version", "2"]) == 0
    assert "allreduce/inter" in capsys.readouterr().out
    assert main(["model", "show", "--version", "9"]) == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    assert main(["model", "import", str(bad)]) == 2
    assert "not a steplens reference model export" in capsys.readouterr().err
