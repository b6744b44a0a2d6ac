"""The contract's names that detection keeps as columns, in the contract's order.

Detection stores steps, device samples and communication groups as numpy rows indexed by
these tuples (streams/detect/): they are the contract's own names, so a field added to the
contract is a column here without a second list to keep in step.
"""

from __future__ import annotations

from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.step import Phases

PHASES: tuple[str, ...] = Phases.NAMES  # a step's phases (ms), the rows of a frame's phase matrix
DOMAINS: tuple[str, ...] = DOMAIN_TYPES  # parallel domains (dp, tp, pp, ep, cp), the rows of a topology's groups
DEVICE_METRICS: tuple[str, ...] = METRICS  # a device sample's measurements
