"""Hierarchical analysis of one or more parsed profiles: one analyzer per question (spec §3)."""
