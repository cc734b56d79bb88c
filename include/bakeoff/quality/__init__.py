"""Quality gates: a result that fails validation never reaches a cost ranking as if it were good.

- ``validate.validate_run``: GX suites (requests, points, coverage, repeats), traffic compliance
  and accuracy verdicts for every target of a run -> ``validation.json``.
- ``suites`` / ``compliance``: what to expect of a target's tables; ``gx``: building, running and
  reading GX suites, shared by both.
- ``accuracy.run_gate``: the per-target accuracy gate run before the benchmark -> ``accuracy.json``.
- ``status.target_status``: per target, ranked / quarantined / no results, for the cost step.
- ``support.support_matrix``: GPU x stack x model x quantization -> deployed / ready / passed.
Submodules are imported explicitly; this package imports nothing heavy.
"""

import logging

# GX logs at INFO, on import, each of its functions it skips documenting (~200 lines a run, in the CLI's
# output and the validate task's log alike): none of it is the run's news. Set before any submodule imports GX.
logging.getLogger("great_expectations").setLevel(logging.WARNING)
