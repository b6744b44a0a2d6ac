"""Node-local relay: ranks hand their encoded records to one process per node, which sends them to Kafka.

Why: kafka-python's network thread costs ~1.5 ms of CPU per produce request in every rank process
(docs/hook.md, cost notes). With a relay a rank's export thread only writes its records to a Unix
socket (`RelayExporter`), and the node runs ONE Kafka client (`Relay`, fed into a BackgroundEmitter
with the usual bounded queue, spool and counted drops) whose requests carry every rank's records.

Modules: `framing` (the wire format, pure), `exporter` (rank side), `server` (the relay),
`control` (the node's one control-topic consumer, commands pushed to the ranks they name),
`__main__` (`python -m producers.relay`; also `python -m producers.sampler --relay`).
"""

from producers.relay.exporter import RelayExporter
from producers.relay.framing import MAX_FRAME_BYTES, FrameError
from producers.relay.server import Relay, RelayStats, relay_emitter, relay_from_settings

__all__ = ["MAX_FRAME_BYTES", "FrameError", "Relay", "RelayExporter", "RelayStats", "relay_emitter",
           "relay_from_settings"]
