"""The one exception type the contract raises, so callers can dead-letter on a single `except`."""

from __future__ import annotations


class ContractError(ValueError):
    """An event does not match the contract.

    `field` is a dotted path into the event (``kernels[3].dur_ns``) or ``<payload>`` for
    problems with the whole message; `problem` says what is wrong in plain words.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field '{field}': {problem}")
        self.field = field
        self.problem = problem
