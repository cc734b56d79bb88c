"""The installed single-node vs disaggregated vs NVL72-shaped plan, end to end without Airflow
(`bakeoff run`), shrunk to a few requests: every cluster provisions all its nodes, serves through its
router, is benchmarked and costed with every node billed, and leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


def _alive(marker: str) -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "bakeoff.serving.emulator" in cmd and marker in cmd:
            out.append(cmd)
    return out


def test_local_multinode_plan_runs_and_costs_every_node(tmp_path):
    raw = yaml.safe_load((ROOT / "include" / "plans" / "local-multinode.yaml").read_text())
    raw["name"] = "e2e-multinode"
    raw["targets"] = [t for t in raw["targets"] if t.get("cluster")]  # the two clusters; single-node is the demo's
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
    (rdir,) = (data / "results" / "e2e-multinode").glob("run_id=*")
    for slug, roles in (("b200-disagg", ["prefill", "decode"]), ("gb200-nvl72", ["prefill", "decode"])):
        doc = json.loads((rdir / f"target={slug}" / "cluster.json").read_text())
        assert [n["role"] for n in doc["nodes"]] == roles and all(n["ready_s"] is not None for n in doc["nodes"])
        assert [p["role"] for p in doc["nodes_provenance"]] == roles
        ids = {n["instance"]["id"] for n in doc["nodes"]}
        terminated = json.loads((rdir / f"target={slug}" / "steps" / "terminate.json").read_text())
        assert ids <= set(terminated["facts"]["instances"])  # the target's teardown knew every node
    targets = pd.read_parquet(rdir / "cost_targets.parquet").set_index("target")
    assert targets.loc["b200-disagg", "gpus_used"] == 16 and targets.loc["gb200-nvl72", "gpus_used"] == 8
    assert "EMULATED" in res.stdout
    assert _alive(str(tmp_path)) == []  # nodes and routers all gone
