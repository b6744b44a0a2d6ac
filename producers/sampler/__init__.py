"""Node device sampler: npu-smi / NVML / host /proc samples (T1–T7), joined to ranks via the run dir."""
