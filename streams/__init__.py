"""The workers: one package per stage, and at this root what they share.

`detect/` (events -> incidents and profile_on commands), `land/` (everything -> ClickHouse),
`profiles/` (profile dumps -> diagnoses) and `alerts/` (incidents -> Alertmanager). In the first
three the pure processing takes records in and gives rows, incidents or diagnoses out with no
I/O; each stage's `app` module wires it to Kafka topics and the sinks. Shared: `app.py` (the Faust base
app and the workers' Kafka timeouts), `topics_admin.py`, `metrics.py`, `gc_tuning.py`; the
entry point `__main__.py` starts one worker by role and is the only module that imports the
stages' apps.
"""
