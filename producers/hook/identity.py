"""Who this rank is in the job: the identity every event the hook sends carries.

Why apart: the identity comes from the launcher (torchrun's environment, the framework's process
group) and is needed by the hook, the framework glue and the sampler alike, none of which should
have to import the hook's machinery to name a rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas import Domain
from schemas.bounds import UINT16


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Who this process is in the job: the identity every event carries."""

    job: str
    rank: int
    world: int
    host: str
    device: int
    domains: dict[str, Domain] = field(default_factory=dict)
    attempt: int = 0  # the job's launch (contract 1.4): 0 first, counted up by each relaunch


def launcher_attempt(env: Mapping[str, str]) -> int:
    """The job's attempt from the launcher: torchrun / torchelastic export how many times it
    restarted the workers (TORCHELASTIC_RESTART_COUNT); 0 when absent or not a count."""
    raw = env.get("TORCHELASTIC_RESTART_COUNT", "")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) <= UINT16[1] else 0


__all__ = ["RankInfo", "launcher_attempt"]
