"""When a columnar reader is worth trying again, after it declined a batch.

Below the stages because two use it: detect's decode (`streams/detect/ingest/loop.py`) and land's
processor (`streams/land/processor.py`) each try a columnar read first and fall back event by event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ColumnarBackoff:
    """Whether the next batch tries the columnar path: after it declined a batch, the next `skip`
    batches go straight to the per-event path. A batch it declines pays the columnar read for nothing
    (~3 µs a step event), so a stream with a bad record in every batch would cost more than before;
    with the backoff it costs at most 1/(skip+1) of that read more, and a clean stream none."""

    skip: int = 8
    left: int = 0

    def use(self) -> bool:
        if self.left:
            self.left -= 1
            return False
        return True

    def after(self, declined: bool) -> None:
        """After a batch the columnar path read: a declined one starts the backoff."""
        if declined:
            self.declined()

    def declined(self) -> None:
        """The columnar path handed a batch back: the next `skip` batches skip it."""
        self.left = self.skip
