"""Benchmark: workloads, the streaming client, load generation and the metric definitions.

Entry points: ``run.run_workload`` (the DAG's benchmark step: every load point of a workload),
``cli`` (``bakeoff bench``), ``metrics.summary.summarize`` (one point's row), ``metrics.stats.compare_targets`` /
``metrics.stats.point_intervals`` (verdicts and bootstrap intervals for reports),
``metrics.provenance.snapshot_provenance``.
Subpackages, each importing only from those before it: ``metrics`` (the tables and figures), ``client``
(what is sent and how: ``prompts``/``workloads``, ``transport``/``sse``, ``monitor``), ``sessions``
(agentic sessions), ``load`` (``loadgen``/``sla``, ``point``: the one measurement loop, ``calibration``),
``fleet`` (a point across processes, ``workers``, and across members that share no clock, ``members``);
``run`` and ``cli`` above them all.
"""
