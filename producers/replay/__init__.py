"""`steplens replay PATH…`: real profiler outputs through the live pipeline (issue #22).

`convert` turns parsed traces into contract events (pure), `send` paces them through the ordinary
emitter, `load` reads the paths with the offline importers (`streams.profiles.loader`).
"""

from producers.replay.convert import Replay, ReplayStep, collective_op, from_cluster, from_profiles
from producers.replay.load import load_replay
from producers.replay.send import SendResult, progress_printer, send

__all__ = ["Replay", "ReplayStep", "SendResult", "collective_op", "from_cluster", "from_profiles", "load_replay",
           "progress_printer", "send"]
