"""Incident bookkeeping that outlives a worker: the ledger of open incidents and issued commands."""

from streams.incidents.ledger import IncidentLedger, LedgerStats, scope_key

__all__ = ["IncidentLedger", "LedgerStats", "scope_key"]
