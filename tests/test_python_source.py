"""A finalizer that parses source during a parse does not break the test's parse."""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.python_source import parse

SOURCE = Path(__file__).read_text(encoding="utf-8")


class _ParsesWhenCollected:
    """Cyclic garbage whose finalizer parses, as asyncio's unretrieved-exception log does."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        ast.parse("x = (1 + 2) * 3")


@pytest.fixture
def eager_gc() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(50)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.collect()


def test_parse_survives_finalizers_that_parse(eager_gc: None) -> None:
    for _ in range(50):
        for _ in range(20):
            _ParsesWhenCollected()
        assert isinstance(parse(SOURCE, "test_python_source.py"), ast.Module)
    assert gc.isenabled()
