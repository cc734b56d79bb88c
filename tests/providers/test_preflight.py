"""`bakeoff preflight` against the sandbox clouds: every check passes on the installed sandbox plans,
each one can fail (and names the field to fix), and nothing is ever launched."""

from __future__ import annotations

import copy
import json
import re

import boto3
import pytest

from bakeoff import catalog
from bakeoff.cli import main
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.preflight import FAIL, OK, WARN, blocking, preflight
from bakeoff_sandbox import Sandbox
from bakeoff_sandbox import oci as fake_oci

PLANS = ("mi355x-vs-b200-sandbox", "mi355x-vs-b200-oci-sandbox")


@pytest.fixture(scope="module")
def sb():
    with Sandbox() as box:
        yield box


def _rows(plan, sb, target=None):
    return {(r.target, r.check): r for r in preflight(plan, sb.credentials) if target in (None, r.target)}


def _variant(plan_name: str, from_provider: str, **changes):
    raw = load_plan(plan_name).model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == from_provider))
    t["provider_options"].update(changes.pop("provider_options", {}))
    t.update(changes)
    raw["targets"] = [t]
    return plan_from_dict(raw), t["name"]


def _ec2_instances(sb) -> set[str]:
    """Every EC2 instance moto holds that is not terminated (moto's state is per process, shared with
    other test modules: compare before and after, never against nothing)."""
    out = set()
    for region in ("us-east-1", "us-west-2"):
        ec2 = boto3.client(
            "ec2", region_name=region, endpoint_url=sb.moto.url, aws_access_key_id="t", aws_secret_access_key="t"
        )
        res = ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
        )
        out |= {i["InstanceId"] for r in res["Reservations"] for i in r["Instances"]}
    return out


@pytest.mark.slow
def test_every_check_passes_on_the_sandbox_plans_and_nothing_is_launched(sb, capsys, monkeypatch):
    monkeypatch.setenv("BAKEOFF_CREDENTIALS", json.dumps(sb.all_credentials()))
    before = _ec2_instances(sb)
    # moto's instances are shared with earlier test modules: the account's quota covers what they hold
    sb.moto.gate.quotas["L-417A185B"] = 384.0 + 192 * len(before)
    for name in PLANS:
        assert main(["preflight", name]) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "FAIL" not in out and "nothing would stop the run" in out
        assert out.splitlines()[0].split() == ["target", "check", "result", "fix"]
    rows = preflight(load_plan(PLANS[0]), sb.credentials) + preflight(load_plan(PLANS[1]), sb.credentials)
    sb.moto.gate.quotas["L-417A185B"] = 384.0
    checks = {(r.target.split("-")[0], r.check) for r in rows if r.result == OK}
    assert {("b200", c) for c in ("credentials", "offered", "quota", "image", "dry run")} <= checks
    assert {("mi355x", c) for c in ("credentials", "offered", "capacity", "limit", "image")} <= checks
    # each target ends with what its cloud's pre-flight could not try, the EC2 one its stand-in group
    untried = [r for r in rows if r.check == "not tried"]
    assert len(untried) == len([r for r in rows if r.check == "credentials"])
    assert all(r.result == "n/a" and "boot script" in r.detail for r in untried)
    assert any("default group stood in" in r.detail for r in untried)
    # no billable resource exists anywhere afterwards
    assert _ec2_instances(sb) == before and sb.fakes["vultr"].live() == [] and sb.fakes["digitalocean"].live() == []
    assert sb.fakes["oci"].live() == [] and sb.fakes["digitalocean"].firewalls == {} and sb.fakes["oci"].nsgs == {}


def test_each_ec2_check_can_fail(sb):
    before = _ec2_instances(sb)
    plan, t = _variant(PLANS[0], "aws", provider_options={"regions": ["xx-nowhere-1"]})
    rows = _rows(plan, sb)
    assert rows[(t, "region")].result == FAIL and "targets[0].provider_options.regions" in rows[(t, "region")].fix
    assert rows[(t, "offered")].result == FAIL
    plan, t = _variant(PLANS[0], "aws", provider_options={"ami": "ami-00000000deadbeef"})
    assert _rows(plan, sb)[(t, "image")].result == FAIL
    plan, t = _variant(PLANS[0], "aws")
    gate = sb.moto.gate
    gate.quotas["L-417A185B"] = 100.0
    gate.unauthorized = {"RunInstances"}
    try:
        rows = _rows(plan, sb)
    finally:
        gate.quotas["L-417A185B"], gate.unauthorized = 384.0, set()
    assert rows[(t, "quota")].result == FAIL and re.search(
        r"100 vCPU, \d+ in use, 192 needed", rows[(t, "quota")].detail
    )
    assert rows[(t, "dry run")].result == FAIL and "UnauthorizedOperation" in rows[(t, "dry run")].detail
    gate.fail_regions = {"us-east-1"}
    try:
        rows = _rows(plan, sb)
    finally:
        gate.fail_regions = set()
    assert rows[(t, "credentials")].result == FAIL and len(blocking(list(rows.values()))) == 1
    assert _ec2_instances(sb) == before


def test_each_oci_check_can_fail(sb):
    fake = sb.fakes["oci"]
    plan, t = _variant(PLANS[1], "oci")
    fake.denied, fake.limits["gpu-mi355x-count"] = set(fake_oci.ADS), 0
    try:
        rows = _rows(plan, sb)
    finally:
        fake.denied, fake.limits["gpu-mi355x-count"] = set(), 64
    assert rows[(t, "capacity")].result == FAIL and rows[(t, "limit")].result == FAIL
    assert "request a service limit increase for gpu-mi355x-count" in rows[(t, "limit")].fix
    fake.shapes.discard("BM.GPU.MI355X.8")
    try:
        assert _rows(plan, sb)[(t, "offered")].result == FAIL
    finally:
        fake.shapes.add("BM.GPU.MI355X.8")
    plan, t = _variant(PLANS[1], "oci", provider_options={"availability_domains": ["Uocm:US-ASHBURN-AD-9"]})
    assert "availability_domains" in _rows(plan, sb)[(t, "availability domain")].fix
    bogus = fake_oci.fixed_ocid("image", "nosuchimage", "iad")
    plan, t = _variant(PLANS[1], "oci", provider_options={"image_ocid": bogus})
    assert _rows(plan, sb)[(t, "image")].result == FAIL
    other = dict(sb.credentials("oci"), tenancy=fake_oci.fixed_ocid("tenancy", "someoneelse"))
    rows = {(r.target, r.check): r for r in preflight(plan, lambda name: other)}
    assert rows[(t, "credentials")].result == FAIL and "NotAuthenticated" in rows[(t, "credentials")].detail
    assert fake.live() == []


def test_each_vultr_and_digitalocean_check_can_fail(sb):
    offer = sb.fakes["vultr"].catalog.offer
    saved = copy.deepcopy(offer)
    plan, t = _variant(PLANS[0], "vultr", provider_options={"regions": ["sjc"]})
    assert _rows(plan, sb)[(t, "offered")].result == FAIL
    do_plan, d = _variant(
        PLANS[0],
        "vultr",
        provider="digitalocean",
        instance_type="gpu-mi300x8-1536gb",
        provider_options={"regions": ["atl1"]},
    )
    assert {r.result for k, r in _rows(do_plan, sb).items() if k[1] not in ("price", "image provides")} <= {OK, "n/a"}
    try:
        offer["vultr_plans"].pop("vbm-256c-3072gb-8-mi355x-gpu")
        offer["vultr_os"].clear()
        offer["do_sizes"]["gpu-mi300x8-1536gb"]["regions"] = ["nyc2"]
        offer["do_images"].clear()
        offer["do_droplet_limit"] = 0
        plan, t = _variant(PLANS[0], "vultr")
        rows = _rows(plan, sb)
        assert rows[(t, "offered")].result == FAIL and rows[(t, "image")].result == FAIL
        rows = _rows(do_plan, sb)
        assert {c for (_, c), r in rows.items() if r.result == FAIL} == {"offered", "quota", "image"}
        assert "provider_options.regions" in rows[(d, "offered")].fix
    finally:
        offer.clear()
        offer.update(saved)
    bad = lambda name: {**sb.credentials(name), "token": "wrong"}  # noqa: E731
    rows = {(r.target, r.check): r for r in preflight(do_plan, bad)}
    assert rows[(d, "credentials")].result == FAIL and "token" in rows[(d, "credentials")].fix
    assert sb.fakes["vultr"].live() == [] and sb.fakes["digitalocean"].live() == []


def test_rest_regions_and_ssh_keys_are_read_back_and_can_fail(sb):
    offer = sb.fakes["vultr"].catalog.offer
    vultr_key, do_key = next(iter(offer["vultr_ssh_keys"])), next(iter(offer["do_ssh_keys"]))
    plan, t = _variant(PLANS[0], "vultr", provider_options={"ssh_key_ids": [vultr_key]})
    do_plan, d = _variant(
        PLANS[0],
        "vultr",
        provider="digitalocean",
        instance_type="gpu-mi300x8-1536gb",
        provider_options={"regions": ["atl1"], "ssh_key_ids": [do_key]},
    )
    for p, name in ((plan, t), (do_plan, d)):
        rows = _rows(p, sb)
        assert rows[(name, "region")].result == OK and rows[(name, "ssh keys")].result == OK
    plan, t = _variant(PLANS[0], "vultr", provider_options={"regions": ["xxx"], "ssh_key_ids": ["nokey"]})
    rows = _rows(plan, sb)
    assert rows[(t, "region")].result == FAIL and "use ewr, lax, ord" in rows[(t, "region")].fix
    assert rows[(t, "ssh keys")].result == FAIL and "ssh_key_ids" in rows[(t, "ssh keys")].fix
    do_plan, d = _variant(
        PLANS[0],
        "vultr",
        provider="digitalocean",
        instance_type="gpu-mi300x8-1536gb",
        provider_options={"regions": ["atl1", "zz9"], "ssh_key_ids": ["999"]},
    )
    rows = _rows(do_plan, sb)
    assert rows[(d, "region")].result == WARN and "zz9 not listed" in rows[(d, "region")].detail
    assert rows[(d, "ssh keys")].result == FAIL and "999 not on the account" in rows[(d, "ssh keys")].detail
    # every read answered as the vendored definitions say, and none refused
    assert sb.fakes["vultr"].answer_problems == [] and sb.fakes["digitalocean"].answer_problems == []
    assert sb.fakes["vultr"].refused == [] and sb.fakes["digitalocean"].refused == []


def test_what_the_default_image_provides_is_held_to_the_clouds_listing(sb, monkeypatch):
    from bakeoff import catalog

    plan, t = _variant(PLANS[0], "vultr")
    row = _rows(plan, sb)[(t, "image provides")]
    assert row.result == WARN and row.detail.startswith("Ubuntu 24.04 LTS x64 (unverified)")
    assert "has no GPU driver, so the boot would stop" in row.detail and "amdgpu and ROCm" in row.fix
    own, o = _variant(PLANS[0], "vultr", provider_options={"os_image": 2284})
    assert _rows(own, sb)[(o, "image provides")].result == "n/a"
    sb.fakes["vultr"].catalog.offer["vultr_os"][2284]["name"] = "Ubuntu 26.04 LTS x64"
    try:
        row = _rows(plan, sb)[(t, "image provides")]
    finally:
        sb.fakes["vultr"].catalog.offer["vultr_os"][2284]["name"] = "Ubuntu 24.04 LTS x64"
    assert row.result == WARN and "the listing names it 'Ubuntu 26.04 LTS x64'" in row.detail
    # a record with a dated source that says the driver is missing stops the run before any spend
    vultr = catalog.node_images()["vultr"]
    dated = vultr.model_copy(update={"ref": catalog.NameRef(source="a page", as_of="2026-12-01")})
    recorded = catalog.node_images()
    monkeypatch.setattr(catalog, "node_images", lambda: {**recorded, "vultr": dated})
    row = _rows(plan, sb)[(t, "image provides")]
    assert row.result == FAIL and "the boot would stop" in row.detail


def test_an_undated_price_is_a_warning_not_a_stop(sb, monkeypatch):
    plan = load_plan(PLANS[1])
    dated = [r for r in preflight(plan, sb.credentials) if r.check == "price"]
    assert dated and all("undated" not in r.detail for r in dated)  # the catalog dates its prices
    for t in plan.targets:  # a price whose snapshot has no date
        it = catalog.instance_types()[t.instance_type]
        monkeypatch.setitem(catalog.instance_types(), it.type, it.model_copy(update={"as_of": "undated"}))
    rows = preflight(plan, sb.credentials)
    price = [r for r in rows if r.check == "price"]
    assert price and all(r.result == WARN and "undated" in r.detail for r in price)
    assert not blocking(rows)


def test_the_dag_gate_goes_on_stops_or_refuses(sb):
    from bakeoff.preflight import PreflightFailed, gate

    calls = []
    assert gate(PLANS[1], "off", credentials=lambda name: calls.append(name) or {}) is True and calls == []
    assert gate(PLANS[1], "check first", credentials=sb.credentials) is True
    assert gate(PLANS[1], "pre-flight only", credentials=sb.credentials) is False
    sb.fakes["oci"].denied = set(fake_oci.ADS)
    try:
        with pytest.raises(PreflightFailed, match="nothing was launched: mi355x-vllm capacity: out of host capacity"):
            gate(PLANS[1], "check first", {"targets": ["mi355x-vllm"]}, credentials=sb.credentials)
    finally:
        sb.fakes["oci"].denied = set()
    with pytest.raises(ValueError, match="params.preflight"):
        gate(PLANS[1], "maybe")
    assert sb.fakes["oci"].live() == []


def test_each_fallback_offer_is_checked_and_stops_the_run_only_when_none_passes(sb):
    """moto's EC2 offerings, like EC2's, list p5e.48xlarge in no us-east-1 zone."""
    plan, t = _variant(
        PLANS[0],
        "aws",
        instance_type=None,
        instance_types=["p5e.48xlarge", "p5en.48xlarge"],
        price={"usd_per_hour": 63.3},
        provider_options={"regions": ["us-east-1"]},
    )
    rows = _rows(plan, sb)
    missing, there = rows[(f"{t} [p5e.48xlarge]", "offered")], rows[(f"{t} [p5en.48xlarge]", "offered")]
    assert missing.result == WARN and "fallback: p5en.48xlarge passes" in missing.detail and there.result == OK
    assert blocking(list(rows.values())) == []
    plan, t = _variant(
        PLANS[0],
        "aws",
        instance_type=None,
        instance_types=["p5e.48xlarge", "p5en.48xlarge"],
        price={"usd_per_hour": 63.3},
        provider_options={"regions": ["xx-nowhere-1"]},
    )
    stops = blocking(preflight(plan, sb.credentials))  # no offer passes: every offer's FAIL stands
    assert {r.target for r in stops if r.check == "offered"} == {f"{t} [p5e.48xlarge]", f"{t} [p5en.48xlarge]"}
