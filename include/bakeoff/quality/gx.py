"""Great Expectations plumbing shared by every suite: building a suite, one quiet ephemeral context
per validation run, and a failed expectation as one readable line.

The suites (``suites``, ``compliance``) only say what to expect; running them and reading the
result is here, so neither suite module needs the other. Importing this module imports GX (slow):
only validation imports it, at run time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)
from great_expectations.expectations.row_conditions import (
    AndCondition,
    Column,
    ComparisonCondition,
    NullityCondition,
    OrCondition,
)

OK = Column("ok") == True  # noqa: E712 - a GX condition object, not a Python comparison


@dataclass
class Check:
    """One suite on one frame; ``label`` names the row in failure messages."""

    name: str
    frame: pd.DataFrame
    suite: gx.ExpectationSuite
    label: str


def make_suite(name: str, expectations: list[gxe.Expectation]) -> gx.ExpectationSuite:
    suite = gx.ExpectationSuite(name=name)
    for e in expectations:
        suite.add_expectation(e)
    return suite


def why(text: str) -> dict[str, str]:
    """An expectation's ``meta``: the one line the readable summary quotes when it fails."""
    return {"why": text}


def _condition_columns(cond: object) -> set[str] | None:
    """Columns a row condition reads; None when it is of a kind not understood here (a pandas string)."""
    if cond is None:
        return set()
    if isinstance(cond, ComparisonCondition | NullityCondition):
        return {cond.column.name}
    if isinstance(cond, AndCondition | OrCondition):
        cols: set[str] = set()
        for c in cond.conditions:
            inner = _condition_columns(c)
            if inner is None:
                return None
            cols |= inner
        return cols
    return None


def columns_read(suite: gx.ExpectationSuite, label: str) -> set[str] | None:
    """Every column the suite's expectations (and their row conditions) read, plus the row label;
    None when an expectation names no column (a table-level one), so the whole frame is needed."""
    cols = {label}
    for e in suite.expectations:
        # each GX expectation class declares only its own column fields (a table-level one: none)
        named = [getattr(e, k, None) for k in ("column", "column_A", "column_B")]
        named += list(getattr(e, "column_list", None) or [])
        if not any(named):
            return None
        in_condition = _condition_columns(getattr(e, "row_condition", None))
        if in_condition is None:
            return None
        cols |= {c for c in named if c} | in_condition
    return cols


def narrowed(check: Check) -> pd.DataFrame:
    """The check's frame cut to the columns its suite reads. GX filters rows with DataFrame.query,
    which builds a resolver for every column of the frame on every expectation: on the wide points
    table that was most of validation's time. Columns the suite names but the frame lacks stay
    missing, so GX still reports them."""
    cols = columns_read(check.suite, check.label)
    if cols is None:
        return check.frame
    return check.frame[[c for c in check.frame.columns if c in cols]]


class GxSession:
    """One ephemeral GX context for the whole run, quiet: no progress bars, no analytics."""

    def __init__(self) -> None:
        for name in ("great_expectations", "great_expectations.core", "posthog"):
            logging.getLogger(name).setLevel(logging.ERROR)
        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        )
        self.context = gx.get_context(mode="ephemeral", project_config=config)
        self.source = self.context.data_sources.add_pandas("bakeoff")
        self.batch_defs: dict[str, Any] = {}

    def validate(self, check: Check) -> dict[str, Any]:
        """GX's result document for one check (its frame against its suite)."""
        bd = self.batch_defs.get(check.name)
        if bd is None:
            asset = self.source.add_dataframe_asset(check.name)
            bd = self.batch_defs[check.name] = asset.add_batch_definition_whole_dataframe("whole")
        batch = bd.get_batch(batch_parameters={"dataframe": narrowed(check)})
        fmt = {
            "result_format": "SUMMARY",
            "unexpected_index_column_names": [check.label],
            "partial_unexpected_count": 5,
        }
        result: dict[str, Any] = batch.validate(check.suite, result_format=fmt).to_json_dict()
        return result


def _row(row: dict[str, Any], label: str) -> str:
    """'point=w c=1 r=0: tpot_ms_p99=13.6, tpot_ms_p90=18.6' - the row's label first."""
    values = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items() if k != label)
    return f"{label}={row.get(label)}: {values}" if label in row else values


def describe(suite_name: str, result: dict[str, Any], label: str) -> str:
    """'[suite] why: expectation(column=..): observed' for one failed expectation."""
    cfg = result["expectation_config"]
    kw = cfg["kwargs"]
    cols = ", ".join(f"{k}={kw[k]}" for k in ("column", "column_A", "column_B") if k in kw)
    reason = (cfg.get("meta") or {}).get("why", "")
    res = result.get("result") or {}
    exc = result.get("exception_info") or {}
    if exc.get("raised_exception"):
        observed = f"could not be evaluated: {(exc.get('exception_message') or '').splitlines()[0][:200]}"
    elif "unexpected_count" in res:
        rows = res.get("partial_unexpected_index_list") or []
        observed = f"{res['unexpected_count']} of {res.get('element_count')} rows unexpected"
        if rows:
            observed += "; e.g. " + "; ".join(_row(r, label) for r in rows[:3])
    else:
        observed = f"observed {res.get('observed_value')!r}"
    return f"[{suite_name}] {reason}: {cfg['type']}({cols}): {observed}"


def _fmt(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
