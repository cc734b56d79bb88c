"""EC2 lifecycle against moto in server mode: tags, idempotent retry, capacity failover, terminate."""

from __future__ import annotations

import base64

import boto3
import pytest
from botocore.exceptions import ClientError
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.providers import CapacityError, ProviderError
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.aws.api import client_token


def _ec2(creds, region="us-east-1"):
    return boto3.client(
        "ec2",
        region_name=region,
        endpoint_url=creds["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _live(creds, run_id, region="us-east-1"):
    res = _ec2(creds, region).describe_instances(
        Filters=[
            {"Name": "tag:bakeoff:run_id", "Values": [run_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    return [i for r in res for i in r["Instances"]]


@pytest.mark.slow
def test_launch_tags_kill_switch_and_ssm_ami(aws_creds):
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    raw = _live(aws_creds, rid)
    assert len(raw) == 1 and inst.id == f"us-east-1/{raw[0]['InstanceId']}"
    tags = {x["Key"]: x["Value"] for x in raw[0]["Tags"]}
    assert tags["bakeoff:run_id"] == rid and tags["bakeoff:target"] == t.slug and tags["bakeoff:expires_at"].isdigit()
    ec2 = _ec2(aws_creds)
    attr = ec2.describe_instance_attribute(
        InstanceId=raw[0]["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
    )
    assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    ud = ec2.describe_instance_attribute(InstanceId=raw[0]["InstanceId"], Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(ud).decode()
    assert "shutdown -h +" in script and "--api-key" not in script  # the key reaches vLLM by env file, not argv
    ami = boto3.client(
        "ssm",
        region_name="us-east-1",
        endpoint_url=aws_creds["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).get_parameter(Name="/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id")[
        "Parameter"
    ]["Value"]
    assert raw[0]["ImageId"] == ami
    # the per-run security group opens only the serving and agent ports, only to the plan's CIDR
    sg = ec2.describe_security_groups(GroupIds=[raw[0]["SecurityGroups"][0]["GroupId"]])["SecurityGroups"][0]
    perms = sg["IpPermissions"]
    assert [(x["FromPort"], x["ToPort"], [r["CidrIp"] for r in x["IpRanges"]]) for x in perms] == [
        (8000, 8000, ["127.0.0.1/32"]),
        (8089, 8089, ["127.0.0.1/32"]),
    ]
    assert p.wait_ready(inst, 10).state == "running"
    assert p.terminate(inst.id) is True


def test_retried_create_reuses_the_instance(aws_creds):
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    a = p.create(t, rid, **launch_args(rid, t))
    b = AwsProvider(aws_creds).create(t, rid, **launch_args(rid, t))  # a retried task: fresh process, same run
    assert a.id == b.id and len(_live(aws_creds, rid)) == 1
    assert client_token(rid, t.slug, "us-east-1") == client_token(rid, t.slug, "us-east-1")
    assert client_token(rid, t.slug, "us-east-1") != client_token(rid, t.slug, "us-west-2")
    assert len(client_token(rid, t.slug, "us-east-1")) <= 64
    p.terminate(a.id)


def test_capacity_error_fails_over_to_the_next_placement(aws_creds, moto_server):
    moto_server.gate.denied = {"us-east-1a", "us-east-1b"}
    p = AwsProvider(aws_creds)
    t, rid = make_target("aws", regions=["us-east-1", "us-west-2"], zones=["us-east-1a", "us-east-1b"]), new_run_id()
    assert [(pl.region, pl.zone) for pl in p.placements(t)] == [
        ("us-east-1", "us-east-1a"),
        ("us-east-1", "us-east-1b"),
        ("us-west-2", None),
    ]
    inst = p.create(t, rid, **launch_args(rid, t))
    assert inst.region == "us-west-2" and len(_live(aws_creds, rid, "us-west-2")) == 1 and not _live(aws_creds, rid)
    prov = inst.provisioning.model_dump(
        mode="json"
    )  # the lifecycle's record: both zones refused, then the region took it
    assert prov["attempts"] == 3 and prov["refusals"] == {"capacity": 2} and prov["placement"] == "us-west-2"
    assert [r["where"] for r in prov["refused"]] == ["us-east-1a", "us-east-1b"]
    assert prov["instance_types"] == [t.instance_type] and prov["launch_s"] is not None
    p.terminate(inst.id)


def test_capacity_everywhere_refused_names_what_was_tried(aws_creds, moto_server):
    moto_server.gate.denied = {"us-east-1", "us-west-2"}
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1", "us-west-2"]), new_run_id()
    with pytest.raises(CapacityError) as e:
        p.create(t, rid, **launch_args(rid, t))
    msg = str(e.value)
    assert "us-east-1 (InsufficientInstanceCapacity)" in msg and "us-west-2 (InsufficientInstanceCapacity)" in msg
    assert "capacity_reservation_id" in msg
    assert p.list_tagged(rid) == []


def test_terminate_is_idempotent_and_list_tagged_forgets(aws_creds):
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    assert [i.id for i in p.list_tagged(rid)] == [inst.id]
    assert p.terminate(inst.id) is True
    assert p.terminate(inst.id) is False
    assert p.list_tagged(rid) == []
    assert p.describe(inst.id).state == "terminated"


def test_missing_ingress_is_refused_before_any_call(aws_creds, moto_server):
    t = make_target("aws", ingress_cidr=None)
    before = moto_server.gate.requests
    with pytest.raises(ProviderError, match="provider_options.ingress_cidr"):
        AwsProvider(aws_creds).create(t, new_run_id(), **launch_args("r", t))
    assert moto_server.gate.requests == before


def test_a_reused_client_token_with_other_parameters_is_refused(aws_creds):
    """EC2's rule, held by the sandbox gate: a token replays its launch only for the same parameters."""
    ec2 = _ec2(aws_creds)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    kw = dict(
        ImageId=ami, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1, ClientToken="bakeoff-t-" + new_run_id()[-6:]
    )
    first = ec2.run_instances(**kw)["Instances"][0]["InstanceId"]
    assert ec2.run_instances(**kw)["Instances"][0]["InstanceId"] == first  # the same request: the same node
    with pytest.raises(ClientError) as e:
        ec2.run_instances(**kw, UserData="changed")
    assert e.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    ec2.terminate_instances(InstanceIds=[first])


def test_a_retry_whose_parameters_changed_adopts_the_tokens_node(aws_creds, monkeypatch):
    """A retried launch whose request changed (a republished AMI, a re-staged client bundle) is refused
    by EC2; the provider finds the earlier attempt's node instead of failing or launching a second."""
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    first = p.create(t, rid, **launch_args(rid, t))
    late = AwsProvider(aws_creds)
    real = late.list_tagged
    calls = iter([[]])  # the duplicate guard misses the node (eventual consistency); the later lookup finds it
    monkeypatch.setattr(late, "list_tagged", lambda run_id=None: next(calls, None) or real(run_id))
    again = late.create(t, rid, **launch_args(rid, t))  # a fresh expiry and key: other parameters, same token
    assert again.id == first.id and len(_live(aws_creds, rid)) == 1
    p.terminate(first.id)


def test_capacity_block_reservation_is_requested(aws_creds):
    p = AwsProvider(aws_creds)
    t, rid = make_target("aws", regions=["us-east-1"], capacity_reservation_id="cr-0123456789abcdef0"), new_run_id()
    seen = {}
    p._client("ec2", "us-east-1").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **kw: seen.update(params)
    )
    inst = p.create(t, rid, **launch_args(rid, t))
    assert seen["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert (
        seen["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"]
        == "cr-0123456789abcdef0"
    )
    assert seen["ClientToken"] == client_token(rid, t.slug, "us-east-1")
    p.terminate(inst.id)


def test_without_configured_regions_every_account_region_is_scanned(aws_creds):
    creds = {k: v for k, v in aws_creds.items() if k != "regions"}
    regions = AwsProvider(creds).regions
    assert {"eu-west-1", "ap-northeast-1", "us-east-1"} <= set(regions)
    assert AwsProvider(aws_creds).regions == ["us-east-1", "us-east-2", "us-west-2"]


def test_reaper_terminates_an_ended_runs_instance_and_deletes_its_security_group(aws_creds, data_root):
    from bakeoff.cleanup import reaper

    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    sg = _live(aws_creds, rid)[0]["SecurityGroups"][0]["GroupId"]
    ended = {rid: "success"}  # the DAG run's state, as Airflow answers it
    out = reaper.reap(
        provider_names=["aws"], credentials_fn=lambda name: aws_creds, run_state=lambda plan, run_id: ended.get(run_id)
    )
    assert inst.id in {r["id"] for r in out["terminated"]} and f"us-east-1/{sg}" in out["cleaned"]
    assert not _ec2(aws_creds).describe_security_groups(Filters=[{"Name": "group-id", "Values": [sg]}])[
        "SecurityGroups"
    ]


def test_a_region_refusing_calls_blocks_only_targets_that_may_launch_there(aws_creds, moto_server):
    """The reuse check lists every region; one the target never launches in must not stop its create,
    while a failing region among the target's own placements still does (a duplicate node bills)."""
    moto_server.gate.fail_regions = {"us-east-2"}
    try:
        rid = new_run_id()
        t = make_target("aws", regions=["us-east-1"])
        inst = AwsProvider(aws_creds).create(t, rid, **launch_args(rid, t))
        assert inst.id.startswith("us-east-1/")
        t2 = make_target("aws", regions=["us-east-2"])
        with pytest.raises(ProviderError, match="us-east-2"):
            AwsProvider(aws_creds).create(t2, new_run_id(), **launch_args(rid, t2))
    finally:
        moto_server.gate.fail_regions = set()
    AwsProvider(aws_creds).terminate(inst.id)


@pytest.mark.slow
def test_a_relaunch_after_termination_gets_a_new_node_not_the_terminated_one(aws_creds):
    """A cleared provision task launches again: the ClientToken carries the launch count, so EC2 does
    not hand back the terminated node (which would fail wait_ready as 'ended before it was ready')."""
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    first = p.create(t, rid, **launch_args(rid, t))
    assert p.terminate(first.id) is True
    args = launch_args(rid, t)
    args["spec"] = {**args["spec"], "launch": 1}  # the pipeline counts the target's recorded launches
    second = AwsProvider(aws_creds).create(t, rid, **args)
    assert second.id != first.id and [i["InstanceId"] for i in _live(aws_creds, rid)] == [second.id.split("/")[1]]
    assert p.wait_ready(second, 10).state == "running"
    p.terminate(second.id)
