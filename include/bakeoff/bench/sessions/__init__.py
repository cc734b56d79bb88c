"""Agentic session workloads and where sessions come from (traces, logs, a fitted generator)."""
