"""A short socket directory: AF_UNIX paths are limited to 107 bytes, pytest's tmp_path can be longer."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="slr"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
