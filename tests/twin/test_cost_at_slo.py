"""One "cost at the SLO": predict chooses among the twin's points on the plan's load levels with the function
the cost step uses on measured points (bakeoff.spend.at_slo), names every figure's unit, and marks as
EXTRAPOLATED what lies beyond the levels the plan asks for."""

from __future__ import annotations

import math

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.prediction.predict import predict_plan, render
from bakeoff.spend import at_slo


def test_the_cheapest_point_meeting_the_slo_wins_and_a_tie_goes_to_the_higher_load():
    pts = [
        {"concurrency": 1, "meets_slo": True, "usd": 3.0},
        {"concurrency": 4, "meets_slo": True, "usd": 2.0},
        {"concurrency": 8, "meets_slo": True, "usd": 2.0},
        {"concurrency": 16, "meets_slo": False, "usd": 1.0},  # cheaper, but misses the SLO
        {"concurrency": 32, "meets_slo": True, "usd": math.nan},  # no cost: sorts last
    ]
    assert at_slo.cheapest(pts, "usd")["concurrency"] == 8
    assert at_slo.cheapest([p | {"meets_slo": False} for p in pts], "usd") is None


def test_predict_picks_its_cost_at_the_slo_among_the_plans_levels_and_marks_what_lies_beyond():
    plan = load_plan("local-demo")
    doc = predict_plan(plan)
    levels = plan.workloads[0].levels()
    for t in doc["targets"]:
        (w,) = t["workloads"]
        s = w["at_slo"]
        assert [p["concurrency"] for p in w["points"]] == s["levels"] == levels
        best = at_slo.cheapest(w["points"], "usd_per_m")  # the function the cost step calls
        assert best is not None and s["concurrency"] == best["concurrency"] and s["usd_per_mtok"] == best["usd_per_m"]
        x = s["extrapolated"]  # a tray at c=16 is far from full: a higher concurrency still meets the SLO
        assert x["concurrency"] > max(levels) and x["usd_per_m"] < s["usd_per_mtok"]
    text = render(doc)
    assert "output tok/s per GPU" in text and "output tok/s per user" in text
    assert "USD per M output tokens" in text and "EXTRAPOLATED beyond the plan's levels" in text


def test_a_plan_whose_levels_all_miss_the_slo_is_not_met_whatever_lies_beyond():
    raw = load_plan("local-demo").model_dump(mode="json", exclude_unset=True)
    raw["slo"] = {"tpot_p99_ms": 1, "ttft_p99_ms": 500}  # no level of DeepSeek-V4-Pro decodes in 1 ms
    raw["pricing"] = {**raw.get("pricing", {}), "rank_by": "total"}
    doc = predict_plan(plan_from_dict(raw))
    for t in doc["targets"]:
        s = t["workloads"][0]["at_slo"]
        assert s["meets"] is False and "exceeds 1 ms" in s["reason"] and "extrapolated" not in s
        assert all(p["meets_slo"] is False for p in t["workloads"][0]["points"])
    text = render(doc)
    assert "not met at the plan's levels 1, 4, 16" in text and "USD per M input+output tokens" in text
