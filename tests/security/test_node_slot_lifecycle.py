"""Node slots follow the node, not the step (issue 36, L6): a provision that fails after its create
keeps its target's slot while the node lives (terminate or the sweep release it once the node is
gone), and a planned failure is refused on a cloud whose nodes are real and billed."""

from __future__ import annotations

import pytest
import yaml

from bakeoff import faults, store
from bakeoff.clusters.node_slots import _state
from bakeoff.plan import load_plan
from bakeoff.run import pipeline, provisioning, teardown_steps


def _plan(tmp_path, name: str, raw: dict) -> str:
    raw["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_a_provision_failing_after_its_create_keeps_its_slot_until_the_node_is_gone(data_root, tmp_path):
    raw = load_plan("local-demo").model_dump(mode="json")
    raw["targets"] = [raw["targets"][0]]
    raw["targets"][0].setdefault("provider_options", {})["inject_fault"] = "after_create"
    slug = raw["targets"][0]["name"]
    run = pipeline.start_run(_plan(tmp_path, "orphan-slot", raw), "manual__orphan")
    rdir = run["run_dir"]
    assert provisioning.node_slot(rdir, slug) is True
    with pytest.raises(faults.InjectedFault):
        provisioning.provision(rdir, slug)
    assert provisioning.release_node_slot(rdir, slug) is False  # the failed provision's node still lives
    assert _state(rdir, slug).get("released_at") is None
    teardown_steps.terminate(
        rdir, slug, store.read_json(store.target_dir("orphan-slot", "manual__orphan", slug) / "instance.json")
    )
    assert _state(rdir, slug).get("released_at")  # gone: released by terminate


def test_a_planned_failure_is_refused_on_a_real_cloud_before_any_create(data_root, tmp_path, monkeypatch):
    raw = load_plan("mi355x-vs-b200").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "aws"]
    raw["targets"][0]["secrets"] = {}
    raw["targets"][0]["provider_options"]["inject_fault"] = "after_create"
    run = pipeline.start_run(_plan(tmp_path, "real-fault", raw), "manual__real")
    creates = []
    monkeypatch.setattr("bakeoff.providers.base.CloudProvider.create", lambda *a, **k: creates.append(a))
    creds = {"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "x" * 40, "region_name": "us-east-1"}
    with pytest.raises(faults.InjectedFault, match=r"inject_fault: 'after_create' is for rehearsals"):
        provisioning.provision(run["run_dir"], raw["targets"][0]["name"], credentials=lambda _: creds)
    assert creates == []
