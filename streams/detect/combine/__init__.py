"""Combine before you shuffle: per-batch column chunks per job, merged into one job's step frames."""
