"""A number read from a value of any type (a stored record's field, a form's text, a numpy scalar), so
the many readers of untrusted figures narrow it one way and their parameters say ``object``."""

from __future__ import annotations

import math
from typing import SupportsFloat, SupportsIndex


def as_float(v: object) -> float:
    """``float(v)`` where ``v`` has a float value; NaN where it has none (None, a word, a list)."""
    if not isinstance(v, (str, bytes, SupportsFloat, SupportsIndex)):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
