"""``python -m bakeoff.bench``: the bench commands (bench, sessions-from-logs) on their own."""

from bakeoff.bench.cli import main

raise SystemExit(main())
