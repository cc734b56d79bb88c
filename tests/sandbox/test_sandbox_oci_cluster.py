"""A named multi-node recipe on the sandbox's OCI (its fake Core API, every request and answer checked
against the vendored spec): the MI355X SGLang PD recipe's 2-node arm provisions through the OCI
provider, serves through every role, benchmarks a few requests and tears down with nothing left.
Without the sandbox's ``emulated_nodes`` claim (a real account never has it) the same target is
refused before any create, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bakeoff.plan import load_plan
from bakeoff.providers.base import ProviderError
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.run import pipeline, provisioning, teardown_steps, worker_time
from bakeoff_sandbox import Sandbox

RECIPE = "dsr1-fp4-mi355x-sglang-disagg"  # arm 0: one TP8 prefill node, one TP8 decode node, KV over MoRI


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory) -> str:
    raw = load_plan("mi355x-vs-b200-oci-sandbox").model_dump(mode="json", exclude_none=True)
    t = next(x for x in raw["targets"] if x["instance_type"] == "BM.GPU.MI355X.8")
    keep = {k: t[k] for k in ("provider", "provider_options")}
    keep["provider_options"].update(client_mode="remote")  # the router is on this machine
    target = {
        "name": "mi355x-sglang-pd",
        **keep,
        "recipe": RECIPE,
        "recipe_arm": 0,
        "cluster": {"deadline_s": 60},
        "emulator": {"time_scale": 0.05},
    }
    raw.update(name="sandbox-oci-cluster", targets=[target], quality={"accuracy": {"enabled": False}})
    raw["workloads"][0].update(concurrency=[2], requests_per_point=4, warmup_requests=1, output_len=32)
    path = tmp_path_factory.mktemp("oci-cluster") / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_an_oci_account_without_the_claim_is_refused_before_any_create(sandbox, data_root, plan_path):
    def real_account(provider: str) -> dict:  # the same OCI tenancy, as a real account's connection gives it
        creds = dict(credentials_from_env(provider))
        creds.pop("emulated_nodes", None)
        return creds

    with sandbox.exported():
        run = pipeline.start_run(plan_path, "manual__oci_cluster_real")
        before = sandbox.fakes["oci"].requests
        with pytest.raises(ProviderError, match=r"targets\.mi355x-sglang-pd\.cluster: .*emulator-backed"):
            provisioning.provision(run["run_dir"], run["targets"][0], credentials=real_account)
        assert sandbox.live()["oci"] == [] and sandbox.fakes["oci"].requests == before  # not one call to OCI


def test_a_recipe_arm_on_sandbox_oci_serves_every_role_and_leaves_nothing(sandbox, data_root, plan_path):
    with sandbox.exported():
        run = pipeline.start_run(plan_path, "manual__oci_cluster_recipe")
        rdir, slug = run["run_dir"], run["targets"][0]
        began = sandbox.clock.now()
        launched = provisioning.provision(rdir, slug)
        try:
            nodes = launched["cluster"]
            assert len(nodes) == 2 and sorted(sandbox.live()["oci"]) == sorted(nodes)
            inst = worker_time.until_done(provisioning.node_ready, rdir, slug, launched, poll_s=0.1)
            pipeline.deploy(rdir, slug, inst)
            ep = worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.1)
            assert ep["emulated"] is True
            started = pipeline.benchmark(rdir, slug, ep)
            measured = worker_time.until_done(pipeline.benchmark_done, rdir, slug, ep, started, poll_s=0.2)
        finally:
            done = teardown_steps.terminate(rdir, slug, launched)
            ended = sandbox.clock.now()
        assert measured["points"] == 1
        assert sorted(done["terminated"]) == sorted(nodes)
        assert sandbox.live()["oci"] == [] and teardown_steps.sweep(rdir) == {"oci": []}
    tdir = Path(rdir) / f"target={slug}"
    doc = json.loads((tdir / "cluster.json").read_text())
    assert doc["recipe"]["recipe"] == RECIPE and [n["role"] for n in doc["nodes"]] == ["prefill", "decode"]
    roles = json.loads((tdir / "deploy.json").read_text())["roles"]
    assert [r["instance_id"] for r in roles] == nodes
    assert all(r["emulated"] and r["instance_type"] == "BM.GPU.MI355X.8" for r in roles)
    assert all(r["stack"] == "sglang" and r["image"] == doc["recipe"]["image"] for r in roles)  # the recipe's
    points = pd.read_parquet(tdir / "points")
    assert points["emulated"].all() and list(points["gpus"]) == [16] and (points["output_tps"] > 0).all()
    sandbox.clock.advance(3600)  # an hour on: both nodes billed while up, nothing after teardown
    assert sandbox.billed_minutes("oci", began, ended) > 0 and sandbox.billed_minutes("oci", ended) == 0
