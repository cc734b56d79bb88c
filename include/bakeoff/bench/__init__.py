"""Benchmark: workloads, the streaming client, load generation and the metric definitions.

Entry points: ``sweep.run_workload`` (the DAG's benchmark step), ``cli`` (``bakeoff bench``),
``metrics.summarize`` (one point's row), ``stats.compare_targets`` / ``stats.point_intervals``
(verdicts and 95% intervals for reports), ``provenance.snapshot_provenance``.
Pieces: ``prompts``/``workloads`` (what is sent), ``client``/``sse`` (how it is sent and accounted),
``loadgen``/``sla``/``workers`` (how hard), ``fidelity``/``scripted_server`` (the client's own error).
"""
