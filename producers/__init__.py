"""Training-side producers: a non-blocking emitter with a disk spool, exporters, and a cluster simulator.

Producers run inside (or next to) the training process, so every entry point here is built
so that it can never block or crash the training loop: failures become counted drops.
"""

from producers.emitter import BackgroundEmitter, EmitterStats, route
from producers.exporter import Exporter, ExportError, InMemoryExporter, KafkaExporter, OutRecord

__all__ = [
    "BackgroundEmitter", "EmitterStats", "ExportError", "Exporter", "InMemoryExporter", "KafkaExporter",
    "OutRecord", "route",
]
