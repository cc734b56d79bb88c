"""Client-bound points: cost at the SLO and the ranking rest only on levels the server set the pace
for, and the headline says when a figure is a lower bound for the hardware and how to measure it."""

import pandas as pd
import pytest
import synthetic

from bakeoff import cost


def _run(tmp_path, client_bound):
    """MI355X (8.6 USD/GPU-h) and B200 (14) at c1 / c4 / c16, c16 missing the SLO; client_bound maps
    (target, concurrency, repeat) -> True."""
    plan = synthetic.make_plan(utilisation=1.0)
    a, b = (t.slug for t in plan.targets)
    rows = []
    for slug, tps in ((a, (100.0, 300.0, 500.0)), (b, (150.0, 400.0, 900.0))):
        for c, v in zip((1, 4, 16), tps, strict=True):
            for rep in (0, 1):
                rows.append(
                    {
                        "target": slug,
                        "concurrency": c,
                        "repeat": rep,
                        "output_tps_per_gpu": v * (1 + 0.01 * rep),
                        "meets_slo": c < 16,
                        "client_bound": client_bound.get((slug, c, rep), False),
                    }
                )
    rdir = synthetic.write_points(tmp_path, plan, rows)
    return cost.compute(plan, rdir)


def test_a_client_bound_cheapest_level_is_not_the_figure_and_the_headline_says_lower_bound(tmp_path):
    # one repeat of one fleet member set the pace at MI355X c4: the level is client-bound
    t = _run(tmp_path, {("mi355x-vllm", 4, 1): True})
    at = t.at_slo.set_index("target")
    mi = at.loc["mi355x-vllm"]
    assert mi["concurrency"] == 1 and mi["paced_by"] == "server"  # c4 was cheaper, but the client set its pace
    assert bool(mi["lower_bound"]) and mi["client_bound_concurrency"] == 4
    # the level's mean cost over its two repeats (300 and 303 tok/s per GPU)
    mean = (8.6 / (300 * 3600 / 1e6) + 8.6 / (303 * 3600 / 1e6)) / 2
    assert mi["client_bound_usd_per_m_output"] == pytest.approx(mean, rel=1e-9)
    assert not bool(at.loc["b200-vllm", "lower_bound"]) and at.loc["b200-vllm", "concurrency"] == 4
    # ranked on server-paced figures only: B200 at c4 (14 / 1.44 M) beats MI355X at c1 (8.6 / 0.36 M)
    assert at.loc["b200-vllm", "rank"] == 1 and at.loc["mi355x-vllm", "rank"] == 2
    h = t.headline
    assert h["workloads"]["chat-1k-128"]["client_bound"] == [
        {"target": "mi355x-vllm", "concurrency": 4, "usd_per_m": pytest.approx(7.923, abs=1e-3), "only": False}
    ]
    assert "mi355x-vllm's cheapest level meeting the SLO was client-bound" in h["summary"]
    assert "lower bound for the hardware" in h["summary"] and "client_fleet" in h["summary"]


def test_a_target_meeting_the_slo_only_client_bound_is_shown_as_a_lower_bound_never_ranked(tmp_path):
    bound = {("mi355x-vllm", c, r): True for c in (1, 4, 16) for r in (0, 1)}
    t = _run(tmp_path, bound)
    at = t.at_slo.set_index("target")
    mi = at.loc["mi355x-vllm"]
    assert bool(mi["slo_met"]) and mi["paced_by"] == "client" and pd.isna(mi["rank"])
    assert at.loc["b200-vllm", "rank"] == 1
    ranking = t.headline["workloads"]["chat-1k-128"]["ranking"]
    assert [r["target"] for r in ranking] == ["b200-vllm"]
    assert "mi355x-vllm met the SLO only where the client set the pace" in t.headline["summary"]
    assert "not ranked" in t.headline["summary"]


def test_server_paced_runs_say_nothing_of_client_bounds(tmp_path):
    t = _run(tmp_path, {("mi355x-vllm", 16, 0): True})  # a client-bound level that misses the SLO anyway
    at = t.at_slo.set_index("target")
    assert not at["lower_bound"].any() and set(at["paced_by"]) == {"server"}
    assert at.loc["mi355x-vllm", "levels_client_bound"] == 1
    assert "client" not in t.headline["summary"]
