"""The dashboard's run document marks what the client set the pace for: per level (drawn hollow on the
Compare page's Pareto curves) and at the SLO (a lower bound), and carries the SLA in the buyer's words."""

import pandas as pd
import synthetic

from bakeoff.cost import cost_run
from bakeoff.report.summary import summarize


def test_summary_marks_client_bound_levels_and_lower_bounds(tmp_path):
    plan = synthetic.make_plan(concurrency=(1, 4, 16), repeats=1)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    for f in rdir.glob("target=mi355x-vllm/points/*-c4-*.parquet"):
        pd.read_parquet(f).assign(client_bound=True).to_parquet(f)
    cost_run(plan, rdir)
    doc = summarize(plan, rdir)
    assert doc["slo"] == "p99 TTFT ≤ 500 ms, p99 TPOT ≤ 40 ms"
    mi = doc["targets"]["mi355x-vllm"]["workloads"]["chat-1k-128"]
    assert [lv["client_bound"] for lv in mi["frontier"]] == [False, True, False]
    assert mi["paced_by"] == "server" and mi["lower_bound"] and mi["client_bound_concurrency"] == 4
    b200 = doc["targets"]["b200-vllm"]["workloads"]["chat-1k-128"]
    assert not b200["lower_bound"] and not any(lv["client_bound"] for lv in b200["frontier"])
