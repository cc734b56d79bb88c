"""A cluster target on the sandbox's EC2 through the pipeline's provision step: every node created
by the AWS provider's own code boots the emulator from its user-data, shows it does, and the emulated
router fronts them over their pinned certificate; teardown knows every node. Without the sandbox's
``emulated_nodes`` fact the same target is refused before anything is created."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from bakeoff import pipeline, secrets
from bakeoff.plan import load_plan
from bakeoff.providers.base import ProviderError
from bakeoff.providers.credentials import credentials_from_env
from bakeoff_sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


def _cluster_plan(tmp_path: Path) -> tuple[str, str]:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t["cluster"] = {"nodes": 2, "prefill": {"tp": 8}, "decode": {"tp": 8}, "deadline_s": 60}
    t["provider_options"]["client_mode"] = "remote"  # the router is on the worker
    raw.update(name="sandbox-cluster", targets=[t])
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path), t["name"]


def test_a_sandbox_ec2_cluster_provisions_through_the_pipeline_and_leaves_nothing(sandbox, data_root, tmp_path):
    path, _ = _cluster_plan(tmp_path)
    with sandbox.exported():
        run = pipeline.start_run(path, "manual__sandbox_cluster")
        rdir, slug = run["run_dir"], run["targets"][0]
        front = pipeline.provision(rdir, slug)
        try:
            nodes = front["details"]["cluster"]
            assert len(nodes) == 2 and sorted(sandbox.live()["aws"]) == sorted(nodes)
            tdir = next(Path(data_root).rglob(f"run_id=manual__sandbox_cluster*/target={slug}"))
            doc = json.loads((tdir / "cluster.json").read_text())
            assert [n["role"] for n in doc["nodes"]] == ["prefill", "decode"]
            assert [p["instance_id"] for p in doc["nodes_provenance"]] == nodes
            assert all(p["emulated"] for p in doc["nodes_provenance"])  # each node's /version said so
            assert doc["router"]["prefill"][0].startswith("https://") and doc["router"]["tls_cert"]
            # the router reaches both nodes over their pinned certificate
            key = secrets.api_key("manual__sandbox_cluster", slug)
            base = f"http://{front['host']}:{front['port']}"
            auth = {"Authorization": f"Bearer {key}"}
            assert httpx.get(f"{base}/health", timeout=10).status_code == 200
            model = httpx.get(f"{base}/v1/models", headers=auth, timeout=10).json()["data"][0]["id"]
            body = {"model": model, "prompt": "hello", "max_tokens": 4}
            r = httpx.post(f"{base}/v1/completions", json=body, headers=auth, timeout=30)
            assert r.status_code == 200, r.text
        finally:
            done = pipeline.terminate(rdir, slug, front)
        assert sorted(done["terminated"]) == sorted(front["details"]["cluster"])
        assert sandbox.live()["aws"] == [] and pipeline.sweep(rdir) == {"aws": []}


def test_a_cloud_without_emulated_nodes_is_refused_before_any_create(sandbox, data_root, tmp_path):
    path, name = _cluster_plan(tmp_path)

    def real_cloud(provider: str) -> dict:  # the same EC2, as a real account would name it
        creds = dict(credentials_from_env(provider))
        creds.pop("emulated_nodes", None)
        return creds

    with sandbox.exported():
        run = pipeline.start_run(path, "manual__cloud_cluster")
        with pytest.raises(ProviderError, match=rf"targets\.{name}\.cluster: .*emulator-backed"):
            pipeline.provision(run["run_dir"], run["targets"][0], credentials=real_cloud)
        assert sandbox.live()["aws"] == []
