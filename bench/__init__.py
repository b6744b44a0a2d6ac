"""Benchmarks: `make bench-<name>` writes bench/results/<name>.json."""
