"""Capacity at SLO tiers: one search per tier over shared points, bounded by one budget, saying when a tier
stopped short; the knees are checked against a response whose limits are known."""

from __future__ import annotations

import asyncio

from bakeoff.bench.load.capacity import search_tiers

LIMITS = {"interactive": 5, "standard": 20, "batch": 100}  # the highest load each tier's SLO allows


def _measured():
    calls: list[int] = []

    async def measure(load: int):
        calls.append(load)
        summary = {"meets_slo": True, "output_tps_per_gpu": 10.0 * load, "gpus": 8, "p99_ms": float(load)}
        return summary, [{"load": load}]

    judges = {
        name: (lambda s, recs, lim=lim: s["p99_ms"] <= lim and recs[0]["load"] == s["p99_ms"])
        for name, lim in LIMITS.items()
    }
    return calls, measure, judges


def test_each_tier_finds_its_knee_and_shares_the_points():
    calls, measure, judges = _measured()
    out = asyncio.run(search_tiers(judges, measure, over="concurrency", start=1, maximum=256, budget=64))
    tiers = out["tiers"]
    assert {n: (t["best"], t["first_failing"]) for n, t in tiers.items()} == {
        "interactive": (5, 6),
        "standard": (20, 21),
        "batch": (100, 101),
    }
    assert not any(t["stopped_short"] for t in tiers.values())
    assert len(calls) == len(set(calls)) == out["points_measured"]  # no load measured twice
    # the standard tier's search starts on points the interactive one measured: 1, 2, 4 were free
    assert [s["load"] for s in tiers["standard"]["steps"]][:3] == [1, 2, 4] and calls.count(4) == 1
    assert tiers["batch"]["figures"]["output_tps_per_gpu"] == 1000.0


def test_a_small_budget_stops_short_and_says_so():
    calls, measure, judges = _measured()
    out = asyncio.run(search_tiers(judges, measure, over="concurrency", start=1, maximum=256, budget=6))
    assert len(calls) == 6 and out["points_measured"] == 6
    t = out["tiers"]
    assert t["interactive"]["best"] == 5 and not t["interactive"]["stopped_short"]
    assert t["batch"]["stopped_short"] and t["batch"]["best"] is not None and t["batch"]["best"] < 100


def test_a_tier_met_at_the_search_max_is_not_short_and_one_never_met_has_no_capacity():
    calls, measure, _ = _measured()
    judges = {"always": lambda s, r: True, "never": lambda s, r: False}
    out = asyncio.run(search_tiers(judges, measure, over="concurrency", start=1, maximum=8, budget=10))
    assert out["tiers"]["always"]["best"] == 8 and not out["tiers"]["always"]["stopped_short"]
    never = out["tiers"]["never"]
    assert never["best"] is None and never["first_failing"] == 1 and never["figures"] == {}
