"""Scopes: who is slow or hung (job step, rank, host, group, link, stage), from released step frames."""
