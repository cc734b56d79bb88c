"""Rewrite docs/metrics.md's column table from the point metrics' declarations (bench.metrics.POINT_METRICS).

Run after adding or changing a point metric: ``PYTHONPATH=include python scripts/metrics_doc.py``;
tests/bench/metrics/test_metric_declarations.py fails while the page and the declarations differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bakeoff.bench.metrics.metric_units import markdown_table
from bakeoff.bench.metrics.summary import POINT_METRICS

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
BEGIN, END = "<!-- point-columns: begin (scripts/metrics_doc.py) -->", "<!-- point-columns: end -->"


def render(page: str) -> str:
    """The page with the block between the markers replaced by the declarations' table."""
    head, sep, rest = page.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC.name}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n{markdown_table(POINT_METRICS)}\n{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
    sys.stdout.write(f"wrote {DOC.name}\n")
