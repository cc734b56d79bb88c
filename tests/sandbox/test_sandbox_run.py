"""The mi355x-vs-b200 sandbox plan end to end through the cloud providers' own code (moto server for
EC2, the fake Vultr API), each node an emulator booted from its user-data; then nothing is left,
and the per-run API key is nowhere in logs, step results (XComs) or files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest

from bakeoff import pipeline, secrets
from bakeoff.agent.remote import AgentClient
from bakeoff.sandbox import Sandbox


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
    pipeline.set_credentials_resolver(sandbox.credentials)
    try:
        run_id = "manual__2026-11-29T21:30:00+00:00"
        run = pipeline.start_run(plan, run_id)
        results = [run]
        for slug in run["targets"]:
            inst = pipeline.provision(run["run_dir"], slug)
            assert inst["provider"] in providers and inst["state"] == "running"
            cert = inst["details"]["tls_cert"]  # the node's own certificate: every client pins it
            assert inst["details"]["agent_url"].startswith("https://")
            with AgentClient(inst["details"]["agent_url"], secrets.api_key(run_id, slug), tls_cert=cert) as agent:
                health = agent.wait_healthy(30, poll_s=0.2)
            assert health["code"].startswith(str(sandbox.workdir))  # the agent runs the copy the node fetched
            ep = pipeline.deploy(run["run_dir"], slug, inst)
            assert ep["emulated"] is True  # the emulator says so in /version
            assert ep["base_url"].startswith("https://") and ep["tls_cert"] == cert
            results += [
                inst,
                ep,
                pipeline.accuracy_gate(run["run_dir"], slug, ep),
                pipeline.benchmark(run["run_dir"], slug, ep),
                pipeline.terminate(run["run_dir"], slug, inst),
            ]
            assert results[-2]["points"] == 2
        assert sandbox.live() == {"aws": [], "vultr": [], "digitalocean": [], "oci": []}
        assert pipeline.sweep(run["run_dir"]) == {p: [] for p in providers}
        assert sandbox.backing.running() == []
    finally:
        pipeline.set_credentials_resolver(lambda name: {})
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
    run_doc = json.loads((rdir / "run.json").read_text())
    for slug in run["targets"]:
        assert run_doc["targets"][slug]["benchmark"]["client_mode"] == "co-located"
        tdir = rdir / f"target={slug}"
        client = json.loads((tdir / "client.json").read_text())
        assert client["bundle"] == run_doc["targets"][slug]["provision"]["client_bundle"]
        assert len(client["bundle"]) == 64 and (tdir / "client_calibration.json").exists()
        points = pd.read_parquet(tdir / "points")
        # power sampled on the node while each point ran (the emulator's sampler: EMULATED)
        assert (points["power_w_per_gpu"] > 0).all() and (points["joules_per_output_token"] > 0).all()
        assert points["emulated"].all()


def test_sandbox_env_points_other_processes_at_it(sandbox, monkeypatch):
    from bakeoff.sandbox import credentials_from_env

    for k, v in sandbox.env().items():
        monkeypatch.setenv(k, v)
    assert credentials_from_env("vultr")["base_url"].endswith("/vultr/v2")
    assert credentials_from_env("aws")["endpoint_url"] == sandbox.moto.url
    assert json.loads(sandbox.env()["AIRFLOW_CONN_AWS_DEFAULT"])["extra"]["endpoint_url"] == sandbox.moto.url


@pytest.mark.parametrize("provider,slug", [("aws", "b200-vllm"), ("vultr", "mi355x-vllm")])
def test_a_server_that_cannot_start_is_classified_from_the_nodes_logs(sandbox, data_root, tmp_path, provider, slug):
    """405B in BF16 on one GPU cannot load: readiness times out and the node's logs say why -- from the
    node agent on every cloud (Vultr has no console API), the EC2 console as a fallback."""
    import yaml

    from bakeoff.plan import load_plan

    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == provider)
    t.update(model="llama-3.1-405b", quantization="bf16", tensor_parallel=1)
    t["provider_options"]["deploy_timeout_s"] = 4
    raw.update(name=f"sandbox-oom-{provider}", targets=[t])
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(raw))
    pipeline.set_credentials_resolver(sandbox.credentials)
    try:
        run = pipeline.start_run(str(path), f"manual__oom_{provider}")
        inst = pipeline.provision(run["run_dir"], slug)
        with pytest.raises(Exception) as e:
            pipeline.deploy(run["run_dir"], slug, inst)
        assert getattr(e.value, "failure", None) == "oom"
        doc = json.loads(next(data_root.rglob(f"run_id=manual__oom_{provider}/target={slug}/deploy.json")).read_text())
        assert doc == {**doc, "ready": False, "failure": "oom"} and "GB of weights" in doc["detail"]
        pipeline.terminate(run["run_dir"], slug, inst)
        assert sandbox.live()[provider] == []
    finally:
        pipeline.set_credentials_resolver(lambda name: {})
