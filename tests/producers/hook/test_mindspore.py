"""The MindSpore callback trains a small model for real (MindSpore CPU wheel) and its events validate on Kafka."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from infra.settings import Settings, load_settings
from producers.hook import start as start_hook
from schemas import Topics
from streams.topics_admin import ensure_topics
from tests.producers._records import steps_of

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _train(sink: bool, callback: object, steps: int) -> None:
    import mindspore as ms
    from mindspore import dataset as ds
    from mindspore import nn
    from mindspore.train import Model

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * 8, 16)).astype(np.float32)
    y = (x @ rng.normal(size=(16, 1))).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    net = nn.SequentialCell([nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 1)])
    model = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
    model.train(1, data, callbacks=[callback], dataset_sink_mode=sink)


def test_mindspore_callback_emits_valid_step_events(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    from kafka import KafkaConsumer

    from infra.clients import kafka_client_config
    from producers.hook.mindspore import StepLensCallback

    settings = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
                       secrets_dir=kafka_settings.secrets_path,
                       topic_prefix=f"{unique_name}.", topic_partitions=1)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, 1)
    steps = 12
    hook = start_hook("ms-job", rank=0, world=1, settings=settings, follow_control=False)
    cb = StepLensCallback(hook, samples_per_step=8)
    _train(False, cb, steps)
    # a data-sink run (device loop of 4 steps per callback): cur_step_num jumps by 4 per step end
    # (on CPU MindSpore falls back to one callback per step, so drive the callback with its RunContext)
    from mindspore.train.callback import RunContext

    for cur in (steps + 4, steps + 8):
        cb.on_train_step_begin(RunContext({"cur_step_num": cur - 4}))
        cb.on_train_step_end(RunContext({"cur_step_num": cur}))
    assert hook.flush(60)
    stats = hook.stats()
    assert hook.close(30)
    assert stats.errors == 0 and stats.steps == steps
    total = steps + 8

    consumer = KafkaConsumer(topics.steps, **kafka_client_config(settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    events = [e for m in consumer for e in steps_of(m.value)]  # every element validated against the contract
    consumer.close()
    assert [e.step for e in events] == list(range(total))
    sunk = events[steps:]
    assert len({e.end_ns - e.start_ns for e in sunk[:4]}) == 1  # one sink's interval split evenly
    assert all(e.job == "ms-job" and e.samples == 8 and e.end_ns > e.start_ns for e in events)
    assert all(e.end_ns <= time.time_ns() for e in events)
