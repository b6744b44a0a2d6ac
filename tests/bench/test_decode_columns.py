"""bench.decode_columns' Arrow decoders accept what detect's decode accepts, so the timings compare like with like."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from bench.decode_columns import ARROW, records
from streams.detect.ingest.decode import decode_batch


def _accepted(raws: list[bytes]) -> int:
    _, stats = decode_batch(raws, 1 << 20)
    return stats.events - stats.bad


@pytest.mark.parametrize("kind", ["steps", "kernels", "device"])
def test_arrow_columns_accept_the_bench_records_as_detect_does(kind: str) -> None:
    raws = records(64, 3)[kind]
    assert ARROW[kind](raws) == _accepted(raws) == 64 * 3


@pytest.mark.parametrize(("kind", "field", "value"), [
    ("steps", "rank", 64), ("steps", "end_ns", 1), ("steps", "v", "2.0"), ("kernels", "world", 0),
    ("device", "ts_ns", 0), ("device", "type", "step"),
])
def test_an_out_of_range_element_is_rejected_alone(kind: str, field: str, value: object) -> None:
    raws = records(64, 1)[kind]
    elements = orjson.loads(raws[0])
    elements[1][field] = value
    raws[0] = orjson.dumps(elements)
    assert ARROW[kind](raws) == _accepted(raws) == 63


def test_a_value_of_the_wrong_json_type_fails_the_whole_block() -> None:
    raws = records(64, 1)["steps"]
    elements = orjson.loads(raws[0])
    elements[0]["rank"] = "three"
    raws[0] = orjson.dumps(elements)
    with pytest.raises(pa.ArrowInvalid):
        ARROW["steps"](raws)
