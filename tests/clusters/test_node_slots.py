"""The per-cloud node limit (bakeoff.clusters.node_slots): claims up to the limit in the plan's order, a cluster
holding one per node, idempotent claims, releases, the Variable's bad values named, a target larger
than its limit refused at start_run, and concurrent claimers never over the limit."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
import yaml

from bakeoff import store
from bakeoff.clusters import node_slots
from bakeoff.clusters.node_slots import VARIABLE, NodeLimitError, claim, held, parse_limits, release, release_all
from bakeoff.plan import load_plan
from bakeoff.run import pipeline
from tests.clusters.slot_claimers import claimer


def _raw_plan(cluster_nodes: int = 2) -> dict:
    """Three one-node EC2 targets, a cluster EC2 target of ``cluster_nodes`` and a local one, in that order."""
    raw = load_plan("distributed-three-sandbox").model_dump(mode="json")
    big = json.loads(json.dumps(raw["targets"][0]))
    big["name"] = "ec2-cluster"
    big["cluster"] = {"nodes": cluster_nodes, "prefill": {"tp": 8}, "decode": {"tp": 8}, "deadline_s": 60}
    big["provider_options"]["client_mode"] = "remote"
    local = load_plan("local-demo").model_dump(mode="json")["targets"][0]
    raw["targets"] = [*raw["targets"], big, local]
    return raw


def _run(tmp_path: Path, limits: dict[str, int], cluster_nodes: int = 2) -> tuple[str, list[str]]:
    rdir = tmp_path / "plan" / "run_id=r1"
    store.write_json(rdir / "plan.json", _raw_plan(cluster_nodes))
    node_slots.record(rdir, limits)
    return str(rdir), [t["name"] for t in _raw_plan(cluster_nodes)["targets"]]


def test_claims_are_granted_up_to_the_limit_in_the_plans_order(tmp_path):
    rdir, (a, b, c, cluster, local) = _run(tmp_path, {"aws": 2})
    assert claim(rdir, a) and claim(rdir, b)
    assert not claim(rdir, c) and held(rdir) == {"aws": 2}
    assert claim(rdir, local)  # local: unlimited, whatever the clouds hold
    assert claim(rdir, a) and held(rdir) == {"aws": 2, "local": 1}  # a retry claims again what it holds, once
    # the cluster (2 nodes) comes after c: it waits for c's turn even when one node is free
    assert release(rdir, a) and not claim(rdir, cluster) and claim(rdir, c)
    assert release(rdir, b) and not claim(rdir, cluster)
    assert release(rdir, c) and claim(rdir, cluster) and held(rdir) == {"aws": 2, "local": 1}
    assert not release(rdir, a)  # released already


def test_a_cluster_takes_one_slot_per_node_and_a_later_target_waits_for_it(tmp_path):
    raw = _raw_plan(3)
    raw["targets"] = [raw["targets"][3], raw["targets"][0]]  # the cluster first, then one node
    rdir = tmp_path / "plan" / "run_id=r1"
    store.write_json(rdir / "plan.json", raw)
    node_slots.record(rdir, {"aws": 3})
    assert not claim(rdir, raw["targets"][1]["name"])  # the cluster is earlier and has not released
    assert claim(rdir, raw["targets"][0]["name"]) and held(rdir) == {"aws": 3}
    assert not claim(rdir, raw["targets"][1]["name"])
    assert release(rdir, raw["targets"][0]["name"]) and claim(rdir, raw["targets"][1]["name"])


def test_a_target_that_never_claimed_can_be_released_so_later_ones_need_not_wait(tmp_path):
    rdir, (a, b, c, *_rest) = _run(tmp_path, {"aws": 1})
    assert claim(rdir, a) and not claim(rdir, b)
    assert release(rdir, a) and not claim(rdir, c)  # b's turn comes first
    assert not release(rdir, b)  # b failed before it claimed: it held nothing, but frees its turn
    assert claim(rdir, c)


def test_release_all_frees_whatever_the_run_holds(tmp_path):
    rdir, (a, b, c, cluster, local) = _run(tmp_path, {"aws": 4})
    assert claim(rdir, a) and claim(rdir, b) and claim(rdir, local)
    assert sorted(release_all(rdir)) == sorted([a, b, local]) and held(rdir) == {}
    assert release_all(rdir) == []


def test_no_limit_recorded_or_a_provider_left_out_is_unlimited(tmp_path):
    rdir, names = _run(tmp_path, {"oci": 1})
    assert all(claim(rdir, n) for n in names)
    assert held(rdir) == {"aws": 5, "local": 1}


@pytest.mark.parametrize(
    "raw, key",
    [
        ('{"aws": 0}', "'aws'"),
        ('{"aws": "four"}', "'aws'"),
        ('{"aws": 2.5}', "'aws'"),
        ('{"aws": true}', "'aws'"),
        ('{"gcp": 2}', "'gcp'"),
        ('{"local": 2}', "'local'"),
        ('{"static": 1}', "'static'"),
        ("[4]", "not an object"),
        ("{aws: 4}", "not JSON"),
    ],
)
def test_a_bad_value_names_the_variable_the_key_and_the_fix(raw, key):
    with pytest.raises(NodeLimitError) as e:
        parse_limits(raw)
    assert VARIABLE in str(e.value) and key in str(e.value)
    assert "remove the key" in str(e.value) or f"set the Airflow Variable {VARIABLE}" in str(e.value)


def test_good_values_parse():
    assert parse_limits(None) == parse_limits("") == parse_limits(" ") == {}
    assert parse_limits('{"aws": 4, "oci": 2}') == parse_limits({"aws": 4, "oci": 2}) == {"aws": 4, "oci": 2}


def test_start_run_refuses_a_target_larger_than_its_limit_before_anything_is_recorded(tmp_path, data_root):
    raw = _raw_plan(3)
    raw["name"] = "too-big"
    path = tmp_path / "too-big.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(NodeLimitError, match=r"target 'ec2-cluster' needs 3 aws nodes.*'aws': 2"):
        pipeline.start_run(str(path), "manual__too_big", node_limits='{"aws": 2}')
    assert not store.run_dir("too-big", "manual__too_big").exists()
    with pytest.raises(NodeLimitError, match="key 'aws'"):
        pipeline.start_run(str(path), "manual__too_big", node_limits='{"aws": -1}')
    run = pipeline.start_run(str(path), "manual__fits", node_limits='{"aws": 3}')
    assert store.read_json(Path(run["run_dir"]) / node_slots.LIMITS) == {"aws": 3}


def test_concurrent_claimers_in_separate_processes_never_exceed_the_limit(tmp_path):
    raw = _raw_plan()
    one = raw["targets"][0]
    raw["targets"] = [{**json.loads(json.dumps(one)), "name": f"ec2-{i}"} for i in range(8)]
    rdir = tmp_path / "plan" / "run_id=r1"
    store.write_json(rdir / "plan.json", raw)
    node_slots.record(rdir, {"aws": 3})
    counter = tmp_path / "holders"
    counter.write_text("0")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=claimer, args=(str(rdir), f"ec2-{i}", str(counter), 0.05, out)) for i in reversed(range(8))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    most = [out.get(timeout=5) for _ in procs]
    assert max(most) <= 3 and held(rdir) == {}
