"""The trigger form's predicted spend: precomputed per shipped plan, shown only for the file it was
built from, and equal to what the budget guard estimates now."""

from __future__ import annotations

import json
import shutil

import pytest

from bakeoff.plan import load_plan
from bakeoff.prediction import spend_index
from bakeoff.spend import budget


def test_the_shipped_index_matches_the_budget_guards_estimate_for_every_plan_it_was_built_from():
    doc = json.loads(spend_index.INDEX.read_text())
    current = {
        name: e
        for name, e in doc["plans"].items()
        if (spend_index.SHIPPED / f"{name}.yaml").is_file()
        and e["sha256"] == spend_index.digest(spend_index.SHIPPED / f"{name}.yaml")
    }
    # the demo, the claim check and the capacity plan at least: a plan edited since shows no figure (and is
    # rebuilt by the command)
    assert {"local-demo", "glm52-claim-check", "local-capacity"} <= set(current), f"stale: run {spend_index.COMMAND}"
    for name, e in current.items():
        est = budget.estimate(load_plan(str(spend_index.SHIPPED / f"{name}.yaml")))
        msg = f"{name}: the index is stale (the budget model or the twin changed); run {spend_index.COMMAND}"
        assert e["predicted_usd"] == pytest.approx(est["estimate_low_usd"], rel=0.01, abs=0.5), msg
        assert e["with_margin_usd"] == pytest.approx(est["estimate_usd"], rel=0.01, abs=0.5), msg
        assert e["cap_usd"] == est["cap_usd"]


def test_a_label_is_shown_only_for_the_plan_file_the_index_was_built_from(tmp_path):
    folder = tmp_path / "plans"
    folder.mkdir()
    for name in ("local-demo", "glm52-claim-check"):
        shutil.copy(spend_index.SHIPPED / f"{name}.yaml", folder / f"{name}.yaml")
    edited = folder / "glm52-claim-check.yaml"
    edited.write_text(edited.read_text().replace("budget_usd: 1000", "budget_usd: 900"))
    (folder / "unknown.yaml").write_text("name: unknown\n")
    labels = spend_index.labels(folder)
    e = json.loads(spend_index.INDEX.read_text())["plans"]["local-demo"]
    assert labels == {"local-demo": spend_index.label("local-demo", e)}  # the edited and the unknown plan: none
    assert labels["local-demo"].startswith("local-demo (predicted spend 0 USD: nothing billed")  # emulated
    assert f"at list prices {e['predicted_usd']:,.0f} USD" in labels["local-demo"]
    paid = json.loads(spend_index.INDEX.read_text())["plans"]["glm52-claim-check"]
    assert paid["bills"] and f"predicted spend {paid['predicted_usd']:,.0f} USD" in spend_index.label("x", paid)
    for bad in ("not json", '{"plans": []}', '{"plans": {"local-demo": {"sha256": 1}}}'):
        index = tmp_path / "index.json"
        index.write_text(bad)
        assert spend_index.labels(folder, index) == {}
    index.write_text(json.dumps({"plans": {"local-demo": {"sha256": spend_index.digest(folder / "local-demo.yaml")}}}))
    assert spend_index.labels(folder, index) == {}  # an entry without figures is skipped, never a crash
