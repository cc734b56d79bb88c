"""Where bakeoff keeps its files. One root ($BAKEOFF_DATA, default ./var) holds results, reports
and local-provider state, so a whole installation can be inspected or wiped in one place."""

from __future__ import annotations

import os
import re
from pathlib import Path


def data_root() -> Path:
    return Path(os.environ.get("BAKEOFF_DATA") or Path.cwd() / "var").resolve()


def results_root() -> Path:
    return Path(os.environ.get("BAKEOFF_RESULTS") or data_root() / "results")


def reports_root() -> Path:
    return Path(os.environ.get("BAKEOFF_REPORTS") or data_root() / "reports")


def state_root() -> Path:
    return data_root() / "state"


def safe_name(s: str) -> str:
    """A run id or name as one path component (run ids carry ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", s).strip("._") or "_"
