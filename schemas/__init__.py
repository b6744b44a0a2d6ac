"""The steplens event contract (version 1.5): typed events, orjson codec, topic names."""

from schemas.action import MitigationAction
from schemas.codec import EVENT_TYPES, MAX_EVENT_BYTES, Event, bounded, decode, decode_as, encode
from schemas.control import ControlCommand
from schemas.device import DeviceSample
from schemas.errors import ContractError
from schemas.identity import DOMAIN_TYPES, Domain, RankIdentity
from schemas.incident import Incident
from schemas.job import JobEvent, ModelShape
from schemas.kernel import KernelBatch, KernelRecord
from schemas.kernel_summary import KernelAggregate, KernelSummary
from schemas.packing import MAX_PACKED_EVENTS, PACKED_TOPIC_TYPES, decode_record_as, split_record
from schemas.profile import ProfileReady
from schemas.step import Phases, StepEvent
from schemas.topics import Topics, group_key, job_key, rank_key
from schemas.version import CONTRACT_VERSION

__all__ = [
    "CONTRACT_VERSION", "DOMAIN_TYPES", "EVENT_TYPES", "MAX_EVENT_BYTES", "MAX_PACKED_EVENTS",
    "PACKED_TOPIC_TYPES",
    "ContractError", "ControlCommand", "DeviceSample", "Domain", "Event", "Incident", "JobEvent",
    "KernelAggregate", "KernelBatch", "KernelRecord", "KernelSummary", "MitigationAction", "ModelShape", "Phases",
    "ProfileReady", "RankIdentity",
    "StepEvent", "Topics",
    "bounded", "decode", "decode_as", "decode_record_as", "encode", "group_key", "job_key", "rank_key",
    "split_record",
]
