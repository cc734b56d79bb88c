"""The Provisioning section in the PDF brief and the provisioning CSV, from the records as the
pipeline writes them (a first offer refused, the second launched)."""

from __future__ import annotations

import io

import pandas as pd
from brief_spy import BriefSpy

from bakeoff import store
from bakeoff.core import facts
from bakeoff.plan import load_plan
from bakeoff.report import csvsafe, pdf, provisioning
from bakeoff.report.data import ReportData

PLAN = "mi355x-vs-b200-sandbox"


def _rows(rdir, plan, tried: list[str]) -> list[provisioning.ProvisioningRow]:
    slug = next(t.slug for t in plan.targets if t.provider == "aws")
    doc = {"attempts": len(tried), "refusals": {"capacity": len(tried) - 1}, "region": "us-west-2", "tried": tried}
    prov = facts.Provision(instance_id="i-1", launched_at=1000.0, requested_at=990.0, provisioning=doc)
    store.record(rdir, prov.STEP, prov.to_json(), slug=slug)
    store.record(rdir, "node_ready", facts.NodeReady(instance_id="i-1", running_at=1050.0).to_json(), slug=slug)
    return [r for r in provisioning.rows(plan, store.run_facts(rdir), now=2000.0) if r.provider == "aws"]


def test_the_brief_has_a_provisioning_table_with_each_attempt(data_root):
    plan = load_plan(PLAN)
    tried = ["p6-b200.48xlarge in us-east-1", "p6-b200.48xlarge in us-west-2"]
    d = ReportData.__new__(ReportData)
    d.plan, d.provisioning = plan, _rows(store.run_dir(plan.name, "r1"), plan, tried)
    brief = BriefSpy(d)
    pdf._provisioning(brief, d)
    assert brief.seen[0] == "Provisioning"
    head, rows = brief.seen[1]
    assert head[:4] == ["target", "instance type", "outcome", "offers tried"]
    assert rows == [["b200-vllm", "p6-b200.48xlarge", "running in us-west-2", "; ".join(tried), "1 capacity", "60 / –"]]
    d.provisioning, brief.seen = [], []
    pdf._provisioning(brief, d)
    assert brief.seen == []  # no cloud target: no section


def test_the_provisioning_csv_has_each_attempt_and_runs_no_formula(data_root):
    plan = load_plan(PLAN)
    planted = '=HYPERLINK("http://x") in us-east-1'  # the record is input: a cell a sheet would run
    rows = _rows(store.run_dir(plan.name, "r2"), plan, [planted, "p6-b200.48xlarge in us-west-2"])
    back = pd.read_csv(io.StringIO(csvsafe.to_csv(pd.DataFrame(provisioning.table(rows)))))
    assert list(back["target"]) == ["b200-vllm"] and list(back["outcome"]) == ["running in us-west-2"]
    assert back["offers_tried"][0].startswith("'=HYPERLINK") and back["attempts"][0] == 2
    assert back["to_running_s"][0] == 60.0 and back["refusals"][0] == "1 capacity"
