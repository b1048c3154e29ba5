"""Benchmarks: `python -m benchmarks [--quick] [--only NAME]` prints one JSON document."""
