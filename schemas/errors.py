"""The one exception type the contract raises, so callers can dead-letter on a single `except`."""

from __future__ import annotations

# A reason travels in Kafka headers, a ClickHouse column and log lines: it quotes at most
# this much of the offending input, however large the input was.
MAX_REASON_CHARS = 300
MAX_FIELD_CHARS = 200


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ContractError(ValueError):
    """An event does not match the contract.

    `field` is a dotted path into the event (``kernels[3].dur_ns``) or ``<payload>`` for
    problems with the whole message; `problem` says what is wrong in plain words. Both are
    clipped (`MAX_FIELD_CHARS`, `MAX_REASON_CHARS`) so a hostile message cannot make its own
    reason huge.
    """

    def __init__(self, field: str, problem: str) -> None:
        field = clip(field, MAX_FIELD_CHARS)
        problem = clip(problem, MAX_REASON_CHARS)
        super().__init__(f"field '{field}': {problem}")
        self.field = field
        self.problem = problem
