"""Benchmarks, runnable as ``python -m benchmarks.<name>``."""
