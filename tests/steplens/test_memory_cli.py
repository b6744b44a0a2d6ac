"""`steplens memory`: a job's device memory per rank from its steps' allocator statistics (contract 1.5),
against what its declared model should take; landed as the workers land it, on the 18.16 server and chdb."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from producers.simulator.catalogue import scenario_job
from producers.simulator.traits import Traits
from schemas import ModelShape
from sinks.backend import Backend
from steplens.cli import main
from tests.sinks.landing import land_jobs, point_cli_at

pytestmark = pytest.mark.clickhouse

# a 7B decoder, bf16 with fp32 Adam states sharded over the DP group (ZeRO-1), selective recompute
SHAPE = ModelShape(params=6_738_415_616, layers=32, hidden=4096, heads=32, ffn=11008, seq=4096, micro_batch=1,
                   vocab=32000, precision=2, optimizer="adam", recompute="selective", zero_stage=1)


def _rows(capsys: pytest.CaptureFixture[str], job: str) -> tuple[int, list[dict[str, object]], str]:
    code = main(["memory", "--job", job, "--format", "json", "--limit", "100"])
    got = capsys.readouterr()
    return code, orjson.loads(got.out) if got.out.strip() else [], got.err


def test_the_leaking_rank_comes_first_with_its_growth_and_the_model_s_expectation(
        backend: Backend, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    leak = scenario_job("memory_leak_fast", ranks=16, steps=60, seed=5)
    plain = scenario_job("healthy", ranks=16, steps=20, seed=6, job_id="no-memory",
                         traits=Traits(allocator_stats=False))
    start, _ = leak.job_events()
    land_jobs(backend, [leak, plain], [replace(start, model_shape=SHAPE)])
    point_cli_at(backend, monkeypatch)

    code, rows, _ = _rows(capsys, leak.job_id)
    assert code == 0 and len(rows) == 16
    (rank,) = leak.faults[0].ranks
    first = rows[0]
    assert first["rank"] == rank and first["capacity_gib"] == 64.0 and first["steps"] == 60
    # 0.3 % of 64 GiB a step is ~197 MiB from step 10: the least-squares growth over steps 0-59 a little less
    assert 0.85 * 0.003 * 64 * 1024 < first["growth_mib_per_step"] <= 0.003 * 64 * 1024  # type: ignore[operator]
    assert all(abs(r["growth_mib_per_step"]) < 2.0 for r in rows[1:])  # type: ignore[arg-type]
    assert first["max_peak_gib"] == first["peak_gib"] and first["reserved_gib"] >= first["peak_gib"]  # type: ignore[operator]
    expected = first["expected_gib"]
    assert isinstance(expected, float) and 4.0 < expected < 64.0
    assert first["vs_expected"] == pytest.approx(first["peak_gib"] / expected, rel=0.01)  # type: ignore[operator]

    code, rows, err = _rows(capsys, "no-memory")
    assert (code, rows) == (1, []) and "contract 1.5" in err
