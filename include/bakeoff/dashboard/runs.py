"""One published run as the dashboard pages see it: its manifest, keyed as a URL names it.

Its own module so the pages and the sections they call (``stockouts``) share it without importing
each other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Run:
    key: str  # "<plan dir>/<run dir>": how a URL names the run
    doc: dict[str, Any]

    @property
    def dash(self) -> dict[str, Any]:
        return self.doc.get("dashboard") or {}

    @property
    def started_at(self) -> float:
        try:
            return float(self.doc.get("started_at") or 0)
        except (TypeError, ValueError):
            return 0.0

    @property
    def month(self) -> str:
        return time.strftime("%Y-%m", time.gmtime(self.started_at)) if self.started_at else ""

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.gmtime(self.started_at)) if self.started_at else ""

    @property
    def status(self) -> str:
        return str(self.doc.get("status") or "unknown")

    @property
    def emulated(self) -> bool:
        return bool(self.doc.get("emulated"))

    @property
    def targets(self) -> dict[str, dict[str, Any]]:
        return self.dash.get("targets") or {}
