"""Benchmark: workloads, the streaming client, load generation and the metric definitions.

Entry points: ``run.run_workload`` (the DAG's benchmark step: every load point of a workload),
``cli`` (``bakeoff bench``), ``metrics.summarize`` (one point's row), ``stats.compare_targets`` /
``stats.point_intervals`` (verdicts and bootstrap intervals for reports),
``provenance.snapshot_provenance``.
Pieces: ``prompts``/``workloads`` (what is sent), ``client``/``sse`` (how it is sent and accounted),
``loadgen``/``sla`` (how hard), ``point`` (the one measurement loop), ``workers`` (it across
processes) and ``fleet`` (across members that share no clock), ``monitor`` (the client watching
itself), ``calibration`` (the client's own error against the scripted reference server, ``serving.emulator.scripted``).
Layers, each importing only from those below it: ``run`` > ``calibration``, ``workers``, ``fleet``, ``sla`` >
``point`` > ``loadgen``, ``monitor`` > ``client`` > ``tasks``, ``sse``.
"""
