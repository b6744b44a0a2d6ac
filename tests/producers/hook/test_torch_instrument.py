"""Zero-code-change PyTorch instrumentation on a real (single-process) torch model.

The in-memory exporter stands in for Kafka here (the DDP tests use the real broker).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook.core import RankHook, RankInfo
from producers.hook.flops import llama_layer_forward_flops, llama_train_flops
from producers.hook.torch import classify, instrument, resolve_domains
from schemas import Domain, KernelSummary, StepEvent, decode, decode_as


def test_one_instrument_call_gives_steps_and_phases() -> None:
    exporter = InMemoryExporter()
    hook = RankHook(RankInfo("job-t", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(exporter))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    inst = instrument(hook, model=model, optimizer=opt)
    orig_backward = inst._patched[0][2]
    loader = hook.wrap_loader([torch.randn(4, 8) for _ in range(5)])
    for x in loader:  # the training loop itself is unchanged
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        xg = x.clone().requires_grad_()
        torch.autograd.grad(model(xg).sum(), [xg])
        opt.step()
    inst.remove()
    assert torch.autograd.backward is orig_backward  # remove() restores torch
    assert hook.flush(10)
    steps = [decode_as(StepEvent, v) for v in exporter.values()]
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    for s in steps:
        p = s.phases
        assert p.forward_ms is not None and p.backward_ms is not None and p.optimizer_ms is not None
        assert p.grad_ms is not None and p.comm_exposed_ms is None  # no DDP, no collective
    assert all(s.phases.data_ms is not None for s in steps[1:])  # the first batch came before step 0 began
    assert hook.stats().errors == 0
    hook.close()


def test_forward_phase_without_module_hooks_runs_from_batch_to_backward() -> None:
    exporter = InMemoryExporter()
    hook = RankHook(RankInfo("job-f", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(exporter))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    inst = instrument(hook, model=model, optimizer=opt, auto_steps=False, forward_hooks=False)
    assert not model._forward_hooks and not model._forward_pre_hooks  # torch's fast call path stays
    loader = hook.wrap_loader([torch.randn(4, 8) for _ in range(3)])
    for x in loader:
        with hook.step():
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    inst.remove()
    assert hook.flush(10)
    steps = [decode_as(StepEvent, v) for v in exporter.values()]
    assert [s.step for s in steps] == [0, 1, 2]
    for s in steps:
        p = s.phases
        assert p.forward_ms is not None and p.forward_ms > 0 and p.backward_ms is not None
        assert p.forward_ms + p.backward_ms <= (s.end_ns - s.start_ns) / 1e6
    assert hook.stats().errors == 0
    hook.close()


def test_domains_declared_or_whole_world() -> None:
    assert resolve_domains(5, 8) == {"dp": Domain(group=0, size=8, index=5)}
    declared = resolve_domains(5, 8, {"tp": [4, 5, 6, 7], "dp": [1, 5]})
    assert declared == {"tp": Domain(group=4, size=4, index=1), "dp": Domain(group=1, size=2, index=1)}


def test_op_classification_and_flops_formula() -> None:
    assert classify("gloo:all_reduce") == ("comm", "allreduce", None)
    assert classify("aten::addmm") == ("compute", None, "F2")
    assert classify("aten::bmm") == ("compute", None, "F3")
    assert classify("aten::copy_")[0] == "memcpy"
    # spec §1 with q = 1 (no GQA): 8·b·s·h² + 4·b·s²·h + 6·b·s·h·ĥ
    b, s, h, f = 2, 16, 32, 64
    assert llama_layer_forward_flops(batch=b, seq=s, hidden=h, ffn_hidden=f, heads=4) == (
        8 * b * s * h * h + 4 * b * s * s * h + 6 * b * s * h * f)
    one = llama_train_flops(layers=1, batch=b, seq=s, hidden=h, ffn_hidden=f, heads=4, vocab=100)
    assert one == 3 * (8 * b * s * h * h + 4 * b * s * s * h + 6 * b * s * h * f + 2 * b * s * h * 100)
    assert llama_train_flops(layers=1, batch=b, seq=s, hidden=h, ffn_hidden=f, heads=4, vocab=100,
                             recompute=True) == one / 3 * 4


def _ddp_steps(comm_timing: str, steps: int = 4, no_sync_step: int | None = None) -> tuple[list[Any], int]:
    """A real one-rank gloo DDP model trained with the hook; its decoded events and gradient bytes."""
    import torch.distributed as dist

    exporter = InMemoryExporter()
    hook = RankHook(RankInfo("job-ddp", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(exporter, spool_dir=None))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        inst = instrument(hook, model=model, optimizer=opt, auto_steps=False, forward_hooks=False,
                          comm_timing=comm_timing)
        for i in range(steps):
            with hook.step(), (model.no_sync() if i == no_sync_step else contextlib.nullcontext()):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        inst.remove()
        assert hook.flush(30)
        assert hook.stats().errors == 0
    finally:
        hook.close()
        dist.destroy_process_group()
    return [decode(v) for v in exporter.values()], grad_bytes


def test_ddp_allreduce_timed_from_the_reducer_without_a_comm_hook() -> None:
    events, grad_bytes = _ddp_steps("reducer", steps=5, no_sync_step=2)
    steps = {e.step: e for e in events if isinstance(e, StepEvent)}
    summaries = {e.step: e for e in events if isinstance(e, KernelSummary)}
    assert sorted(steps) == [0, 1, 2, 3, 4]
    for i, s in steps.items():
        comm = [a for a in summaries[i].entries if a.op == "allreduce"] if i in summaries else []
        if i == 2:  # no_sync(): no all-reduce ran, nothing stale is reported
            assert s.phases.comm_exposed_ms is None and not comm
            continue
        assert s.phases.comm_exposed_ms is not None and s.phases.backward_ms is not None
        assert 0 <= s.phases.comm_exposed_ms <= s.phases.backward_ms
        (agg,) = comm  # one record per step: first bucket's launch to last bucket's completion
        assert agg.count == 1 and agg.bytes == grad_bytes and agg.group_size == 1
        assert 0 < agg.total_ns <= s.phases.backward_ms * 1e6


def test_ddp_allreduce_timed_per_bucket_by_the_opt_in_python_comm_hook() -> None:
    events, grad_bytes = _ddp_steps("python", steps=3)
    steps = [e for e in events if isinstance(e, StepEvent)]
    summaries = [e for e in events if isinstance(e, KernelSummary)]
    assert len(steps) == 3 and all(s.phases.comm_exposed_ms is not None for s in steps)
    for k in summaries:
        (agg,) = [a for a in k.entries if a.op == "allreduce"]
        assert agg.count >= 1 and agg.bytes == grad_bytes


def test_reattached_reducer_timing_reuses_the_learned_bucket_map() -> None:
    """Learning DDP's first bucket reads its logging data (~45 us); detaching and re-attaching the
    instrumentation (as bench-overhead does at every mode switch) must not learn it again."""
    import torch.distributed as dist

    hook = RankHook(RankInfo("job-ddp", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(InMemoryExporter(), spool_dir=None))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        inst = instrument(hook, model=model, optimizer=opt, auto_steps=False, forward_hooks=False)

        def train(steps: int) -> None:
            for _ in range(steps):
                with hook.step():
                    loss = model(torch.randn(4, 8)).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

        train(6)
        (first,) = inst._reducers
        assert first.reads >= 1 and first.first_bucket is not None  # learned from the logging data
        inst.remove()
        inst.attach_ddp(model)
        inst.patch_autograd()
        train(3)
        (again,) = inst._reducers
        assert again.reads == 0 and again.first_bucket is first.first_bucket
        inst.remove()
        assert hook.flush(30) and hook.stats().errors == 0
    finally:
        hook.close()
        dist.destroy_process_group()
