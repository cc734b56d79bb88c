"""EC2's pre-flight dry run sends the RunInstances request the launch sends (tags, root volume, security
groups, market options, user-data), built by the same code; against moto, which answers DryRun as EC2."""

from __future__ import annotations

import copy

import boto3
import pytest
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.base import Placement
from bakeoff.serving import userdata


def _recording(p: AwsProvider) -> list[tuple[str, dict]]:
    """Every EC2 request the provider's clients send, as (operation, parameters)."""
    sent: list[tuple[str, dict]] = []

    def record(params, model, **_):
        sent.append((model.name, copy.deepcopy(params)))

    p.session.events.register("provide-client-params.ec2", record)
    return sent


def _args(rid, t):
    args = launch_args(rid, t)
    args["spec"]["shutdown_after_s"] = 7200.0  # the kill switch's delay fixed, so two renders are equal
    return args


def _ec2(aws_creds):
    return boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=aws_creds["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_the_dry_run_sends_the_launchs_run_instances_request(aws_creds):
    p, t, rid = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"]), new_run_id()
    sent = _recording(p)
    args = _args(rid, t)
    inst = p.create(t, rid, **args)
    launched = [params for op, params in sent if op == "RunInstances"]
    sent.clear()
    tried = p.dry_run(t, rid, tags=args["tags"], spec=args["spec"], place=Placement("us-east-1"))
    dry = [params for op, params in sent if op == "RunInstances"]
    assert [(call, code) for call, code, _ in tried] == [("RunInstances", "DryRunOperation")]
    assert len(launched) == 1 and len(dry) == 1
    assert dry[0] == {**launched[0], "DryRun": True}
    for key in ("TagSpecifications", "BlockDeviceMappings", "SecurityGroupIds", "UserData"):
        assert launched[0][key], key  # the fields the old dry run left out are all there
    assert p.terminate(inst.id)


@pytest.mark.slow
def test_the_preflight_dry_run_tries_the_whole_launch_and_makes_nothing(aws_creds):
    t = make_target("aws", regions=["us-east-1"], capacity_reservation_id="cr-0123456789abcdef0")
    p, ec2 = AwsProvider(aws_creds), _ec2(aws_creds)
    groups_before = {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}
    sent = _recording(p)
    tried = p.preflight_dry_run(t, Placement("us-east-1"), userdata.stand_in_launch(t))
    assert [(call, code) for call, code, _ in tried] == [
        ("CreateSecurityGroup", "DryRunOperation"),
        ("RunInstances", "DryRunOperation"),
    ]
    (run,) = [params for op, params in sent if op == "RunInstances"]
    assert run["DryRun"] is True and run["InstanceType"] == t.instance_type
    assert run["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert run["BlockDeviceMappings"][0]["Ebs"] == {
        "VolumeSize": 1000,
        "VolumeType": "gp3",
        "DeleteOnTermination": True,
    }
    tags = {x["Key"] for x in run["TagSpecifications"][0]["Tags"]}
    assert {"bakeoff:run_id", "bakeoff:target", "bakeoff:expires_at", "bakeoff:installation", "bakeoff:port"} <= tags
    assert "bk-" + "0" * 40 in run["UserData"]  # the stand-in key, never a real one
    (group,) = [params for op, params in sent if op == "CreateSecurityGroup"]
    assert group["DryRun"] is True and group["TagSpecifications"][0]["ResourceType"] == "security-group"
    assert {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]} == groups_before


@pytest.mark.parametrize("refused", ["RunInstances", "CreateSecurityGroup"])
def test_a_refused_dry_run_call_is_reported_with_its_code(aws_creds, moto_server, refused):
    p, t = AwsProvider(aws_creds), make_target("aws", regions=["us-east-1"])
    moto_server.gate.unauthorized = {refused}
    try:
        tried = dict(
            (call, code)
            for call, code, _ in p.preflight_dry_run(t, Placement("us-east-1"), userdata.stand_in_launch(t))
        )
    finally:
        moto_server.gate.unauthorized = set()
    assert tried[refused] == "UnauthorizedOperation"
