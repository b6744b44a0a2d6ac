"""The floor every stage stands on: settings, client glue, the consumer-group guard, the record reader.

Workers, producers and the training hook import these modules and nothing else of `infra/`. The local
service launcher (brokers, ClickHouse, ZooKeeper, Prometheus, Alertmanager, TLS, apt) is its own package,
`infra/launcher/`, used only by `make`, the tests and the benches; no module here imports it
(`tests/test_architecture.py`), so a training rank that imports the hook never loads it (issue #47).
"""
