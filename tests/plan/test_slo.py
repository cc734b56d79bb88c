"""The buyer's SLA vocabulary: every percentile bound, a per-request SLO with a share, one judgement
of a point, goodput over request records, and the SLA in the buyer's words."""

import math
import re

import pytest

from bakeoff.bench.metrics.summary import summarize
from bakeoff.plan import PlanError, Slo, load_plan, plan_from_dict, plans_dir
from bakeoff.plan.slo import METRICS, PERCENTILES, RequestTimes
from tests.bench.metrics.record_fixtures import rec


def _plan(slo):
    doc = load_plan(plans_dir() / "local-demo.yaml").model_dump(mode="json", exclude_none=True)
    doc["slo"] = slo
    return plan_from_dict(doc)


def test_every_metric_and_percentile_is_a_bound_and_reads_its_point_column():
    keys = [f"{m}_{p}_ms" for m in METRICS for p in PERCENTILES]
    slo = Slo(**dict.fromkeys(keys, 100.0))
    assert [(m, p) for m, p, _ in slo.bounds()] == [(m, p) for m in METRICS for p in PERCENTILES]
    row = {f"{m}_ms_{p}": 50.0 for m in METRICS for p in PERCENTILES}
    assert slo.meets(row)
    row["itl_ms_p95"] = 101.0
    assert slo.misses(row) == ["p95 ITL 101 ms > 100 ms"]
    del row["itl_ms_p95"]
    assert slo.misses(row) == ["p95 ITL not measured (bound 100 ms)"]


def test_unknown_keys_name_the_valid_ones():
    with pytest.raises(PlanError) as e:
        _plan({"ttft_p97_ms": 2000})
    msg = str(e.value)
    assert "slo: unknown key ttft_p97_ms" in msg and "ttft_p95_ms" in msg and "per_request" in msg
    with pytest.raises(PlanError) as e:
        _plan({"per_request": {"ttft_ms": 2000, "share": 0.9}})
    assert "slo.per_request: unknown key share; valid keys: ttft_ms, tpot_ms, e2e_ms, min_share" in str(e.value)


def test_per_request_needs_a_share_and_a_bound():
    with pytest.raises(PlanError, match=r"slo\.per_request\.min_share: required field is missing"):
        _plan({"per_request": {"ttft_ms": 2000}})
    with pytest.raises(PlanError, match=r"slo\.per_request: set at least one of ttft_ms, tpot_ms, e2e_ms"):
        _plan({"per_request": {"min_share": 0.9}})
    with pytest.raises(PlanError, match=r"slo\.per_request\.min_share"):
        _plan({"per_request": {"ttft_ms": 2000, "min_share": 1.5}})


def test_the_issues_two_plans_validate_and_read_in_the_buyers_words():
    a = _plan({"ttft_p95_ms": 2000, "e2e_p95_ms": 12000}).slo
    assert a.in_words() == "p95 TTFT ≤ 2,000 ms, p95 E2E ≤ 12,000 ms"
    b = _plan({"per_request": {"ttft_ms": 2000, "tpot_ms": 50, "min_share": 0.95}}).slo
    assert b.in_words() == "at least 95% of requests with TTFT ≤ 2,000 ms and TPOT ≤ 50 ms (goodput)"
    assert Slo().in_words().startswith("no SLO set")


def test_goodput_share_counts_failures_and_missing_ttft_as_not_good():
    slo = Slo(per_request={"ttft_ms": 100, "tpot_ms": 10, "min_share": 0.5})
    times = [
        RequestTimes(True, 90.0, 9.0, 500.0),  # good
        RequestTimes(True, 90.0, None, 90.0),  # one-token answer: no TPOT, still good
        RequestTimes(True, 110.0, 9.0, 500.0),  # TTFT over
        RequestTimes(True, 90.0, 11.0, 500.0),  # TPOT over
        RequestTimes(False, None, None, None),  # failed
        RequestTimes(True, None, 9.0, 500.0),  # TTFT not measured
    ]
    assert slo.goodput_share(times) == pytest.approx(2 / 6)
    assert slo.goodput_share([]) == 0.0


def test_without_per_request_a_request_is_held_to_each_metrics_highest_percentile_bound():
    slo = Slo(ttft_p50_ms=50, ttft_p99_ms=200, tpot_p50_ms=20, e2e_p90_ms=1000)
    assert slo.request_bounds() == {"ttft": 200.0, "tpot": 20.0, "e2e": 1000.0}
    assert slo.tightest("ttft") == 50.0
    assert Slo(per_request={"e2e_ms": 300, "min_share": 1}).request_bounds() == {"e2e": 300.0}


def _rec(i, ttft, e2e, out=5, error=None):
    """A request of out tokens streamed evenly from TTFT to E2E (seconds), or a failed one."""
    if error:
        return rec(i, float(i), elapsed=e2e, error_kind=error)
    chunks = [ttft + (e2e - ttft) * k / (out - 1) for k in range(out)]
    return rec(i, float(i), ttft=ttft, e2e=e2e, elapsed=e2e, chunk_offsets=chunks, output_tokens=out, prompt_tokens=10)


def test_a_point_meets_a_per_request_slo_when_the_share_reaches_min_share():
    # TPOT (e2e - ttft) / 4: 25 ms, 25 ms, 25 ms, 100 ms; the fifth request failed
    records = [_rec(i, 0.1, 0.2) for i in range(3)] + [_rec(3, 0.1, 0.5), _rec(4, 0, 0, error="timeout")]

    def point(min_share):
        slo = Slo(per_request={"ttft_ms": 2000, "tpot_ms": 50, "min_share": min_share})
        return summarize(records, gpus=1, slo=slo, emulated=True)

    s = point(0.6)
    assert s["good_fraction"] == pytest.approx(3 / 5)
    assert s["meets_slo"] is True
    assert point(0.61)["meets_slo"] is False


def test_points_carry_every_percentile_a_bound_can_name():
    s = summarize([_rec(i, 0.01 * (i + 1), 0.1 + 0.01 * i) for i in range(20)], gpus=1, emulated=True)
    for m in METRICS:
        for p in PERCENTILES:
            assert math.isfinite(s[f"{m}_ms_{p}"]), f"{m}_ms_{p}"
    assert s["ttft_ms_p90"] < s["ttft_ms_p95"] < s["ttft_ms_p99"]
    slo = Slo(ttft_p95_ms=s["ttft_ms_p95"] - 0.01)
    assert (
        summarize([_rec(i, 0.01 * (i + 1), 0.1 + 0.01 * i) for i in range(20)], gpus=1, slo=slo, emulated=True)[
            "meets_slo"
        ]
        is False
    )


@pytest.mark.parametrize(
    "slo, field",
    [
        ({"ttft_p95_ms": float("inf")}, "slo.ttft_p95_ms"),
        ({"e2e_p99_ms": float("nan")}, "slo.e2e_p99_ms"),
        ({"itl_p50_ms": 0}, "slo.itl_p50_ms"),
        ({"tpot_p90_ms": 1e9}, "slo.tpot_p90_ms"),
        ({"__class__": 1}, "slo: unknown key __class__"),
        ("fast", "slo"),
    ],
)
def test_hostile_slo_values_are_refused_naming_the_field(slo, field):
    with pytest.raises(PlanError, match=re.escape(field)):
        _plan(slo)
