"""Garbage-collector settings for the per-event workers (detect decode, land).

A batch parses tens of thousands of JSON objects into dicts and row tuples that all live until
the batch is done. With CPython's default gen-0 threshold (700 allocations) the collector runs
hundreds of times per batch and its older generations re-scan every object still alive (the
batch, the engine's state): measured here, 25-35 % of landing's and decoding's CPU per event,
and the spikes in decode time. Nothing on these paths builds reference cycles that must be
reclaimed promptly, so the worker raises the threshold (`Settings.worker_gc_threshold`) and
freezes what start-up allocated (imports, settings) out of every later scan.
"""

from __future__ import annotations

import gc


def tune_gc(gen0_threshold: int) -> None:
    """Raise the gen-0 threshold (0: leave the interpreter's default) and freeze start-up objects.

    Process-wide and idempotent: both worker loops call it when they start.
    """
    if gen0_threshold <= 0:
        return
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0_threshold, 1), max(gen1, 20), max(gen2, 100))
    gc.freeze()
