"""A cluster target on the sandbox's EC2 through every step of the pipeline: provision, readiness,
deploy, readiness of every role, the accuracy gate, a benchmark, teardown, cost and report. A role that
stops serving fails readiness naming it. Without the sandbox's ``emulated_nodes`` fact the same target
is refused before anything is created."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from bakeoff import secrets
from bakeoff.plan import load_plan
from bakeoff.providers.base import ProviderError
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.run import pipeline, provisioning, teardown_steps, worker_time
from bakeoff.serving.deploy import DeployFailed
from bakeoff.serving.tls import node_identity
from bakeoff_sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


def _cluster_plan(tmp_path: Path, deploy_timeout_s: float = 60) -> tuple[str, str]:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t["cluster"] = {"nodes": 2, "prefill": {"tp": 8}, "decode": {"tp": 8}, "deadline_s": 60}
    t["provider_options"].update(client_mode="remote", deploy_timeout_s=deploy_timeout_s)  # the router is here
    raw.update(name="sandbox-cluster", targets=[t])
    # one load point of a few requests: the path, not the figures
    raw["workloads"][0].update(concurrency=[2], requests_per_point=6, warmup_requests=1)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path), t["name"]


def test_a_cloud_without_emulated_nodes_is_refused_before_any_create(sandbox, data_root, tmp_path):
    path, name = _cluster_plan(tmp_path)

    def real_cloud(provider: str) -> dict:  # the same EC2, as a real account would name it
        creds = dict(credentials_from_env(provider))
        creds.pop("emulated_nodes", None)
        return creds

    with sandbox.exported():
        run = pipeline.start_run(path, "manual__cloud_cluster")
        with pytest.raises(ProviderError, match=rf"targets\.{name}\.cluster: .*emulator-backed"):
            provisioning.provision(run["run_dir"], run["targets"][0], credentials=real_cloud)
        assert sandbox.live()["aws"] == []


def _served_model(base: str, auth: dict[str, str]) -> str:
    return str(httpx.get(f"{base}/v1/models", headers=auth, timeout=10).json()["data"][0]["id"])


def test_a_sandbox_ec2_cluster_is_deployed_benchmarked_costed_and_released(sandbox, data_root, tmp_path):
    """The whole path on the sandbox EC2: provision (every node created by the AWS provider's own code boots
    the emulator and shows it does; the router fronts them over their pinned certificate), node readiness,
    deploy, serving readiness of every role, the accuracy gate and a short benchmark through the router,
    teardown and sweep (nothing left, nothing billed after); then cost and report for the run."""
    path, _ = _cluster_plan(tmp_path)
    run_id = "manual__sandbox_cluster_whole"
    with sandbox.exported():
        run = pipeline.start_run(path, run_id)
        rdir, slug = run["run_dir"], run["targets"][0]
        key = secrets.api_key(run_id, slug)
        began = sandbox.clock.now()
        launched = provisioning.provision(rdir, slug)
        try:
            nodes = launched["cluster"]
            assert len(nodes) == 2 and sorted(sandbox.live()["aws"]) == sorted(nodes)
            doc = json.loads(next(Path(rdir).glob(f"target={slug}/cluster.json")).read_text())
            assert [n["role"] for n in doc["nodes"]] == ["prefill", "decode"]
            assert [p["instance_id"] for p in doc["nodes_provenance"]] == nodes
            assert all(p["emulated"] for p in doc["nodes_provenance"])  # each node's /version said so
            assert doc["router"]["prefill"][0].startswith("https://") and doc["router"]["tls_cert"]
            # the router reaches both nodes over their pinned certificate, with the run's key
            base, auth = f"http://{launched['host']}:{launched['port']}", {"Authorization": f"Bearer {key}"}
            assert httpx.get(f"{base}/health", timeout=10).status_code == 200
            body = {"model": _served_model(base, auth), "prompt": "hello", "max_tokens": 4}
            r = httpx.post(f"{base}/v1/completions", json=body, headers=auth, timeout=30)
            assert r.status_code == 200, r.text
            inst = worker_time.until_done(provisioning.node_ready, rdir, slug, launched, poll_s=0.1)
            assert pipeline.deploy(rdir, slug, inst) == {"target": slug, "secrets": []}
            ep = worker_time.until_done(pipeline.serving_ready, rdir, slug, inst, poll_s=0.1)
            assert ep["emulated"] is True
            gate = pipeline.accuracy_gate(rdir, slug, ep)  # the plan's gate, through the router
            started = pipeline.benchmark(rdir, slug, ep)
            measured = worker_time.until_done(pipeline.benchmark_done, rdir, slug, ep, started, poll_s=0.2)
        finally:
            done = teardown_steps.terminate(rdir, slug, launched)
            ended = sandbox.clock.now()
        assert measured["points"] == 1 and measured["client_mode"] == "remote" and gate["n"] > 0
        assert sorted(done["terminated"]) == sorted(nodes)  # the target's teardown knew every node
        assert sandbox.live()["aws"] == [] and teardown_steps.sweep(rdir) == {"aws": []}
        assert sandbox.backing.running() == []
    tdir = Path(rdir) / f"target={slug}"
    deployed = json.loads((tdir / "deploy.json").read_text())
    assert deployed["ready"] is True
    roles = deployed["roles"]  # each role's image, args and node, from the nodes that served
    assert [r["role"] for r in roles] == ["prefill", "decode"]
    assert [r["instance_id"] for r in roles] == launched["cluster"]
    assert all(r["image"] == "vllm/vllm-openai:v0.25.0" and r["emulated"] for r in roles)
    assert [r["engine_args"][r["engine_args"].index("--tensor-parallel-size") + 1] for r in roles] == ["8", "8"]
    assert json.loads((tdir / "endpoint.json").read_text())["provenance"]["roles"] == roles
    points = pd.read_parquet(tdir / "points")
    assert len(points) == 1 and points["emulated"].all() and (points["output_tps_per_gpu"] > 0).all()
    assert list(points["gpus"]) == [16] and list(points["completed"]) == [6]  # both nodes' GPUs count
    # the cloud's meter: both nodes billed while they ran, nothing after teardown (an hour later)
    sandbox.clock.advance(3600)
    assert sandbox.billed_minutes("aws", began, ended) > 0 and sandbox.billed_minutes("aws", ended) == 0
    pipeline.cost(rdir)
    costed = pd.read_parquet(Path(rdir) / "cost_targets.parquet").set_index("target")
    assert costed.loc[slug, "gpus_used"] == 16  # every node's GPUs billed
    paths = pipeline.report(rdir)
    md = Path(paths["markdown"]).read_text()
    rack = md.split("Rack scale", 1)[1]
    row = next(line for line in rack.splitlines() if line.startswith(f"| isl1k-osl1k | {slug}"))
    assert f"{slug} **EMULATED**" in row and "| 2 nodes of 8 GPUs, KV " in row and "| 16 |" in row, row


def test_a_role_that_stops_serving_fails_readiness_naming_it_and_nothing_is_left(sandbox, data_root, tmp_path):
    """The decode node's engine dies after provision: the router alone would say only that a node is down,
    but readiness looks at every role, and its failure names the role, the node and its instance. A
    cluster.json edited to pin another certificate gets no key sent."""
    path, _ = _cluster_plan(tmp_path, deploy_timeout_s=1)
    with sandbox.exported():
        run = pipeline.start_run(path, "manual__sandbox_cluster_role_down")
        rdir, slug = run["run_dir"], run["targets"][0]
        launched = provisioning.provision(rdir, slug)
        try:
            # cluster.json edited to send readiness elsewhere: the nodes' certificate is derived again, not read
            doc_path = next(Path(rdir).glob(f"target={slug}/cluster.json"))
            kept = doc_path.read_text()
            doc = json.loads(kept)
            doc["nodes"][1]["instance"]["tls_cert"] = node_identity("another-run", slug).cert_pem
            doc_path.write_text(json.dumps(doc))
            with pytest.raises(DeployFailed, match=r"decode node 1: cluster.json records a certificate that is not"):
                pipeline.serving_ready(rdir, slug, launched, since=time.time())
            doc_path.write_text(kept)
            decode = launched["cluster"][1]
            assert sandbox.backing.stop_engine("aws", decode)
            with pytest.raises(DeployFailed, match=rf"decode node 1 \({decode}\) did not become ready"):
                worker_time.until_done(pipeline.serving_ready, rdir, slug, launched, poll_s=0.2)
        finally:
            teardown_steps.terminate(rdir, slug, launched)
        assert sandbox.live()["aws"] == []
    doc = json.loads(next(Path(rdir).glob(f"target={slug}/deploy.json")).read_text())
    assert doc["ready"] is False and doc["role"] == "decode" and doc["node"] == 1


def test_a_role_that_cannot_load_fails_provision_at_once_naming_it(sandbox, data_root, tmp_path):
    """405B in BF16 on one GPU cannot load: the prefill node's own logs say so, and provision fails at once
    naming that role and the failure (not at the cluster deadline), with every node released."""
    raw = yaml.safe_load(Path(_cluster_plan(tmp_path)[0]).read_text())
    t = raw["targets"][0]
    t.update(model="llama-3.1-405b", quantization="bf16")
    t["cluster"].update(prefill={"tp": 1}, deadline_s=600)
    raw.update(max_instance_hours=4)  # 800 GB of weights: the budgeted hours pass the sandbox plan's 2 h
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(raw))
    with sandbox.exported():
        run = pipeline.start_run(str(path), "manual__sandbox_cluster_oom")
        t0 = time.monotonic()
        with pytest.raises(ProviderError, match=r"prefill node 0 failed: oom: "):
            provisioning.provision(run["run_dir"], run["targets"][0])
        assert time.monotonic() - t0 < 120  # long before the 600 s deadline
        assert sandbox.live()["aws"] == []
