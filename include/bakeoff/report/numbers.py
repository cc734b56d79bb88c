"""A figure read from a stored table or record as a float, NaN where it is missing or not a finite number,
so a section's arithmetic never raises on a field an older run did not write."""

from __future__ import annotations

import math
from typing import Any

from bakeoff.core.numbers import as_float


def finite(v: object) -> float:
    x = as_float(v)
    return x if math.isfinite(x) else math.nan


def field(row: Any, key: str) -> float:
    """``row[key]`` as ``finite`` reads it; NaN when the row has no such key."""
    try:
        return finite(row[key])
    except (KeyError, IndexError):
        return math.nan
