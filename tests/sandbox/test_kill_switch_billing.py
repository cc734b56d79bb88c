"""Each cloud's kill switch, acted out by the sandbox's nodes on its clock, and billed as the cloud bills:
EC2 power-off terminates; an OCI node deletes itself as its instance principal; a Vultr or
DigitalOcean node powers off and bills on until the independent reaper deletes it (DigitalOcean
shows the droplet off; Vultr's API cannot show a bare-metal node halted, so its expiry tag is the
kill-switch time)."""

from __future__ import annotations

import json
import time

import pytest

from bakeoff import store
from bakeoff.cleanup import reaper
from bakeoff.plan import load_plan
from bakeoff.run import pipeline, provisioning
from bakeoff.serving import userdata
from bakeoff_sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(boot_s=0.1) as sb:
        yield sb


def one_target_plan(tmp_path, provider: str, **overrides) -> str:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    by_provider = {t["provider"]: t for t in raw["targets"]}
    by_provider["oci"] = load_plan("mi355x-vs-b200-oci-sandbox").model_dump(mode="json")["targets"][1]
    if provider == "digitalocean":
        t = dict(
            by_provider["vultr"],
            name="mi300x-vllm",
            provider="digitalocean",
            instance_type="gpu-mi300x8-1536gb",
            provider_options={**by_provider["vultr"]["provider_options"], "regions": ["atl1"]},
        )
    else:
        t = by_provider[provider]
    raw.update(name=f"killswitch-{provider}", targets=[t], **overrides)
    path = tmp_path / f"ks-{provider}.yaml"
    path.write_text(json.dumps(raw))
    return str(path)


def launch(sandbox, tmp_path, provider: str, run_id: str):
    with sandbox.exported():
        run = pipeline.start_run(one_target_plan(tmp_path, provider), run_id)
        slug = run["targets"][0]
        inst = provisioning.provision(run["run_dir"], slug)
    return run, slug, inst


@pytest.mark.parametrize(
    "provider,after_switch", [("aws", "gone"), ("oci", "gone"), ("vultr", "billing"), ("digitalocean", "billing")]
)
def test_kill_switch_ends_billing_where_the_cloud_allows_and_the_reaper_does_the_rest(
    sandbox, data_root, tmp_path, provider, after_switch
):
    before = set(sandbox.live()[provider])
    t0 = sandbox.clock.now()
    run, slug, inst = launch(sandbox, tmp_path, provider, f"manual__ks_{provider}")
    node = next(iter(set(sandbox.live()[provider]) - before))
    horizon = sandbox.backing.next_due() - t0
    assert 0 < horizon <= 2 * 3600 + 60  # the budgeted time, at most max_instance_hours

    sandbox.clock.advance(horizon + 600)  # ten minutes past the kill switch, and no Airflow
    left = set(sandbox.live()[provider]) - before
    billed = sandbox.billed_minutes(provider, t0)
    if after_switch == "gone":
        assert left == set()
        assert billed == pytest.approx(horizon / 60, abs=0.5)  # billed up to the switch, not a minute more
    else:
        assert left == {node}  # powered off, but the cloud still bills a stopped node
        assert billed == pytest.approx(horizon / 60 + 10, abs=0.5)
        out = reaper.reap(now=sandbox.clock.now(), provider_names=[provider], credentials_fn=sandbox.credentials)
        assert [r["id"] for r in out["terminated"]] == [inst["id"]]
        # DigitalOcean shows the droplet off; Vultr cannot show it halted, so its expiry (the kill-switch time) decides
        assert ("expired" if provider == "vultr" else "powered off") in out["terminated"][0]["reason"]
        assert set(sandbox.live()[provider]) - before == set()
        sandbox.clock.advance(3600)
        assert sandbox.billed_minutes(provider, t0) == pytest.approx(billed, abs=0.1)  # deleted: billing ended


def test_ec2_power_off_stops_but_does_not_terminate_without_the_shutdown_behaviour(sandbox):
    """The fake follows EC2: the terminate-on-shutdown launch flag, not the power-off, ends the instance."""
    import boto3

    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=sandbox.moto.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    iids = {}
    for behaviour in ("stop", "terminate"):
        iids[behaviour] = ec2.run_instances(
            ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.micro", InstanceInitiatedShutdownBehavior=behaviour
        )["Instances"][0]["InstanceId"]
    assert sandbox.moto.gate.power_off(f"us-east-1/{iids['stop']}") == "stopped"
    assert sandbox.moto.gate.power_off(f"us-east-1/{iids['terminate']}") == "terminated"
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=list(iids.values()))["Reservations"]
        for i in r["Instances"]
    }
    assert states == {iids["stop"]: "stopped", iids["terminate"]: "terminated"}
    ec2.terminate_instances(InstanceIds=[iids["stop"]])


@pytest.mark.parametrize(
    "provider,action",
    [("aws", "terminate"), ("oci", "self-delete"), ("vultr", "power-off"), ("digitalocean", "power-off")],
)
def test_boot_script_arms_the_kill_switch_that_ends_billing_on_its_cloud(tmp_path, provider, action):
    t = load_plan(one_target_plan(tmp_path, provider)).targets[0]
    script = userdata.render(t, api_key="k" * 24, shutdown_after_s=3000, ingress_cidr=None)
    switch = userdata.kill_switch_from_userdata(script)
    assert switch == {"action": action, "cloud": provider, "minutes": 51}
    assert userdata.shutdown_minutes(script) >= 51  # the power-off timer is armed on every cloud
    if provider == "oci":
        assert "Authorization: Bearer Oracle" in script and "169.254.169.254/opc/v2/instance/id" in script
        assert "InstancePrincipalsSecurityTokenSigner" in script and "terminate_instance" in script
        assert script.index("sleep 3060") < script.index("terminate_instance") < script.index("\n poweroff)")


def test_a_vultr_node_expires_at_its_kill_switch_not_at_max_instance_hours(sandbox, data_root, tmp_path):
    """Vultr cannot show the node halted, so its expiry tag is the kill-switch time: the reaper deletes
    it then, however much longer max_instance_hours would have allowed."""
    t_real, t_sandbox = time.time(), sandbox.clock.now()
    with sandbox.exported():
        run = pipeline.start_run(one_target_plan(tmp_path, "vultr", max_instance_hours=12), "manual__ks_vultr_exp")
        inst = provisioning.provision(run["run_dir"], run["targets"][0])
    switch_after = sandbox.backing.next_due() - t_sandbox
    expires = float(inst["expires_at"])
    prov = store.read_record(run["run_dir"], "provision", run["targets"][0])["provisioning"]
    assert prov["attempts"] == 1 and prov["refusals"] == {} and prov["create_s"] >= 0  # the provisioning record
    assert switch_after < 11 * 3600  # the plan lets the node live far longer than its switch
    assert switch_after - 120 <= expires - t_real <= switch_after + 5  # the same moment, boot aside
    early = reaper.reap(now=expires - 60, provider_names=["vultr"], credentials_fn=sandbox.credentials)
    assert inst["id"] in [r["id"] for r in early["kept"]]
    out = reaper.reap(now=expires + 1, provider_names=["vultr"], credentials_fn=sandbox.credentials)
    assert inst["id"] in [r["id"] for r in out["terminated"]] and not out["errors"]


def test_a_create_refused_in_every_region_leaves_a_record_the_report_reads(sandbox, data_root, tmp_path):
    """No node, so no provision record: the refusal is recorded (where it asked, why), for the report's
    provisioning section and the dashboard's stockout trend."""
    from bakeoff.providers.base import CapacityError
    from bakeoff.report.provisioning import rows

    path = one_target_plan(tmp_path, "vultr")
    plan = load_plan(path)
    regions = list(plan.targets[0].provider_options.regions)
    sandbox.deny_capacity("vultr", regions)
    try:
        with sandbox.exported():
            run = pipeline.start_run(path, "manual__stockout_vultr")
            with pytest.raises(CapacityError):
                provisioning.provision(run["run_dir"], run["targets"][0])
    finally:
        sandbox.deny_capacity("vultr", [])
    refused = store.read_record(run["run_dir"], "provision_refused", run["targets"][0])
    assert refused["reason"] == "capacity" and refused["offers"] == [
        f"{plan.targets[0].instance_type} in {r}" for r in regions
    ]
    assert store.read_record(run["run_dir"], "provision", run["targets"][0]) is None
    (row,) = rows(plan, store.run_facts(run["run_dir"]), time.time())
    assert row.outcome == "refused everywhere (capacity)" and row.refusals == {"capacity": len(regions)}
