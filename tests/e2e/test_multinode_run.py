"""The installed single-node vs disaggregated vs NVL72-shaped plan's clusters, end to end without Airflow
(`bakeoff run`, the shared multinode_run), shrunk to a few requests: every cluster provisions all its nodes,
serves through its router, is benchmarked and costed with every node billed, and leaves no process behind."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytestmark = pytest.mark.e2e


def test_local_multinode_plan_runs_and_costs_every_node(multinode_run):
    rdir = multinode_run.rdir
    for slug, roles in (("b200-disagg", ["prefill", "decode"]), ("gb200-nvl72", ["prefill", "decode"])):
        doc = json.loads((rdir / f"target={slug}" / "cluster.json").read_text())
        assert [n["role"] for n in doc["nodes"]] == roles and all(n["ready_s"] is not None for n in doc["nodes"])
        assert [p["role"] for p in doc["nodes_provenance"]] == roles
        ids = {n["instance"]["id"] for n in doc["nodes"]}
        terminated = json.loads((rdir / f"target={slug}" / "steps" / "terminate.json").read_text())
        assert ids <= set(terminated["facts"]["instances"])  # the target's teardown knew every node
    targets = pd.read_parquet(rdir / "cost_targets.parquet").set_index("target")
    assert targets.loc["b200-disagg", "gpus_used"] == 16 and targets.loc["gb200-nvl72", "gpus_used"] == 8
    assert "EMULATED" in multinode_run.res.stdout
    assert multinode_run.alive_after == []  # nodes and routers all gone
