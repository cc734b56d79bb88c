"""Benchmark: workloads, the streaming client, load generation and the metric definitions."""
