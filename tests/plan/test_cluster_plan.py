"""Multi-node targets in a plan: node count or rack shape, roles that fit, clouds that offer it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bakeoff.plan import Target
from bakeoff.plan.cluster import layout_for, offers, racks

GB200 = {"provider": "local", "instance_type": "BM.GPU.GB200.4", "model": "deepseek-r1", "quantization": "nvfp4"}


def target(**kw) -> Target:
    return Target(**{"name": "t", **GB200, **kw})


def refused(**kw) -> str:
    with pytest.raises(ValidationError) as e:
        target(**kw)
    return str(e.value)


def test_rack_shape_nodes_roles_and_billed_gpus():
    t = target(cluster={"rack": "gb200-nvl72", "nodes": 3, "prefill": {"tp": 4}, "decode": {"workers": 2, "tp": 4}})
    assert t.nodes == 3 and t.gpus_used == 12  # every GPU of every node is billed
    assert layout_for(t.cluster, 4) == ["prefill", "decode", "decode"]
    assert t.cluster.kv_path == "nvlink"
    full = target(cluster={"rack": "gb200-nvl72", "decode": {"workers": 2, "tp": 8}})
    assert full.nodes == racks()["gb200-nvl72"]["trays"] == 18
    assert layout_for(full.cluster, 4).count("idle") == 18 - 1 - 4  # a tp8 worker spans two 4-GPU trays


def test_plain_nodes_cluster_uses_the_network_for_kv():
    t = Target(
        name="b",
        provider="local",
        instance_type="BM.GPU.B200.8",
        model="deepseek-r1",
        quantization="fp8",
        cluster={"nodes": 4, "prefill": {"workers": 2, "tp": 8}, "decode": {"workers": 1, "tp": 8, "ep": 16}},
    )
    assert t.cluster.kv_path == "nixl" and layout_for(t.cluster, 8) == ["prefill", "prefill", "decode", "decode"]


def test_roles_that_do_not_fit_name_the_field():
    msg = refused(cluster={"nodes": 2, "prefill": {"workers": 2, "tp": 4}, "decode": {"workers": 2, "tp": 4}})
    assert "cluster.nodes" in msg and "take 4 nodes" in msg
    assert "cluster.nodes: a gb200-nvl72 rack has 18 trays" in refused(cluster={"rack": "gb200-nvl72", "nodes": 19})
    assert "cluster.decode" in refused(cluster={"nodes": 4, "decode": {"tp": 3}})
    assert "cluster.nodes: give nodes" in refused(cluster={})


def test_rack_on_a_cloud_that_does_not_offer_it():
    msg = refused(provider="aws", instance_type="p6-b200.48xlarge", quantization="fp8", cluster={"rack": "gb300-nvl72"})
    assert "cluster.rack: aws does not offer gb300-nvl72" in msg and "gb200-nvl72" in msg
    msg = refused(provider="aws", instance_type="p6-b200.48xlarge", quantization="fp8", cluster={"rack": "gb200-nvl72"})
    assert "instance_type: aws sells gb200-nvl72 as p6e-gb200.36xlarge" in msg
    vultr = {"provider": "vultr", "instance_type": "vbm-256c-3072gb-8-mi355x-gpu", "quantization": "fp8"}
    assert "cluster: vultr has no multi-node placement offer" in refused(**vultr, cluster={"nodes": 2})
    # a rack shape needs its own GPU in trays of its size
    assert "a gb200-nvl72 tray is 4 gb200" in refused(
        instance_type="BM.GPU.B200.8", quantization="fp8", cluster={"rack": "gb200-nvl72", "nodes": 2}
    )


def test_every_offer_and_rack_carries_a_source_and_date():
    for name, row in [*offers().items(), *racks().items()]:
        assert row.get("source") and row.get("as_of"), name
        for rack, sold in (row.get("racks") or {}).items():
            assert rack in racks() and sold.get("source") and sold.get("as_of"), (name, rack)


def test_a_cluster_prices_every_node_in_the_budget_guard():
    from bakeoff.spend.budget import guard_usd_per_hour

    one = target()
    three = target(cluster={"rack": "gb200-nvl72", "nodes": 3, "decode": {"workers": 2, "tp": 4}})
    assert guard_usd_per_hour(three) == pytest.approx(3 * guard_usd_per_hour(one))
