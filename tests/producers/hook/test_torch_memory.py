"""Contract 1.5 in the PyTorch glue, on CPU torch: what a module and a HuggingFace-style config say of the
model's shape, and no memory fields from a CPU model (the CUDA/NPU reads run where a device is)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook.core import RankHook, RankInfo
from producers.hook.torch import instrument, model_shape_of, torch_memory_stats
from schemas import Domain, ModelShape, StepEvent, decode_as

LLAMA_7B = SimpleNamespace(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
                           intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096)


def test_a_module_gives_its_parameter_count_and_element_size() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(torch.bfloat16)
    assert model_shape_of(model) == ModelShape(params=8 * 16 + 16 + 16 + 1, param_bytes=2)


def test_a_config_gives_the_layers_widths_and_context_and_arguments_win() -> None:
    shape = model_shape_of(config=LLAMA_7B, micro_batch=4, seq=2048, optimizer="adam", zero_stage=1)
    assert shape == ModelShape(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, seq=2048,
                               micro_batch=4, optimizer="adam", zero_stage=1)
    gpt2 = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
    assert model_shape_of(config=gpt2) == ModelShape(layers=12, hidden=768, heads=12, seq=1024, vocab=50257)


def test_a_modules_own_config_is_read() -> None:
    model = torch.nn.Linear(4, 4)
    model.config = SimpleNamespace(num_hidden_layers=2, hidden_size=4)  # type: ignore[assignment]
    shape = model_shape_of(model)
    assert shape is not None and (shape.params, shape.layers, shape.hidden, shape.param_bytes) == (20, 2, 4, 4)


def test_a_shape_out_of_contract_or_empty_is_none() -> None:
    assert model_shape_of(config=LLAMA_7B, precision=3) is None  # 3-byte elements: out of contract
    assert model_shape_of(config=LLAMA_7B, optimizer="lion") is None
    assert model_shape_of() is None


def test_a_cpu_model_reports_no_device_memory() -> None:
    assert torch_memory_stats("cpu") is None
    assert torch_memory_stats() is None  # no accelerator initialised in this process
    exporter = InMemoryExporter()
    hook = RankHook(RankInfo("job-c", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(exporter))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    inst = instrument(hook, model=model, optimizer=opt)
    assert hook.memory is None
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    inst.remove()
    assert hook.flush(10)
    steps = [e for e in (decode_as(StepEvent, v) for v in exporter.values() if b'"step"' in v[:20])]
    assert steps and all(s.mem_peak_bytes is None and s.mem_reserved_bytes is None for s in steps)
    assert hook.close(10)


def test_the_capacity_is_the_device_properties_total_memory_and_never_raises() -> None:
    """`torch.cuda` and torch_npu alike: `get_device_properties(d).total_memory`, read once per device."""
    from producers.hook.torch import _capacity

    props = {0: SimpleNamespace(total_memory=80 * 2**30), 1: SimpleNamespace(total_memory=64 * 2**30)}
    module = SimpleNamespace(current_device=lambda: 1, get_device_properties=props.__getitem__)
    assert (_capacity(module, 0), _capacity(module, None)) == (80 * 2**30, 64 * 2**30)
    assert _capacity(module, 7) is None  # no such device: no capacity, no exception
    assert _capacity(SimpleNamespace(), 0) is None
    zero = SimpleNamespace(current_device=lambda: 0, get_device_properties=lambda d: SimpleNamespace(total_memory=0))
    assert _capacity(zero, None) is None
