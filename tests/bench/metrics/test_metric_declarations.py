"""The point contract is the declared metric units: the columns, the row summarize makes and the
page that documents them come from one list, so none can drift from the others."""

from __future__ import annotations

import importlib.util

import pytest

from bakeoff.bench.metrics import metric_units
from bakeoff.bench.metrics.records import POINT_KEY, RequestRecord
from bakeoff.bench.metrics.summary import EVALUATION_ORDER, POINT_COLUMNS, POINT_METRICS, summarize
from tests.conftest import ROOT


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


def _unit(name: str, *requires: str) -> metric_units.Metric:
    return metric_units.derived(name, "x", name, requires, lambda p, got: sum(got.values()) + 1)


def test_units_are_computed_after_the_columns_they_require_whatever_their_listed_order():
    units = [_unit("c", "b", "a"), _unit("b", "a"), _unit("a")]
    assert [m.columns[0].name for m in metric_units.evaluation_order(units)] == ["a", "b", "c"]
    got: dict[str, int] = {}
    for m in metric_units.evaluation_order(units):
        got.update(m.values(None, got))  # type: ignore[arg-type]
    assert got == {"a": 1, "b": 2, "c": 4}


def test_the_point_metrics_order_puts_derived_figures_after_their_inputs():
    order = [c.name for m in EVALUATION_ORDER for c in m.columns]
    for derived, inputs in {
        "interactivity": ["tpot_ms_p50", "tpot_ms_mean"],
        "meets_slo": ["completed", "error_rate", "good_fraction", "ttft_ms_p99", "itl_ms_p50"],
        "total_tps_per_gpu": ["total_tps", "gpus"],
    }.items():
        assert all(order.index(i) < order.index(derived) for i in inputs), derived
    assert not {c.name for m in POINT_METRICS if m.compute is None for c in m.columns} & set(order)


def test_a_required_column_no_computed_unit_declares_is_refused_when_declared():
    with pytest.raises(RuntimeError, match=r"point metric \['b'\]: requires \['tpot'\], which no computed metric"):
        metric_units.evaluation_order([_unit("a"), _unit("b", "a", "tpot")])
    later = metric_units.filled("bench.run", [("energy_j", "J", "energy")])
    with pytest.raises(RuntimeError, match=r"requires \['energy_j'\]"):
        metric_units.evaluation_order([later, _unit("j_per_token", "energy_j")])


def test_a_cycle_of_requirements_is_refused_naming_it():
    with pytest.raises(RuntimeError, match=r"form a cycle: \['(a|b|c)'\] -> .*\['b'\]"):
        metric_units.evaluation_order([_unit("a", "c"), _unit("b", "a"), _unit("c", "b"), _unit("d")])
    with pytest.raises(RuntimeError, match="form a cycle"):
        metric_units.evaluation_order([_unit("a", "a")])


def test_a_unit_sees_only_the_columns_it_requires():
    peek = metric_units.derived("y", "x", "y", ("a",), lambda p, got: got["b"])
    with pytest.raises(KeyError, match="b"):
        peek.values(None, {"a": 1, "b": 2})  # type: ignore[arg-type]
