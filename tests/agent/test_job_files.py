"""A co-located job carries every workload file it names, a session trace included, and the agent reads
them from its own inputs folder."""

from __future__ import annotations

from pathlib import Path

from bakeoff.agent import file_field, with_file_field
from bakeoff.agent.job import build_job
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import load_plan, plan_from_dict


def test_a_session_trace_travels_inlined_and_is_renamed_to_a_plain_name():
    raw = load_plan("local-agentic").model_dump(mode="json")
    raw["workloads"][0]["sessions"] = {
        "source": "trace",
        "path": "agentic-sample.jsonl",
        "concurrent_sessions": [2],
    }
    plan = plan_from_dict(raw)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:1", model="m", stack="vllm")
    job = build_job(plan, plan.targets[0], ep, "r1")
    name = job["workloads"][0]["sessions"]["path"]
    assert "/" not in name and name.endswith(".jsonl")
    sample = Path(__file__).parents[2] / "include" / "workloads" / "agentic-sample.jsonl"
    assert job["files"][name] == sample.read_text()


def test_dotted_file_fields_read_and_write_without_touching_the_original():
    w = {"name": "w", "sessions": {"source": "trace", "path": "a.jsonl"}}
    moved = with_file_field(w, "sessions.path", "/inputs/a.jsonl")
    assert file_field(moved, "sessions.path") == "/inputs/a.jsonl"
    assert file_field(w, "sessions.path") == "a.jsonl"
    assert file_field(w, "sessions.fit_from") is None and file_field(w, "trace_path") is None
