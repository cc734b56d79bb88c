"""Great Expectations suites over one target's tables, defined in code, thresholds from the plan.

Each suite runs on a frame prepared here: the stored tables plus a few derived columns GX cannot
express itself (a row label for readable failures, output length as a ratio of the request,
repeats found per point, coefficient of variation between repeats). Every expectation carries a
one-line ``meta.why`` that the readable summary quotes. Importing this module imports GX (slow),
so only validation does, at run time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from bakeoff.quality import compliance
from bakeoff.quality.gx import OK, Check, make_suite, why

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target

FINISH_REASONS = ["stop", "length"]  # what OpenAI-compatible servers end a completion with
PERCENTILE_METRICS = ["ttft", "tpot", "e2e", "itl"]
CV_METRICS = ["output_tps", "e2e_ms_p50"]  # checked between repeats of one point
PACING = "pacing"  # the suite whose failures plan quality.client_bound makes warnings or failures
# --- frames ---------------------------------------------------------------------------------


def point_label(df: pd.DataFrame) -> pd.Series:
    return df["workload"].astype(str) + " c=" + df["concurrency"].astype(str) + " r=" + df["repeat"].astype(str)


def prepare_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests plus ok, a row label, output/requested ratio and chunk-timeline columns
    (first, last, smallest gap), so GX never sees the list-valued chunk offsets."""
    df = requests.drop(columns=["chunk_offsets"], errors="ignore").copy()
    chunks = requests["chunk_offsets"] if "chunk_offsets" in requests else pd.Series([[]] * len(df), index=df.index)
    df["text_chunks"] = chunks.map(lambda c: 0 if c is None else len(c)).astype("int64")
    df["first_chunk_s"] = chunks.map(lambda c: float(c[0]) if c is not None and len(c) else None).astype("float64")
    df["last_chunk_s"] = chunks.map(lambda c: float(c[-1]) if c is not None and len(c) else None).astype("float64")
    df["min_chunk_gap_s"] = chunks.map(
        lambda c: float(np.min(np.diff(c))) if c is not None and len(c) > 1 else None
    ).astype("float64")
    df["ok"] = df["error_kind"].isna().astype(bool)
    df["ignore_eos"] = df["ignore_eos"].astype("boolean").fillna(False).astype(bool)
    df["request"] = point_label(df) + " #" + df["index"].astype(str)
    req = pd.to_numeric(df["requested_output_len"], errors="coerce").astype("float64")
    out = pd.to_numeric(df["output_tokens"], errors="coerce").astype("float64")
    df["output_len_ratio"] = (out / req.where(req > 0)).astype("float64")
    df["ttft_minus_first_chunk_s"] = (pd.to_numeric(df["ttft"], errors="coerce") - df["first_chunk_s"]).abs()
    for col in ("ttft", "e2e", "output_tokens", "prompt_tokens", "requested_output_len"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


# shares the server (or the trace) gives per point: each within [0, 1] when present
SERVER_SHARES = (
    "prefix_cache_hit_rate",
    "host_prefix_cache_hit_rate",
    "prefix_cache_hit_rate_expected",
    "spec_acceptance_rate",
)


def prepare_points(points: pd.DataFrame) -> pd.DataFrame:
    """Points plus a row label; results stored before prompts were sized in tokens lack
    input_len_error, which then reads as not measured (null), not as a failure."""
    df = points.copy()
    df["point"] = point_label(df)
    if "input_len_error" not in df:
        df["input_len_error"] = math.nan
    df["input_len_error"] = pd.to_numeric(df["input_len_error"], errors="coerce").astype("float64")
    for col in SERVER_SHARES + ("spec_acceptance_length",):  # server figures: null where not exported
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64") if col in df else math.nan
    for m in PERCENTILE_METRICS:  # points stored before p95 was a column: not measured, not a failure
        if f"{m}_ms_p95" not in df:
            df[f"{m}_ms_p95"] = math.nan
    df["client_bound"] = (
        df["client_bound"].astype("boolean").fillna(False).astype(bool) if "client_bound" in df else False
    )
    return df


def coverage_frame(plan: Plan, points: pd.DataFrame) -> pd.DataFrame:
    """One row per planned (workload, point key): repeats planned vs distinct repeats stored. Trace
    replay and SLA search decide their points while running, so only their stored points count."""
    rows = []
    for w in plan.workloads:
        keys = w.planned_keys()
        if keys is None:
            stored = points[points["workload"] == w.name] if not points.empty else points
            keys = sorted(stored["concurrency"].unique()) if not stored.empty else []
        for c in keys:
            found = 0
            if not points.empty:
                mask = (points["workload"] == w.name) & (points["concurrency"] == c)
                found = int(points.loc[mask, "repeat"].nunique())
            rows.append({"point": f"{w.name} c={c}", "planned_repeats": w.repeats, "found_repeats": found})
    return pd.DataFrame(rows, columns=["point", "planned_repeats", "found_repeats"])


def repeats_frame(points: pd.DataFrame) -> pd.DataFrame:
    """Coefficient of variation (sample std / mean) of CV_METRICS across repeats of each point."""
    cols = ["point", "repeats"] + [f"cv_{m}" for m in CV_METRICS]
    rows = []
    if not points.empty:
        for (w, c), g in points.groupby(["workload", "concurrency"], sort=True):
            if len(g) < 2:
                continue
            row = {"point": f"{w} c={c}", "repeats": len(g)}
            for m in CV_METRICS:
                vals = pd.to_numeric(g[m], errors="coerce").dropna()
                mean = vals.mean() if len(vals) else math.nan
                row[f"cv_{m}"] = float(vals.std(ddof=1) / mean) if len(vals) >= 2 and mean else math.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=cols).astype({f"cv_{m}": "float64" for m in CV_METRICS})


# --- suites ---------------------------------------------------------------------------------


def latency_bound_s(plan: Plan, target: Target) -> float:
    """Largest latency a stored request can honestly show: the client's timeout, rescaled when
    the emulator runs faster than real time, plus slack. Above it a value is garbage or inf."""
    timeout = max(w.request_timeout_s for w in plan.workloads)
    scale = target.emulator.time_scale if target.emulated else 1.0
    return timeout * max(1.0, 1.0 / scale) * 1.1 + 1.0


def request_suite(plan: Plan, target: Target) -> gx.ExpectationSuite:
    q, bound = plan.quality, latency_bound_s(plan, target)
    tol = q.output_len_tolerance
    exps: list[gxe.Expectation] = []
    for col in ("ttft", "e2e"):
        exps += [
            gxe.ExpectColumnValuesToNotBeNull(
                column=col, row_condition=OK, meta=why(f"a successful request has a {col}")
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=col,
                min_value=0,
                max_value=bound,
                row_condition=OK,
                meta=why(f"{col} must be non-negative and finite (<= {bound:.0f} s)"),
            ),
        ]
    exps += [
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="e2e",
            column_B="ttft",
            or_equal=True,
            row_condition=OK,
            ignore_row_if="either_value_is_missing",
            meta=why("TTFT <= E2E"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="e2e",
            column_B="last_chunk_s",
            or_equal=True,
            row_condition=OK,
            ignore_row_if="either_value_is_missing",
            meta=why("the last chunk arrives no later than E2E"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="min_chunk_gap_s",
            min_value=0,
            row_condition=OK,
            meta=why("chunk arrival times never go backwards (ITL >= 0)"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="output_tokens",
            min_value=1,
            row_condition=OK,
            meta=why("a successful request produced at least one token"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="prompt_tokens", min_value=1, row_condition=OK, meta=why("prompt token counts are positive")
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="output_len_ratio",
            min_value=1 - tol,
            max_value=1 + tol,
            row_condition=OK & (Column("ignore_eos") == True),  # noqa: E712
            meta=why(f"output length within +-{tol:.0%} of the requested length when EOS is ignored"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="finish_reason", row_condition=OK, meta=why("a successful request has a finish reason")
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="finish_reason",
            value_set=FINISH_REASONS,
            row_condition=OK,
            meta=why(f"finish reason is one of {FINISH_REASONS}"),
        ),
    ]
    return make_suite(f"{target.slug}.requests", exps)


def point_suite(plan: Plan, target: Target) -> gx.ExpectationSuite:
    q = plan.quality
    exps: list[gxe.Expectation] = [
        gxe.ExpectColumnValuesToBeBetween(
            column="error_rate",
            min_value=0,
            max_value=q.max_error_rate,
            meta=why(f"error rate <= {q.max_error_rate:.1%} (plan quality.max_error_rate)"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="completed",
            min_value=q.min_completed_per_point,
            meta=why(f"at least {q.min_completed_per_point} completed requests per point"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="output_tps", min_value=0, strict_min=True, meta=why("output throughput > 0")
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="output_tps", meta=why("output throughput was measured")),
    ]
    for w in plan.workloads:
        tol = w.input_len_tolerance
        exps.append(
            gxe.ExpectColumnValuesToBeBetween(
                column="input_len_error",
                min_value=-tol,
                max_value=tol,
                row_condition=Column("workload") == w.name,
                meta=why(
                    f"{w.name}: prompts the server measured (usage prompt_tokens) within +-{tol:.0%} of the "
                    f"requested length (workload input_len_tolerance)"
                ),
            )
        )
    exps += [
        gxe.ExpectColumnValuesToBeBetween(
            column=col, min_value=0, max_value=1, meta=why(f"{col} is a share in [0, 1] (null: not exported)")
        )
        for col in SERVER_SHARES
    ]
    exps.append(
        gxe.ExpectColumnValuesToBeBetween(
            column="spec_acceptance_length",
            min_value=1,
            meta=why("speculative decoding yields at least one token per verification step"),
        )
    )
    for m in PERCENTILE_METRICS:
        # p90 <= p99 directly too: a table without p95 (stored before it was a column) is still checked
        for lo, hi in (("p50", "p90"), ("p90", "p99"), ("p90", "p95"), ("p95", "p99")):
            exps.append(
                gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A=f"{m}_ms_{hi}",
                    column_B=f"{m}_ms_{lo}",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                    meta=why(f"{m} percentiles ordered: {lo} <= {hi}"),
                )
            )
        exps.append(
            gxe.ExpectColumnValuesToBeBetween(column=f"{m}_ms_p50", min_value=0, meta=why(f"{m} p50 is non-negative"))
        )
    return make_suite(f"{target.slug}.points", exps)


def pacing_suite(plan: Plan, target: Target) -> gx.ExpectationSuite:
    """Every point paced by the server: a client-bound point (any repeat, any fleet member) understates
    the hardware. Whether a failure warns or fails the target is plan quality.client_bound (validate)."""
    return make_suite(
        f"{target.slug}.pacing",
        [
            gxe.ExpectColumnValuesToBeInSet(
                column="client_bound",
                value_set=[False],
                meta=why(
                    "the server, not the client, set the pace (a client-bound point is never the hardware's "
                    f"figure; plan quality.client_bound: {plan.quality.client_bound}); measure it with more "
                    "client processes (the workload's workers or client_fleet) or a bigger client machine"
                ),
            )
        ],
    )


def coverage_suite(plan: Plan, target: Target) -> gx.ExpectationSuite:
    return make_suite(
        f"{target.slug}.coverage",
        [
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="found_repeats",
                column_B="planned_repeats",
                or_equal=True,
                meta=why("every planned workload x concurrency x repeat is present"),
            ),
        ],
    )


def repeats_suite(plan: Plan, target: Target) -> gx.ExpectationSuite:
    return make_suite(
        f"{target.slug}.repeats",
        [
            gxe.ExpectColumnValuesToBeBetween(
                column=f"cv_{m}",
                min_value=0,
                max_value=plan.quality.max_cv,
                meta=why(f"repeats consistent: CV of {m} <= {plan.quality.max_cv} (plan quality.max_cv)"),
            )
            for m in CV_METRICS
        ],
    )


REQUEST_COLUMNS = {
    "workload",
    "concurrency",
    "repeat",
    "index",
    "ttft",
    "e2e",
    "prompt_tokens",
    "output_tokens",
    "requested_output_len",
    "ignore_eos",
    "finish_reason",
    "error_kind",
    "tokens_source",
}
POINT_COLUMNS_CHECKED = {"workload", "concurrency", "repeat", "error_rate", "completed", "output_tps"} | {
    f"{m}_ms_{p}" for m in PERCENTILE_METRICS for p in ("p50", "p90", "p99")
}


class MissingColumns(ValueError):
    """A stored table lacks columns of the records contract (bench.metrics.records); nothing to validate."""


def _require(df: pd.DataFrame, needed: set[str], table: str) -> None:
    missing = sorted(needed - set(df.columns))
    if missing:
        raise MissingColumns(
            f"the {table} table lacks contract columns {missing} (see bench/metrics/records.py); "
            "it was written by an incompatible client version"
        )


def checks_for(plan: Plan, target: Target, requests: pd.DataFrame, points: pd.DataFrame) -> list[Check]:
    """Every suite for one target that has results, paired with the frame it validates."""
    if not requests.empty:
        _require(requests, REQUEST_COLUMNS, "requests")
    if not points.empty:
        _require(points, POINT_COLUMNS_CHECKED, "points")
    checks: list[Check] = []
    if not requests.empty:
        req = prepare_requests(requests)
        flag = "first_chunk_has_text" in req.columns
        checks += [
            Check("requests", req, request_suite(plan, target), "request"),
            Check("compliance", req, compliance.suite(plan, target, flag), "request"),
        ]
    if not points.empty:
        pts = prepare_points(points)
        checks.append(Check("points", pts, point_suite(plan, target), "point"))
        checks.append(Check(PACING, pts, pacing_suite(plan, target), "point"))
    checks += [
        Check("coverage", coverage_frame(plan, points), coverage_suite(plan, target), "point"),
        Check("repeats", repeats_frame(points), repeats_suite(plan, target), "point"),
    ]
    return checks
