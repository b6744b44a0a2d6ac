"""Contract versioning: MAJOR.MINOR in every event's ``v`` field.

Policy (also in docs/events.md):
- a minor bump only adds optional fields with defaults; readers accept newer minors and
  ignore the fields they do not know;
- a field unknown to a reader whose minor is at least the event's minor is a typo or an
  out-of-contract producer, and is rejected;
- a different major is rejected outright.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import ContractError

CONTRACT_MAJOR = 1
CONTRACT_MINOR = 1
CONTRACT_VERSION = f"{CONTRACT_MAJOR}.{CONTRACT_MINOR}"


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int

    @property
    def is_newer_minor(self) -> bool:
        """True when the event comes from a newer minor than this reader knows."""
        return self.major == CONTRACT_MAJOR and self.minor > CONTRACT_MINOR


def parse_version(value: object) -> Version:
    if not isinstance(value, str):
        raise ContractError("v", f"must be a string 'MAJOR.MINOR', got {type(value).__name__}")
    parts = value.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ContractError("v", f"must look like '{CONTRACT_VERSION}', got {value!r}")
    version = Version(int(parts[0]), int(parts[1]))
    if version.major != CONTRACT_MAJOR:
        raise ContractError(
            "v",
            f"unsupported major version {version.major} (this reader speaks {CONTRACT_MAJOR}.x)",
        )
    return version
