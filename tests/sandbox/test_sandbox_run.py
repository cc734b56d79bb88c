"""The mi355x-vs-b200 sandbox plan end to end through the cloud providers' own code (moto server for
EC2, the fake Vultr API), each node an emulator booted from its user-data; then nothing is left,
and the per-run API key is nowhere in logs, step results (XComs) or files."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd
import pytest

from bakeoff import secrets, store
from bakeoff.run import pipeline, provisioning, step_context, teardown_steps, worker_time
from bakeoff.serving.agent_client import AgentClient
from bakeoff_sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


@pytest.mark.parametrize(
    "plan,providers", [("mi355x-vs-b200-sandbox", ["aws", "vultr"]), ("mi355x-vs-b200-oci-sandbox", ["oci"])]
)
def test_sandbox_plan_runs_and_leaves_nothing(sandbox, data_root, caplog, plan, providers):
    caplog.set_level(logging.INFO)
    logging.getLogger("bakeoff").setLevel(logging.DEBUG)
    with sandbox.exported():
        run_id = "manual__2026-11-29T21:30:00+00:00"
        run = pipeline.start_run(plan, run_id)
        results = [run]
        rdir = run["run_dir"]
        for slug in run["targets"]:
            launched = provisioning.provision(rdir, slug)  # returns once created: the node boots meanwhile
            inst = worker_time.until_done(provisioning.node_ready, rdir, slug, launched, poll_s=0.1)
            assert inst["provider"] in providers and inst["state"] == "running" and inst["id"] == launched["id"]
            cert = inst["tls_cert"]  # the node's own certificate: every client pins it
            assert inst["agent_url"].startswith("https://")
            with AgentClient(inst["agent_url"], secrets.api_key(run_id, slug), tls_cert=cert) as agent:
                health = agent.wait_healthy(30, poll_s=0.2)
            assert health["code"].startswith(str(sandbox.workdir))  # the agent runs the copy the node fetched
            assert pipeline.deploy(rdir, slug, inst) == {"target": slug, "secrets": []}
            ep = worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.1)
            assert ep["emulated"] is True  # the emulator says so in /version
            assert ep["base_url"].startswith("https://") and ep["tls_cert"] == cert
            gate = pipeline.accuracy_gate(rdir, slug, ep)
            started = pipeline.benchmark(rdir, slug, ep)  # submitted to the node's agent: returns at once
            assert started["client_mode"] == "co-located" and "points" not in started
            measured = worker_time.until_done(pipeline.benchmark_done, rdir, slug, ep, started, poll_s=0.2)
            results += [inst, ep, gate, started, measured, teardown_steps.terminate(rdir, slug, inst)]
            assert measured["points"] == 2
        assert sandbox.live() == {"aws": [], "vultr": [], "digitalocean": [], "oci": []}
        assert teardown_steps.sweep(run["run_dir"]) == {p: [] for p in providers}
        assert sandbox.backing.running() == []
    keys = [secrets.api_key(run_id, slug) for slug in run["targets"]]
    xcoms = json.dumps(results)
    rdir = Path(run["run_dir"])
    files = "".join(
        p.read_text(errors="replace") for p in data_root.rglob("*") if p.is_file() and p.suffix != ".parquet"
    )
    for key in keys:
        assert key not in xcoms and key not in caplog.text and key not in files
    oci_key = sandbox.credentials("oci")["key_content"].strip().splitlines()[1]  # a line of the signing key
    assert oci_key not in caplog.text and oci_key not in files
    deploy_doc = json.loads((rdir / "target=b200-vllm" / "deploy.json").read_text())
    assert deploy_doc["ready"] is True and deploy_doc["image"] == "vllm/vllm-openai:v0.25.0"
    # the client ran on each node (co-located, the clouds' default), from the bundle the node fetched
    run_doc = store.run_facts(run["run_dir"])
    for slug in run["targets"]:
        assert run_doc.target(slug).benchmark.client_mode == "co-located"
        tdir = rdir / f"target={slug}"
        client = json.loads((tdir / "client.json").read_text())
        assert client["bundle"] == run_doc.target(slug).provision.client_bundle
        assert len(client["bundle"]) == 64 and (tdir / "client_calibration.json").exists()
        points = pd.read_parquet(tdir / "points")
        # power sampled on the node while each point ran (the emulator's sampler: EMULATED)
        assert (points["power_w_per_gpu"] > 0).all() and (points["joules_per_output_token"] > 0).all()
        assert points["emulated"].all()
    # the report's provisioning section: each node's time to running and to serving, from the step records
    from bakeoff.report.provisioning import rows

    prov = rows(step_context.run_plan(run["run_dir"]), store.run_facts(run["run_dir"]), time.time())
    assert {r.slug for r in prov} == set(run["targets"])
    for r in prov:
        assert r.outcome.startswith("running") and r.billed_hours and not r.still_billing
        assert r.to_running_s is not None and r.to_serving_s is not None and 0 < r.to_running_s <= r.to_serving_s
    # every step recorded the worker time it held
    held = worker_time.held_seconds(run["run_dir"])
    assert set(held) == set(run["targets"]) and all(s > 0 for s in held.values())


def test_sandbox_env_points_other_processes_at_it(sandbox, monkeypatch):
    from bakeoff_sandbox import credentials_from_env

    for k, v in sandbox.env().items():
        monkeypatch.setenv(k, v)
    assert credentials_from_env("vultr")["base_url"].endswith("/vultr/v2")
    assert credentials_from_env("aws")["endpoint_url"] == sandbox.moto.url
    assert json.loads(sandbox.env()["AIRFLOW_CONN_AWS_DEFAULT"])["extra"]["endpoint_url"] == sandbox.moto.url


@pytest.mark.parametrize("provider,slug", [("aws", "b200-vllm"), ("vultr", "mi355x-vllm")])
def test_a_server_that_cannot_start_is_classified_from_the_nodes_logs(
    sandbox, data_root, tmp_path, provider, slug, monkeypatch
):
    """405B in BF16 on one GPU cannot load: the node's logs say why -- from the node agent on every cloud
    (Vultr has no console API), the EC2 console as a fallback -- and the serving check fails as soon as
    they do, long before the deploy deadline. The plan's own memory check (plan.fits) would refuse this
    before spend, so it is switched off here in the worker alone: the node stands for one whose memory is
    less than the catalog says, which only its logs can tell."""
    import yaml

    from bakeoff.plan import fits, load_plan

    monkeypatch.setattr(fits, "memory", lambda *a, **k: None)

    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == provider)
    t.update(model="llama-3.1-405b", quantization="bf16", tensor_parallel=1)
    t["provider_options"]["deploy_timeout_s"] = 600
    # 800 GB of weights to download: the budgeted hours pass the sandbox plan's 2 h instance limit
    raw.update(name=f"sandbox-oom-{provider}", targets=[t], max_instance_hours=4)
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(raw))
    with sandbox.exported():
        run = pipeline.start_run(str(path), f"manual__oom_{provider}")
        rdir = run["run_dir"]
        inst = worker_time.until_done(
            provisioning.node_ready, rdir, slug, provisioning.provision(rdir, slug), poll_s=0.1
        )
        pipeline.deploy(rdir, slug, inst)
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.2)
        assert time.monotonic() - t0 < 120
        assert getattr(e.value, "failure", None) == "oom"
        found = data_root.rglob(f"run_id=manual__oom_{provider}.*/target={slug}/deploy.json")
        doc = json.loads(next(found).read_text())
        assert doc == {**doc, "ready": False, "failure": "oom"} and "GB of weights" in doc["detail"]
        teardown_steps.terminate(run["run_dir"], slug, inst)
        assert sandbox.live()[provider] == []
