"""Rank hook: per-step telemetry from real training processes (PyTorch, torch_npu, MindSpore).

`start(job)` builds a hook that sends through a BackgroundEmitter to Kafka (settings from
STEPLENS_* variables) or to the node relay, follows the control topic (through the relay when
it sends through one and STEPLENS_RELAY_CONTROL is on: no Kafka client in the rank), and
registers this rank's device in the node's run directory for the device sampler. Framework glue
lives in `producers.hook.torch` and `producers.hook.mindspore` (each imports its framework, so
import them only when used).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from infra.clients import kafka_client_config
from infra.settings import HOOK_FLUSH_INTERVAL_S, Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import Exporter, KafkaExporter
from producers.hook.core import Emitter, HookStats, RankHook
from producers.hook.identity import RankInfo, launcher_attempt
from producers.hook.memory import AllocatorStats
from producers.hook.profiling import ProfilerBackend, ProfileRequest
from producers.sampler.ranks import register_device
from schemas import Domain, ModelShape, Topics

# How long a rank's events may wait before they are sent (a batch of 512 goes at once): the hook's
# builder thread wakes at this interval and hands the round's events to the emitter, sent at once
# (one wake-up of each helper thread per interval, whatever the step rate). Each send is
# one Kafka produce request whose client-side CPU (kafka-python's network and export threads, ~1.5 ms
# on bench-overhead's box) does not depend much on its size: sending 2 events per step at 50 steps/s
# cost 0.31 ms of helper CPU per step every 0.2 s, 0.13 ms every 1 s. On a node whose cores the ranks
# saturate that CPU is taken from training; the price is latency before detection sees a step (and
# bigger batches re-sent after an outage: delivery is at-least-once). 0.5 s: half-way. Setting:
# STEPLENS_HOOK_FLUSH_INTERVAL_S (Settings.hook_flush_interval_s, default HOOK_FLUSH_INTERVAL_S).


def kafka_emitter_factory(settings: Settings, topics: Topics, *, spool_dir: Path | None = None,
                          name: str = "steplens-hook",
                          flush_interval_s: float = 0.2) -> Callable[[], BackgroundEmitter]:
    """Builds a BackgroundEmitter (again in each forked child that emits) sending to Kafka, or to the
    node relay when `Settings.relay_socket` is set; start() sends a rank's events every
    `Settings.hook_flush_interval_s`, packed when `Settings.emit_pack`."""

    def build() -> BackgroundEmitter:
        exporter: Exporter
        if settings.relay_socket:  # the node relay runs the Kafka client (producers/relay)
            from producers.relay import RelayExporter

            exporter = RelayExporter(settings.relay_path)
        else:
            cfg = kafka_client_config(settings, "producer")
            bootstrap = cfg.pop("bootstrap_servers")
            exporter = KafkaExporter(bootstrap, client_id=f"{name}-{os.getpid()}", extra_config=cfg)
        return BackgroundEmitter(exporter, topics, spool_dir=spool_dir, name=name, flush_interval_s=flush_interval_s,
                                 pack=settings.emit_pack)

    return build


def start(
    job: str,
    *,
    rank: int | None = None,
    world: int | None = None,
    device: int | None = None,
    host: str | None = None,
    domains: dict[str, Domain] | None = None,
    settings: Settings | None = None,
    profiler_factory: Callable[[ProfileRequest], ProfilerBackend] | None = None,
    follow_control: bool = True,
    register: bool = True,
    emitter_factory: Callable[[], Emitter] | None = None,
    model_shape: ModelShape | None = None,
    memory: AllocatorStats | None = None,
) -> RankHook:
    """A ready hook for this process; identity from arguments, else RANK/WORLD_SIZE/LOCAL_RANK.

    `model_shape` (contract 1.5) goes on the job's `start` event (`hook.job_start()`; PyTorch users can
    build it with `producers.hook.torch.model_shape_of(model, config, micro_batch=..., ...)`). `memory`:
    the device allocator's statistics (the PyTorch and MindSpore glue set them themselves where a device
    is in use)."""
    settings = settings or load_settings()
    topics = Topics(settings.topic_prefix)
    r = int(os.environ.get("RANK", "0")) if rank is None else rank
    w = int(os.environ.get("WORLD_SIZE", "1")) if world is None else world
    info = RankInfo(job=job, rank=r, world=w, host=host or socket.gethostname(),
                    device=int(os.environ.get("LOCAL_RANK", str(r))) if device is None else device,
                    domains=domains or {"dp": Domain(group=0, size=w, index=r)},
                    attempt=launcher_attempt(os.environ))
    spool = settings.hook_spool_dir / job / f"rank{r}" if settings.hook_spool else None
    factory = emitter_factory or kafka_emitter_factory(settings, topics, spool_dir=spool,
                                                       flush_interval_s=settings.hook_flush_interval_s)
    hook = RankHook(info, factory, profiler_factory=profiler_factory,
                    profile_root=settings.profile_dir, peak_flops=settings.hook_peak_flops or None,
                    build_interval_s=settings.hook_flush_interval_s, memory=memory, model_shape=model_shape)
    hook.open()
    if follow_control:
        from producers.hook.control import ControlFollower, RelayControlFollower

        if settings.relay_socket and settings.relay_control:  # the relay follows the topic once per node
            hook.add_follower(RelayControlFollower(hook, settings.relay_path).start())
        else:
            hook.add_follower(ControlFollower(hook, settings, topics).start())
    if register:
        register_device(settings.run_path, info.device, job, r)
    return hook


def with_rank(hook: RankHook, info: RankInfo) -> RankHook:
    """Update the identity of a hook once torch.distributed is up (rank, world, domains)."""
    hook.rank = replace(info)
    return hook


__all__ = ["HOOK_FLUSH_INTERVAL_S", "HookStats", "RankHook", "RankInfo", "kafka_emitter_factory", "start", "with_rank"]
