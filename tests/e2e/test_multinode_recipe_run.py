"""An InferenceX multi-node recipe as a target, end to end without Airflow (`bakeoff run`), shrunk to a few
requests: the GB300 Dynamo + SGLang recipe's arm renders into two emulated NVL72 trays (prefill, decode),
which provision all or nothing, serve through the router, are costed with both trays billed, and show in
the report's Rack scale section beside the 8-GPU MI355X node; cluster.json records the recipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tests.e2e.test_multinode_run import _alive

pytestmark = pytest.mark.e2e


def test_a_gb300_dynamo_recipe_target_runs_and_shows_at_rack_scale(tmp_path):
    raw = yaml.safe_load((ROOT / "include" / "plans" / "local-multinode-recipes.yaml").read_text())
    raw["name"] = "e2e-multinode-recipe"
    raw["targets"] = [t for t in raw["targets"] if t["name"] in ("mi355x-single", "gb300-dynamo-sglang")]
    raw["workloads"][0].update(requests_per_point=8, warmup_requests=2)
    raw["quality"]["accuracy"] = {"enabled": False}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw))
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAKEOFF")}
    env |= {
        "BAKEOFF_DATA": str(data),
        "BAKEOFF_LOCAL_STATE": str(tmp_path / "local"),
        "PYTHONPATH": str(ROOT / "include"),
    }
    res = subprocess.run(
        [sys.executable, "-m", "bakeoff", "run", "--plan", str(plan)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (rdir,) = (data / "results" / "e2e-multinode-recipe").glob("run_id=*")
    doc = json.loads((rdir / "target=gb300-dynamo-sglang" / "cluster.json").read_text())
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
    (md,) = (data / "reports").rglob("*.md")
    section = md.read_text()[md.read_text().index("## Rack scale") :]
    row = next(line for line in section.splitlines() if "gb300-dynamo-sglang" in line)
    # two trays billed at the TCO tier (3.30 USD/GPU-h), 72 GPUs a rack; weighed against the MI355X node
    assert "**EMULATED**" in row and "| 8 | 3.3 | 237.6 | 26.4 |" in row and "mi355x-single" in row
    assert _alive(str(tmp_path)) == []  # trays and router all gone
