"""The pipeline waiter's failure paths that need no broker: a dead worker is named at once.

Its happy path (lag 0 twice in a row) runs against the real broker in tests/streams/test_pipeline.py
and tests/streams/test_packed_integration.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.settings import load_settings
from steplens.lag import wait_pipeline_caught_up


def test_a_worker_that_exited_fails_the_wait_before_any_lag_query() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    with pytest.raises(RuntimeError, match="exited early with code 3"):
        wait_pipeline_caught_up(load_settings(), {"g": ["t"]}, [dead], timeout_s=1)
