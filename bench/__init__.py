"""Benchmarks: `make bench-<name>` -> bench/results/<name>.json."""
