"""A client-bound point is marked in every output: the per-target table, the charts (hollow markers),
the Markdown, the brief, the CSVs; the headline names a client-bound cheapest level as a lower bound."""

from pathlib import Path

import pandas as pd
import pytest
import synthetic

from bakeoff.report import build_report, charts
from bakeoff.report.gather import gather

CLIENT_BOUND = {("mi355x-vllm", 4)}  # both repeats of MI355X at c=4, the level meeting the SLO


def _run(tmp_path):
    plan = synthetic.make_plan(concurrency=(1, 4, 16), repeats=2)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    for f in rdir.glob("target=*/points/*.parquet"):
        df = pd.read_parquet(f)
        df["client_bound"] = [(t, c) in CLIENT_BOUND for t, c in zip(df["target"], df["concurrency"], strict=True)]
        df.to_parquet(f)
    return plan, rdir


@pytest.mark.slow
def test_client_bound_points_are_marked_everywhere_and_the_headline_says_lower_bound(tmp_path):
    plan, rdir = _run(tmp_path)
    paths = build_report(plan, rdir, tmp_path / "out")
    d = gather(plan, rdir)
    at = d.tables.at_slo.set_index("target")
    assert at.loc["mi355x-vllm", "paced_by"] == "server" and at.loc["mi355x-vllm", "concurrency"] == 1
    assert bool(at.loc["mi355x-vllm", "lower_bound"]) and at.loc["mi355x-vllm", "client_bound_concurrency"] == 4
    summary = d.tables.headline["summary"]
    assert "mi355x-vllm's cheapest level meeting the SLO was client-bound" in summary and "client_fleet" in summary

    html = Path(paths["html"]).read_text()
    assert html.count('class="fail nw client-bound"') == 2  # two repeats, per-target table
    assert "lower bound: client-bound at c=4" in html and 'class="fail client-bound-points"' in html
    md = Path(paths["markdown"]).read_text()
    assert "Client-bound points" in md and "mi355x-vllm c4 r0, mi355x-vllm c4 r1" in md
    assert "lower bound: client-bound at c4" in md
    points = pd.read_csv(paths["csv_points"])
    assert points["client_bound"].sum() == 2
    at_csv = pd.read_csv(paths["csv_cost_at_slo"])
    assert set(at_csv["paced_by"]) == {"server"} and at_csv["lower_bound"].sum() == 1
    assert Path(paths["pdf"]).read_bytes().startswith(b"%PDF")
    assert any("Client-bound points" in line for line in d.pacing_lines("chat-1k-128"))  # the brief's lines
    for chart in (charts.throughput_vs_interactivity, charts.cost_vs_interactivity):
        assert _hollow(chart(d, "chat-1k-128")) == 1, chart.__name__  # the one client-bound level


def _hollow(fig) -> int:
    """Markers drawn hollow (white face) in a chart's scatter collections."""
    (ax,) = fig.axes
    n = 0
    for coll in ax.collections:
        faces = coll.get_facecolors()
        if len(faces) and (faces[:, :3] == 1).all() and len(coll.get_offsets()):
            n += len(coll.get_offsets())
    return n


@pytest.mark.slow
def test_a_run_without_client_bound_points_marks_none(tmp_path):
    plan = synthetic.make_plan(concurrency=(1, 4), repeats=1)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    paths = build_report(plan, rdir, tmp_path / "out")
    html = Path(paths["html"]).read_text()
    assert "CLIENT-BOUND" not in html and "lower bound" not in html
    assert _hollow(charts.throughput_vs_interactivity(gather(plan, rdir), "chat-1k-128")) == 0
