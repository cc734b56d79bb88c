"""The agentic-session plan through the bakeoff DAG on the local provider: every session figure
reaches the results and the report, EMULATED."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bakeoff import store
from tests.e2e.conftest import dag_run_state, run_dag

pytestmark = pytest.mark.e2e


def test_local_agentic_runs_end_to_end_with_session_metrics(airflow_env):
    res = run_dag(airflow_env, "local-agentic", timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (rdir,) = (Path(airflow_env["BAKEOFF_DATA"]) / "results" / "local-agentic").glob("run_id=*")
    run = store.run_facts(rdir)
    assert dag_run_state(airflow_env, run.run_id) == "success" and list(run.report.failed_steps) == []
    points = pd.concat(pd.read_parquet(p) for p in rdir.glob("target=*/points/*.parquet"))
    assert sorted(points["target"].unique()) == ["b200-vllm", "mi355x-vllm"]
    assert sorted(points["concurrency"].unique()) == [2, 8] and points["emulated"].all()
    assert (points["sessions_completed"] > 0).all() and (points["session_goodput_sps"] > 0).all()
    # the emulator's own counters against the trace's prediction (both with room for every block)
    measured, expected = points["prefix_cache_hit_rate"].astype(float), points["prefix_cache_hit_rate_expected"]
    assert (measured > 0.3).all() and (abs(measured - expected.astype(float)) < 0.01).all()
    assert all(json.loads(b) for b in points["ttft_by_context"])
    turns = pd.concat(pd.read_parquet(p) for p in rdir.glob("target=*/requests/*.parquet"))
    assert turns["session_id"].notna().all() and (turns["turn"] >= 0).all()
    assert (turns["uncached_tokens_expected"] <= turns["context_tokens"]).all()
    html = Path(run.report.files["html"]).read_text()
    assert "EMULATED" in html and 'data-chart="ttft-context"' in html and 'data-chart="hit-rate"' in html
    assert "prefix hit server / trace" in html and "USD per session" in html
    costs = pd.read_parquet(rdir / "cost.parquet")
    assert (costs["usd_per_session"] > 0).all() and (costs["usd_per_1k_turns"] > 0).all()
