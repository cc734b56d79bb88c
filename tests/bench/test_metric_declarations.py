"""The point contract is the declared metric units: the columns, the row summarize makes and the
page that documents them come from one list, so none can drift from the others."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bakeoff.bench import metric_units
from bakeoff.bench.metrics import POINT_COLUMNS, POINT_METRICS, summarize
from bakeoff.bench.records import POINT_KEY, RequestRecord

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("metrics_doc", ROOT / "scripts" / "metrics_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_metrics_lists_every_declared_column_as_declared():
    page = (ROOT / "docs" / "metrics.md").read_text()
    assert _script().render(page) == page, "docs/metrics.md is stale: run scripts/metrics_doc.py"
    for name in POINT_COLUMNS[len(POINT_KEY) :]:
        assert f"| `{name}` |" in page


def test_every_unit_declares_a_unit_and_formula_and_each_column_once():
    for m in POINT_METRICS:
        for c in m.columns:
            assert c.unit.strip() and c.formula.strip() and "|" not in c.formula, c
    assert {"power_w_per_gpu", "energy_j", "ttft_connection", "prefix_cache_hit_rate"} <= set(POINT_COLUMNS)
    with pytest.raises(RuntimeError, match=r"declared more than once: \['gpus'\]"):
        metric_units.columns_of([*POINT_METRICS, POINT_METRICS[0]])


def test_summarize_fills_its_own_units_and_leaves_the_others_to_their_step():
    rec = RequestRecord("r", "t", "w", 1, 0, 0, False, 0.0, 0.0, ttft=0.1, e2e=0.5, elapsed=0.5, output_tokens=5)
    row = summarize([rec], gpus=1, emulated=True)
    assert list(row) == POINT_COLUMNS
    later = [c.name for m in POINT_METRICS if m.compute is None for c in m.columns]
    assert later and all(row[n] is None for n in later)
    assert row["completed"] == 1 and row["output_tps"] == pytest.approx(10.0)


def test_a_unit_that_computes_other_columns_than_it_declares_is_refused():
    bad = metric_units.Metric((metric_units.Column("x", "s", "x"),), lambda p, _: {"y": 1})
    with pytest.raises(RuntimeError, match=r"point metric \['x'\]: computed \['y'\]"):
        bad.values(None, {})  # type: ignore[arg-type]
