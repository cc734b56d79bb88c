"""CSV cells a spreadsheet will not run: the report's CSVs carry plan-supplied text (target names,
notes, failure messages), and Excel, LibreOffice and Sheets evaluate a cell that starts with
``= + - @`` (or a tab or carriage return before one) as a formula, e.g. ``=HYPERLINK(...)`` that
leaks the sheet. Such text cells get a leading ``'`` (OWASP's CSV-injection advice); numbers,
negative ones included, are left as numbers."""

from __future__ import annotations

from typing import Any

import pandas as pd

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> Any:
    """The cell as a spreadsheet should show it: text that could start a formula is quoted."""
    if not isinstance(value, str) or not value.startswith(TRIGGERS):
        return value
    try:
        float(value)  # "-3.5" or "+1e3" is a number written as text: harmless, keep it
        return value
    except ValueError:
        return "'" + value


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with every text cell (and header) passed through ``cell``; numeric columns untouched."""
    out = frame.copy()
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_datetime64_any_dtype(out[col])):
            out[col] = out[col].astype(object).map(cell)
    out.columns = [cell(c) if isinstance(c, str) else c for c in out.columns]
    return out


def to_csv(frame: pd.DataFrame) -> str:
    text: str = safe_frame(frame).to_csv(index=False)  # no path given: pandas returns the text
    return text
