"""Detection state that survives restarts and rebalances (per-job snapshots on a compacted topic)."""
