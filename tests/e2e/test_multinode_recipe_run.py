"""An InferenceX multi-node recipe as a target, end to end without Airflow (`bakeoff run`, the shared
multinode_run), shrunk to a few requests: the GB300 Dynamo + SGLang recipe's arm renders into two emulated
NVL72 trays (prefill, decode), which provision all or nothing, serve through the router, are costed with both
trays billed, and show in the report's Rack scale section beside the 8-GPU MI355X node; cluster.json records
the recipe."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def test_a_gb300_dynamo_recipe_target_runs_and_shows_at_rack_scale(multinode_run):
    doc = json.loads((multinode_run.rdir / "target=gb300-dynamo-sglang" / "cluster.json").read_text())
    assert [n["role"] for n in doc["nodes"]] == ["prefill", "decode"]
    assert all(n["ready_s"] is not None for n in doc["nodes"])
    rec = doc["recipe"]
    assert (rec["recipe"], rec["arm"], rec["orchestrator"], rec["engine"]) == (
        "dsr1-fp8-gb300-dynamo-sglang",
        0,
        "dynamo",
        "sglang",
    )
    assert rec["commit"].startswith("843c6254") and rec["source"].endswith("configs/nvidia-master.yaml")
    # the deploy step's readiness looked at both roles; each role's image (the recipe's) and parallelism
    deployed = json.loads((multinode_run.rdir / "target=gb300-dynamo-sglang" / "deploy.json").read_text())
    roles = [(r["role"], r["tensor_parallel"], r["emulated"]) for r in deployed["roles"]]
    assert roles == [("prefill", 4, True), ("decode", 4, True)]
    assert {r["image"] for r in deployed["roles"]} == {rec["image"]} and rec["image"]
    (md,) = (multinode_run.data / "reports").rglob("*.md")
    section = md.read_text()[md.read_text().index("## Rack scale") :]
    row = next(line for line in section.splitlines() if "gb300-dynamo-sglang" in line)
    # two trays billed at the TCO tier (3.30 USD/GPU-h), 72 GPUs a rack; weighed against the MI355X node
    assert "**EMULATED**" in row and "| 8 | 3.3 | 237.6 | 26.4 |" in row and "mi355x-single" in row
    assert multinode_run.alive_after == []  # trays and router all gone
