"""The one-time migration of SLS8 snapshots (pickles, written before format SLD1) into today's engines.

A worker that upgrades finds the last pickled snapshot of every job on the state topic. Each is read once,
here, and the job's next snapshot is written as SLD1 (`streams/detect/state/format.py`). Only this module
unpickles, and only the classes an engine snapshot held: a pickle naming anything else is refused. Older
pickles (SLS7 and before) are not read: their jobs start afresh, as they did on every earlier format change.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import zstandard

from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from streams.detect.state.format import TYPES
from streams.detect.state.outbox import Outbox

MAGIC = b"SLS8"
# Where SLS8 pickles name the classes of today's stable names: each class by the module path and name it had
# when SLS8 was written; the config is read into a stand-in the restore replaces.
_PICKLED: dict[tuple[str, str], Any] = {(cls.__module__, cls.__qualname__): cls for cls in TYPES.values()}
# ... but for the classes renamed since SLS8: under their names of then
_PICKLED[("streams.detect.windows.step_frames", "Topology")] = TYPES["frames.ReportedLayout"]
_NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
          ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.numeric", "_frombuffer"),
          ("numpy._core.numeric", "_frombuffer"), ("numpy.core.multiarray", "scalar"),
          ("numpy._core.multiarray", "scalar"), ("builtins", "frozenset"), ("builtins", "set"),
          ("copyreg", "_reconstructor"), ("builtins", "object")}


class _StaleConfig:
    """The settings an SLS8 snapshot carried: read past, the restore gives the worker's own."""

    def __setstate__(self, state: Any) -> None:
        pass


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("infra.settings", "DetectionConfig"):
            return _StaleConfig
        cls = _PICKLED.get((module, name))
        if cls is not None:
            return cls
        if (module, name) in _NUMPY or module.startswith("numpy.dtypes"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"an SLS8 snapshot names {module}.{name}, which no snapshot holds")


def decode(raw: bytes, cfg: DetectionConfig | None = None) -> tuple[JobEngine, Outbox]:
    """The engine and outbox of an SLS8 snapshot, running with `cfg`. Raises ValueError if unreadable."""
    if bytes(raw[:4]) != MAGIC:
        raise ValueError("not an SLS8 snapshot")
    try:
        state = _Unpickler(io.BytesIO(zstandard.ZstdDecompressor().decompress(raw[4:]))).load()
    except Exception as exc:
        raise ValueError(f"unreadable SLS8 snapshot: {exc!r}") from None
    if (not isinstance(state, tuple) or len(state) != 2 or type(state[0]) is not JobEngine
            or type(state[1]) is not Outbox):
        raise ValueError("an SLS8 snapshot that is not an engine and its outbox")
    settings = cfg if cfg is not None else DetectionConfig()
    engine: JobEngine | None = state[0]
    while engine is not None:
        engine.cfg = settings
        engine = engine.previous
    return state[0], state[1]
