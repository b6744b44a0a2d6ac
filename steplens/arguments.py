"""argparse value types the CLI's commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def number(kind: type[int] | type[float], low: float, *, above: bool = False) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` at least `low` (or strictly above it)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}"
                                             ) from None
        if value != value or (value <= low if above else value < low):  # NaN too
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {text}")
        return value
    return parse
