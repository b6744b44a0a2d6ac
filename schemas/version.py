"""Contract versioning: MAJOR.MINOR in every event's ``v`` field.

Policy (also in docs/events.md):
- a minor bump only adds optional fields with defaults; readers accept newer minors and
  ignore the fields they do not know;
- a field unknown to a reader whose minor is at least the event's minor is a typo or an
  out-of-contract producer, and is rejected;
- a different major is rejected outright.

The version is matched by an ASCII-only pattern with at most 6 digits per part, so
``"1.²"`` (a Unicode digit `str.isdigit` accepts but `int` refuses) and 5,000-digit
versions are contract errors, never another exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.errors import ContractError

CONTRACT_MAJOR = 1
CONTRACT_MINOR = 5
CONTRACT_VERSION = f"{CONTRACT_MAJOR}.{CONTRACT_MINOR}"

_VERSION = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})", re.ASCII)


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int

    @property
    def is_newer_minor(self) -> bool:
        """True when the event comes from a newer minor than this reader knows."""
        return self.major == CONTRACT_MAJOR and self.minor > CONTRACT_MINOR


def major_ok(value: object) -> bool:
    """parse_version would accept `value` (the same pattern and major), without building anything:
    for decoders that skip bad input instead of raising (streams/detect/ingest/decode.py)."""
    if not isinstance(value, str):
        return False
    match = _VERSION.fullmatch(value)
    return match is not None and int(match.group(1)) == CONTRACT_MAJOR


def parse_version(value: object) -> Version:
    if not isinstance(value, str):
        raise ContractError("v", f"must be a string 'MAJOR.MINOR', got {type(value).__name__}")
    match = _VERSION.fullmatch(value)
    if match is None:
        raise ContractError("v", f"must look like '{CONTRACT_VERSION}', got {value[:40]!r}")
    version = Version(int(match.group(1)), int(match.group(2)))
    if version.major != CONTRACT_MAJOR:
        raise ContractError(
            "v",
            f"unsupported major version {version.major} (this reader speaks {CONTRACT_MAJOR}.x)",
        )
    return version
