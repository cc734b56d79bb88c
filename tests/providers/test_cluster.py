"""All-or-nothing cluster provisioning over the providers' own create/terminate: the local emulator
and the sandbox's EC2 (moto), with a node's create failing and with the deadline passing."""

from __future__ import annotations

import time
import uuid

import pytest
from cloud_helpers import launch_args, new_run_id

from bakeoff import secrets
from bakeoff.cleanup import reaper, teardown
from bakeoff.clusters import cluster
from bakeoff.plan import Target
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.base import TAG_INSTALLATION, TAG_PLAN
from bakeoff.providers.local import LocalProvider


def local_target(fault: str | None = None, nodes: int = 2) -> Target:
    return Target(
        name="b200 disagg",
        provider="local",
        instance_type="BM.GPU.B200.8",
        model="llama-3.1-8b",
        quantization="fp8",
        cluster={"nodes": nodes, "prefill": {"tp": 8}, "decode": {"tp": 8}},
        provider_options={"inject_fault": fault} if fault else {},
    )


@pytest.fixture
def local(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_LOCAL_STATE", str(tmp_path / "local"))
    return LocalProvider(grace_s=1.0)


def test_every_node_up_then_the_targets_teardown_finds_them_all(local):
    t, rid = local_target(), f"r-{uuid.uuid4().hex[:8]}"
    tags = {TAG_PLAN: "p", TAG_INSTALLATION: secrets.installation_id()}
    res = cluster.provision(local, t, rid, tags=tags, spec={"expires_at": time.time() + 600}, deadline_s=60)
    assert [n.role for n in res.nodes] == ["prefill", "decode"]
    assert all(n.ready_s is not None and n.instance.state == "running" for n in res.nodes)
    live = local.list_tagged(rid)
    assert sorted(i.target for i in live) == ["b200-disagg--n0", "b200-disagg--n1"]
    assert {i.tags[cluster.TAG_CLUSTER] for i in live} == {t.slug}
    # the reaper judges each node by the run's tags: an ended run reaps every node of the cluster
    own = secrets.installation_id()
    assert all(reaper.verdict(i, time.time(), lambda plan, run: "failed", own) for i in live)
    assert not any(reaper.verdict(i, time.time(), lambda plan, run: "running", own) for i in live)
    # the target's own teardown (by its slug) finds every node, and no other target's
    errors: dict[str, str] = {}
    assert teardown.terminate_tagged(local, rid, errors, slug="b200")[0] == []
    found, done, _ = teardown.terminate_tagged(local, rid, errors, slug=t.slug)
    assert sorted(found) == sorted(done) == sorted(n.instance_id for n in res.nodes) and not errors
    assert local.list_tagged(rid) == []


def test_one_node_failing_to_create_releases_every_node(local):
    t, rid = local_target("node_create"), f"r-{uuid.uuid4().hex[:8]}"
    with pytest.raises(cluster.ClusterFailed) as e:
        cluster.provision(local, t, rid, tags={}, spec={}, deadline_s=60)
    assert "node 1 (decode) could not be created" in str(e.value)
    nodes = e.value.result.nodes
    assert [n.instance_id is not None for n in nodes] == [True, False]
    assert e.value.result.released == [nodes[0].instance_id] and nodes[0].released_s is not None
    assert local.list_tagged(rid) == []


def test_the_deadline_releases_a_cluster_still_booting(local):
    t, rid = local_target(), f"r-{uuid.uuid4().hex[:8]}"
    with pytest.raises(cluster.ClusterFailed) as e:
        cluster.provision(local, t, rid, tags={}, spec={}, deadline_s=0.2)
    assert "cluster deadline" in str(e.value) and "(prefill)" in str(e.value)
    assert all(n.released_s is not None for n in e.value.result.nodes)
    assert local.list_tagged(rid) == []


def aws_cluster(fault: str | None = None, regions: tuple[str, ...] = ("us-east-1",)) -> Target:
    return Target(
        name="b200 disagg",
        provider="aws",
        instance_type="p6-b200.48xlarge",
        model="llama-3.1-8b",
        quantization="fp8",
        cluster={"nodes": 3, "prefill": {"tp": 8}, "decode": {"workers": 2, "tp": 8}},
        provider_options={"regions": list(regions), "ingress_cidr": "127.0.0.1/32"}
        | ({"inject_fault": fault} if fault else {}),
    )


def test_sandbox_ec2_cluster_all_or_nothing(aws_creds):
    p, rid = AwsProvider(aws_creds), new_run_id()
    t = aws_cluster()
    args = launch_args(rid, t)
    res = cluster.provision(p, t, rid, tags=args["tags"], spec=args["spec"], deadline_s=30)
    live = p.list_tagged(rid)
    assert sorted(i.target for i in live) == [f"{t.slug}--n{i}" for i in range(3)]
    assert all(i.expires_at == live[0].expires_at for i in live)  # one kill-switch time for the unit
    errors: dict[str, str] = {}
    cluster.release(p, rid, res, errors)
    assert not errors and p.list_tagged(rid) == []
    rid = new_run_id()
    with pytest.raises(cluster.ClusterFailed, match=r"node 2 \(decode\) could not be created"):
        cluster.provision(p, aws_cluster("node_create"), rid, **launch_args(rid, t), deadline_s=30)
    assert p.list_tagged(rid) == []


def test_a_node_refused_for_capacity_moves_the_whole_cluster_to_the_next_region(aws_creds, moto_server):
    """us-east-1 has hosts for two of the three nodes: both are released before us-west-2 gets all three."""
    moto_server.gate.stock = {"us-east-1": 2}
    p, rid = AwsProvider(aws_creds), new_run_id()
    t = aws_cluster(regions=("us-east-1", "us-west-2"))
    assert [w for w, _ in cluster.sites(t)] == ["us-east-1", "us-west-2"]
    res = cluster.provision(p, t, rid, **launch_args(rid, t), deadline_s=30)
    try:
        first, second = res.sites
        assert first["where"] == "us-east-1" and first["outcome"] == "refused"
        assert "InsufficientInstanceCapacity" in first["error"] and len(first["released"]) == 2
        assert second == {"where": "us-west-2", "outcome": "running", "error": "", "released": []}
        live = p.list_tagged(rid)
        assert {i.region for i in live} == {"us-west-2"} and len(live) == 3  # nothing left in us-east-1
        assert not set(first["released"]) & {i.id for i in live}
        assert all(p.describe(i).state == "terminated" for i in first["released"])
    finally:
        cluster.release(p, rid, res, {})
    assert p.list_tagged(rid) == []


def test_a_cluster_refused_at_every_site_fails_with_nothing_left(aws_creds, moto_server):
    moto_server.gate.stock = {"us-east-1": 1, "us-west-2": 2}
    p, rid = AwsProvider(aws_creds), new_run_id()
    t = aws_cluster(regions=("us-east-1", "us-west-2"))
    with pytest.raises(cluster.ClusterFailed, match="InsufficientInstanceCapacity") as e:
        cluster.provision(p, t, rid, **launch_args(rid, t), deadline_s=30)
    assert e.value.refused and [s["outcome"] for s in e.value.result.sites] == ["refused", "refused"]
    assert p.list_tagged(rid) == []
