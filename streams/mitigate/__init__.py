"""From diagnosis to action (issue #48): weigh acting on a culprit node against waiting, then act through
the cluster's scheduler, safely. `policy.py` is the pure decision; adapters (Slurm first) carry it out."""
