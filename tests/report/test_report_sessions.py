"""The report on a session workload and on speculative decoding: the two session charts, the
server's hit rate beside the trace's, cost per session in the ranking and the brief, and acceptance
beside throughput -- from hand-made points, EMULATED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import synthetic

from bakeoff import cost
from bakeoff.plan import plan_from_dict
from bakeoff.report import build_report
from bakeoff.report.gather import gather

BINS = json.dumps(
    [
        {"lo": 0, "hi": 1024, "n": 4, "p50_ms": 20.0, "p99_ms": 40.0},
        {"lo": 4096, "hi": 8192, "n": 9, "p50_ms": 60.0, "p99_ms": 90.0},
    ]
)


def _session_plan():
    raw = synthetic.plan_dict(names=("mi355x-vllm", "b200-vllm"))
    w = {
        "name": raw["workloads"][0]["name"],
        "kind": "sessions",
        "sessions": {"sessions": 8, "concurrent_sessions": [2, 8]},
    }
    raw["workloads"] = [w]
    return plan_from_dict(raw)


def _rows(spec: bool = False):
    rows = []
    for slug, per_h in (("mi355x-vllm", 400.0), ("b200-vllm", 500.0)):
        for c in (2, 8):
            rows.append(
                {
                    "target": slug,
                    "concurrency": c,
                    "ttft_by_context": BINS,
                    "prefix_cache_hit_rate": 0.8 - 0.01 * c,
                    "prefix_cache_hit_rate_expected": 0.8,
                    "sessions_completed": 6,
                    "sessions_cut": 0,
                    "session_goodput_sps": 0.1,
                    "sessions_per_hour": per_h * c,
                    "turns_per_hour": 10 * per_h * c,
                    **({"spec_acceptance_length": 2.7, "spec_acceptance_rate": 0.57} if spec else {}),
                }
            )
    return rows


@pytest.mark.slow
def test_session_workload_report_has_charts_hit_rates_and_cost_per_session(tmp_path):
    plan = _session_plan()
    rdir = synthetic.write_points(tmp_path, plan, _rows(spec=True))
    cost.cost_run(plan, rdir)
    d = gather(plan, rdir)
    assert d.is_sessions(plan.workloads[0].name) and d.has_sessions and d.has_spec
    (best, _) = d.session_costs(plan.workloads[0].name)
    assert best["sessions"] == 8 and best["hit_rate"] == pytest.approx(0.72) and best["hit_rate_expected"] == 0.8
    paths = build_report(plan, rdir, tmp_path / "out")
    html = Path(paths["html"]).read_text()
    assert 'data-chart="ttft-context"' in html and 'data-chart="hit-rate"' in html
    assert html.count('class="session-cost"') == 2 and "USD per 1,000 turns" in html
    assert "72.0% / 80.0%" in html and "2.7 (57.0%)" in html  # server / trace; AL (acceptance rate)
    assert "EMULATED" in html
    md = Path(paths["markdown"]).read_text()
    assert "USD per session" in md and "72.0% / 80.0%" in md


def test_request_report_without_server_figures_has_no_session_charts(tmp_path):
    plan = synthetic.make_plan()
    rdir = synthetic.write_points(tmp_path, plan, [{"target": "mi355x-vllm", "concurrency": 1}])
    cost.cost_run(plan, rdir)
    html = Path(build_report(plan, rdir, tmp_path / "out")["html"]).read_text()
    assert 'data-chart="ttft-context"' not in html and "prefix hit server / trace" not in html
    assert "spec AL" not in html and "USD per session" not in html
