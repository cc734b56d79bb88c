"""What the report shows a reader in place of field names and raw records: column labels, the accuracy
verdict as a sentence, TCO tier names, and provenance values (a list of records) as readable text.
The raw records stay in the evidence bundle (provenance.json); this is only how the pages say them."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from bakeoff.core.numbers import as_float

# the software-support matrix's columns (bakeoff.quality.support), as a procurement reader reads them
SUPPORT_LABELS = {
    "gpu": "GPU",
    "stack": "engine",
    "model": "model",
    "quantization": "precision",
    "checkpoint": "checkpoint",
    "speculative": "speculative decoding",
    "kv_offload": "KV offload",
    "target": "target",
    "slug": "target id",
    "provider": "provider",
    "instance_type": "instance type",
    "emulated": "emulated",
    "deployed": "deployed",
    "ready": "serving",
    "failure": "failure",
    "failure_detail": "failure detail",
    "accuracy": "accuracy",
    "accuracy_score": "accuracy score",
    "gx": "data checks",
    "gx_failures": "data check failures",
}

TIER_LABELS = {"hyperscaler": "hyperscaler", "neocloud": "neocloud", "3yr_rental": "3-year rental"}


def label(column: str) -> str:
    """A column's label: the known ones by name, any other with its underscores as spaces."""
    return SUPPORT_LABELS.get(column) or TIER_LABELS.get(column) or column.replace("_", " ")


def _num(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return "–"
    return f"{v:,}" if isinstance(v, int) or float(v).is_integer() else f"{v:,.4g}"


def accuracy_sentence(doc: dict[str, Any]) -> str:
    """'200 of 200 correct (score 1.00, threshold 0.95: passed), 0 errors; builtin check on gsm8k' from
    accuracy.json's fields; whatever a document lacks is left out."""
    parts = []
    if doc.get("n") is not None and doc.get("correct") is not None:
        parts.append(f"{_num(doc['correct'])} of {_num(doc['n'])} correct")
    judged = []
    if isinstance(doc.get("score"), (int, float)):
        judged.append(f"score {float(doc['score']):.2f}")
    if isinstance(doc.get("threshold"), (int, float)):
        judged.append(f"threshold {float(doc['threshold']):.2f}")
    if doc.get("passed") is not None:
        judged.append("passed" if doc["passed"] else "FAILED")
    if judged:
        parts.append(f"({', '.join(judged)})")
    text = " ".join(parts)
    if doc.get("errors") is not None:
        text += f", {_num(doc['errors'])} request errors"
    how = " ".join(str(x) for x in (doc.get("backend"), "check") if x)
    task = f" on {doc['task']}" if doc.get("task") else ""
    return f"{text}; {how}{task}" if text else f"{how}{task}"


_EPOCH_KEYS = frozenset({"created", "created_at", "started_at"})  # epoch seconds in an OpenAI-style record


def _stamp(v: object) -> str:
    try:
        return datetime.fromtimestamp(as_float(v), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(v)


def provenance_value(v: object) -> str:
    """A provenance value as text: a record as 'key value, …' (None left out, numbers grouped), a list of
    records one after another; a plain value as itself."""
    if isinstance(v, dict):
        return ", ".join(
            f"{k} {_stamp(x) if k in _EPOCH_KEYS else provenance_value(x)}" for k, x in v.items() if x is not None
        )
    if isinstance(v, (list, tuple)):
        return "; ".join(provenance_value(x) for x in v) or "none"
    if v is None:
        return "–"
    return _num(v)
