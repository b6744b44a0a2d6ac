"""Faust workers: regroup step events by communication domain, detect, alert, land.

Pure processors (detect/windows/, detect/scopes/, ...) take records in and give summaries/incidents out
with no I/O; app.py wires them to Kafka topics and the sinks.
"""
