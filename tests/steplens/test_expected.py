"""Expected vs observed step time where a user looks: `steplens perf` and its `--breakdown` (issue #44).

Healthy simulated jobs of two layouts teach the fleet's reference models (`steplens model fit`), each
layout at three model sizes: a collective's curve needs several message sizes to have a shape (one
size gives the fit's degenerate constant, which predicts every other size alike). A job whose
inter-host links run over TCP sockets (RDMA unusable) must stand well above its expectation with the
DP all-reduce on inter-host links named, and a healthy job of a layout the models never saw must sit
near its expectation. Landed through the contract's decoder and the
batching writer, on the 18.16 server and on chdb.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from producers.simulator.fleet import FleetJob
from producers.simulator.model import TCP_SOCKETS, Hardware, ModelConfig
from producers.simulator.topology import Topology
from sinks.backend import Backend
from sinks.embedded import EmbeddedBackend
from steplens.cli import main
from steplens.queries.expected import job_expectation
from tests.sinks.landing import land_jobs, point_cli_at

pytestmark = pytest.mark.clickhouse

STEPS = 40  # the fleet's fit keeps a job's warm-up steps: enough steps that they weigh little
# few micro-batches per step: the DP gradient's exposed last bucket is a good share of the step, as in a
# small-batch data-parallel job (with eight, the slow links' cost hides behind compute)
MODELS = tuple(ModelConfig(layers=layers, seq=seq, microbatches=2) for layers, seq in ((8, 512), (16, 1024),
                                                                                     (32, 2048)))
REFERENCE_LAYOUTS = (Topology(dp=4, tp=4, pp=1), Topology(dp=8, tp=2, pp=1))


def sim(job_id: str, topo: Topology, seed: int, hardware: Hardware | None = None,
        model: ModelConfig = MODELS[1]) -> FleetJob:
    """Jobs side by side on hosts of their own (a host's device samples are keyed by host and time)."""
    start_ns = (int(time.time()) - 600) * 1_000_000_000
    hosts = [f"{job_id}-node-{h}" for h in range(topo.hosts)]
    return FleetJob(job_id, topo, STEPS, seed=seed, start_ns=start_ns, host_names=hosts, hardware=hardware,
                    model=model)


def land(backend: Backend, jobs: list[FleetJob]) -> None:
    land_jobs(backend, jobs)


@pytest.fixture
def cli_on(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Backend:
    """STEPLENS_* pointing the CLI at `backend`'s database."""
    point_cli_at(backend, monkeypatch)
    return backend


def _json(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, list[dict[str, object]], str]:
    code = main([*args, "--format", "json"])
    got = capsys.readouterr()
    return code, orjson.loads(got.out) if got.out.strip() else [], got.err


def _report(tmp_path: Path, job: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    """`steplens report --job`: the page and its step-time chart's figure."""
    out = tmp_path / f"{job}.html"
    assert main(["report", "--job", job, "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    found = re.search(r"const FIGS=(.*?);const CONFIG=", page)
    assert found is not None
    figs: dict[str, dict[str, Any]] = orjson.loads(found.group(1))
    capsys.readouterr()  # the report's path on stdout
    return page, figs["step-time"]


def test_perf_says_how_far_a_job_runs_from_what_the_fleet_expects(
        cli_on: Backend, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    backend = cli_on
    land(backend, [sim(f"ref-{n}-{i}", topo, seed=10 + 3 * n + i, model=model)
                   for n, topo in enumerate(REFERENCE_LAYOUTS) for i, model in enumerate(MODELS)])
    if isinstance(backend, EmbeddedBackend):
        backend.close()  # chdb binds one path per process: the CLI opens it again

    # no reference models yet: the columns say so, and stderr says what to do
    code, perf, err = _json(capsys, ["perf", "--job", "ref-0-1"])
    assert code == 0 and perf[0]["expected_step_ms"] is None and perf[0]["vs_expected"] is None
    assert "no reference models: run `steplens model fit`" in err
    assert main(["perf", "--job", "ref-0-1", "--breakdown"]) == 1
    page, fig = _report(tmp_path, "ref-0-1", capsys)
    assert "no reference models: run <code>steplens model fit</code>" in page
    assert not any(str(t["name"]).startswith("expected") for t in fig["data"])

    assert main(["model", "fit", "--stack", "sim"]) == 0
    capsys.readouterr()
    if isinstance(backend, EmbeddedBackend):
        backend = EmbeddedBackend(backend.path, backend.database)
    land(backend, [sim("slow-net", Topology(dp=4, tp=4, pp=1), seed=13, hardware=Hardware(inter=TCP_SOCKETS)),
                   sim("new-layout", Topology(dp=8, tp=4, pp=1), seed=14),
                   sim("new-sizes", Topology(dp=2, tp=8, pp=1), seed=15),  # group sizes no fitted job had
                   sim("new-pipeline", Topology(dp=4, tp=2, pp=2), seed=16)])
    if isinstance(backend, EmbeddedBackend):
        backend.close()

    ratios = {}
    for job in ("slow-net", "new-layout", "ref-0-1", "new-sizes", "new-pipeline"):
        code, perf, err = _json(capsys, ["perf", "--job", job])
        assert code == 0 and "no reference models" not in err
        row = perf[0]
        ratios[job] = float(row["vs_expected"])  # type: ignore[arg-type]
        assert float(row["expected_step_ms"]) > 0  # type: ignore[arg-type]
    assert ratios["slow-net"] > 1.3, ratios
    assert abs(ratios["new-layout"] - 1.0) < 0.10, ratios
    assert abs(ratios["ref-0-1"] - 1.0) < 0.10, ratios
    assert abs(ratios["new-sizes"] - 1.0) < 0.10 and abs(ratios["new-pipeline"] - 1.0) < 0.10, ratios

    code, parts, err = _json(capsys, ["perf", "--job", "slow-net", "--breakdown"])
    assert code == 0
    by = {str(p["component"]): p for p in parts}
    assert {"step", "compute", "exposed comm", "host/data"} <= set(by)
    assert {int(p["model_version"]) for p in parts} == {1}  # type: ignore[call-overload]
    dp = by["comm:allreduce/dp"]
    assert float(dp["ratio"]) > 2.0, parts  # type: ignore[arg-type]
    assert "inter-host RDMA" in str(dp["detail"]) and "all-reduce" in str(dp["detail"])
    worst = max((p for p in parts if str(p["component"]).startswith(("comm:", "compute"))),
                key=lambda p: float(p["ratio"]))  # type: ignore[arg-type]
    assert worst["component"] == "comm:allreduce/dp"
    assert "DP all-reduce" in err and "inter-host RDMA" in err and "its expected time" in err
    assert float(by["compute"]["ratio"]) == pytest.approx(1.0, abs=0.1)  # type: ignore[arg-type]
    tp = by["comm:allreduce/tp"]
    assert "intra-host" in str(tp["detail"]) and float(tp["ratio"]) == pytest.approx(1.0, abs=0.25)  # type: ignore[arg-type]
    assert float(by["step"]["ratio"]) == pytest.approx(ratios["slow-net"], rel=0.05)  # type: ignore[arg-type]

    # the report of the slow job: the expected level on its step-time chart, the parts in a table
    capsys.readouterr()
    page, fig = _report(tmp_path, "slow-net", capsys)
    level = [t for t in fig["data"] if t["name"] == "expected (reference models v1)"]
    want = float(by["step"]["expected_ms"])  # type: ignore[arg-type]
    assert len(level) == 1 and level[0]["y"][0] == pytest.approx(want, rel=1e-3)
    observed = [t for t in fig["data"] if t["name"] in ("step time", "p50")]
    assert observed and min(observed[0]["y"]) > level[0]["y"][0] * 1.2  # every step above the level
    assert "Expected vs observed" in page and "comm:allreduce/dp" in page
    assert "DP all-reduce" in page and "x its expected time" in page

    code, parts, _ = _json(capsys, ["perf", "--job", "new-layout", "--breakdown"])
    assert code == 0
    assert all(float(p["ratio"]) < 1.3 for p in parts if p["ratio"] is not None), parts  # type: ignore[arg-type]

    # a long job is read over its newest steps only (its warm-up falls out of the medians)
    again = EmbeddedBackend(backend.path, backend.database) if isinstance(backend, EmbeddedBackend) else backend
    window = job_expectation(again, "slow-net", max_steps=10)
    if again is not backend:
        again.close()
    assert window is not None and (window.steps, window.step_first, window.step_last) == (10, STEPS - 10, STEPS - 1)
    assert window.expectation is not None and window.expectation.step.ratio > 1.3
