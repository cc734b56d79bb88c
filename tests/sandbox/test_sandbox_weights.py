"""Model weights through a sandbox cloud: the node's (emulated) weights step reports download and
engine start on its console, deploy records download and load time; a node whose weights step finds
a shard missing (fault ``weights_incomplete``) fails the serving check at once, classified as such."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from bakeoff.plan import load_plan
from bakeoff.run import pipeline, provisioning, teardown_steps, worker_time
from bakeoff_sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


@pytest.mark.parametrize("fault", [None, "weights_incomplete"])
def test_weights_are_timed_or_their_failure_classified(sandbox, data_root, tmp_path, fault):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t["provider_options"].update(deploy_timeout_s=600, inject_fault=fault)
    name = f"sandbox-weights-{fault or 'ok'}".replace("_", "-")
    raw.update(name=name, targets=[t])
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    slug = t["name"]
    with sandbox.exported():
        run = pipeline.start_run(str(path), f"manual__{name}")
        rdir = run["run_dir"]
        inst = worker_time.until_done(
            provisioning.node_ready, rdir, slug, provisioning.provision(rdir, slug), poll_s=0.1
        )
        pipeline.deploy(rdir, slug, inst)
        t0 = time.monotonic()
        try:
            if fault:
                with pytest.raises(Exception) as e:
                    worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.2)
                assert getattr(e.value, "failure", None) == "weights_incomplete"
                assert time.monotonic() - t0 < 60  # certain at once: no wait for the deploy deadline
            else:
                worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.2)
        finally:
            teardown_steps.terminate(rdir, slug, inst)
    doc = json.loads(next(data_root.rglob(f"run_id=manual__{name}.*/target={slug}/deploy.json")).read_text())
    w = doc["weights"]
    assert w["source"] == "hub (EMULATED)" and w["bytes"] > 0 and w["download_s"] > 0
    if fault:
        assert doc["failure"] == "weights_incomplete" and "lacks" in doc["detail"]
        assert w["ok"] is False and w["missing"] and w["load_s"] is None
    else:
        assert doc["ready"] is True and w["ok"] is True and w["load_s"] is not None and w["load_s"] >= 0
